"""The only room that changes an environment: lock, journal, snapshot, backend, probes, verify.

``context`` holds one run (both locks, begin/snapshot/execute/commit; the rollback is
``recovery``'s); ``apply`` (with ``files``), ``guard`` (``run --``) and ``undo`` are the
flows built on it; ``history`` reads the log back, ``trash`` deletes old snapshots.
``journal`` is the one codec for journal records. No module keeps state between runs.
"""
