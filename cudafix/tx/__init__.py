"""The only room that changes an environment: lock, journal, snapshot, backend, probes, verify."""

DEFAULT_KEEP = 5
"""Committed snapshots ``gc`` keeps unless told otherwise (cheap to import for ``--help``)."""
