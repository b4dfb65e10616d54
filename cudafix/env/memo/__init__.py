"""What cudafix remembers of an environment between runs: its tree, facts, and answers.

One home for every per-environment memory kept in ``<prefix>/.cudafix/cache/``:

- :mod:`.index`: the index of facts, one SQLite file: per file its stat key and what was
  read from it (ELF verdicts, soname literals of Python sources, sha256), so a reading
  after a change reads only the files whose key moved;
- :mod:`.treecache`: directory listings and parsed dist-infos, so a warm walk lists only
  what changed;
- :mod:`.answers`: a read-only command's last answers, with the stamp of what they were
  read from (:class:`~.answers.ReadSet`), given again while that stamp holds;
- :mod:`.before`: doctor's findings kept beside its answer, which ``cudafix run``
  judges its command against;
- :mod:`.warm`: the warm path itself, which must import nothing heavy;
- :mod:`.stats`: each path's stat taken once per reading, shared by the stamps and the walk.

Nothing is imported here, so the warm path loads only the modules it uses. The index is
an SQLite database; each other memory is a plain JSON file (``statedir.save_cache``). A
missing, foreign or corrupt one is a cold start, never an error.
"""
