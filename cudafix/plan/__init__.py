"""Deciding what to do: selectors, the planner, doctor's findings, preconditions and scripts.

Functions of gathered facts. Two modules here read: ``facts`` gathers the environment and
``staging`` fetches wheels into a scratch directory outside it; neither writes the venv.
"""
