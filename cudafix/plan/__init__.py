"""Deciding what to do: selectors, the planner, doctor's findings, preconditions and scripts.

Functions of gathered facts; ``facts`` is the one module here that reads (it gathers them).
"""
