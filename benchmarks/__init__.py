"""Benchmarks for cudafix: ``make bench`` (synthetic, ``run``) and ``make e2e-real`` (real wheels).

Nothing here is imported by cudafix itself; results go to ``bench-out/`` (git-ignored).
"""
