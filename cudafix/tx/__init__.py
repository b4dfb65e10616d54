"""The only room that changes an environment: lock, journal, snapshot, backend, probes, verify.

``context`` holds one run (the locks, the journal, snapshot/execute/commit/rollback);
``apply``, ``guard``, ``recovery`` and ``history`` are the flows built on it.
"""
