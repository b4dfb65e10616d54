"""Fetching and installer commands: the uv/pip backends, staging wheels, resolving installs.

Runs uv and pip (through :func:`cudafix.process.run`) and writes only to scratch
directories it deletes; it never changes the target environment itself: ``tx/`` drives
the backends inside a transaction, and the planner receives what was fetched as data.
"""
