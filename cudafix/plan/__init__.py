"""Deciding what to do: selectors, the planner, doctor's findings, preconditions and scripts.

Pure functions of data: the facts :mod:`cudafix.gather` reads before planning, and a
cleanup script's text its caller read. Nothing here reads a file or runs a process.
"""
