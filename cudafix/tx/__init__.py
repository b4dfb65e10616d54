"""The only room that changes an environment: lock, journal, snapshot, backend, probes, verify."""
