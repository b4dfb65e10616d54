"""Allow ``python -m cudafix``."""

from cudafix.cli.main import main

if __name__ == "__main__":
    main()
