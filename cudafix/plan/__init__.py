"""Deciding what to do: selectors, the planner, doctor's findings, preconditions and scripts.

Pure functions of gathered facts (:mod:`cudafix.gather` reads them before planning); the one
file read here is a cleanup script (``script``), never the environment.
"""
