"""Helpers shared by the tests: one home each (see tests/README.md).

``wheels``      the wheel builder (scenarios/wheel.py's) over a ``{path: bytes}`` mapping
``venvs``       real venvs made and changed with the real uv binary, offline
``tx``          the two-distribution venv of the transaction tests and Plan values built by hand
``cli``         the CLI run as a user runs it, and its one-line-error contract
``facts``       planner facts made by hand (no venv)
``loadertree``  trees of real shared objects, ``ldd`` and cudafix's loader side by side
``rawelf``      minimal shared objects of any ELF class, byte order and machine, byte by byte
``tty``         the CLI on a real terminal (a pty)
"""
