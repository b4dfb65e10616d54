"""Allow ``python -m cudafix``."""

from cudafix.cli import main

if __name__ == "__main__":
    main()
