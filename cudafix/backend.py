"""Every process cudafix spawns goes through here: uv, pip, and the target interpreter.

``run`` logs the command and captures its output, so the transaction journal can record
exactly what was run and what it said (pypa/build's ``run_subprocess``).
"""
