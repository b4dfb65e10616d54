"""cudafix: uninstall and repair Python environments that hold CUDA libraries, safely."""

__version__ = "0.1.0"
