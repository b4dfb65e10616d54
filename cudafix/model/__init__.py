"""Values only: names, errors and the plan. No I/O, no processes; every other room imports these.

The pydantic models build their validators on first use (``defer_build``): a command pays
only for the models it makes (a ``doctor`` never builds the plan's).
"""
