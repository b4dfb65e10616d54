"""The symlink guard answers as ``realpath`` does, one ``lstat`` per directory."""

from __future__ import annotations

import os
from pathlib import Path

from cudafix.env.reading import SymlinkGuard
from cudafix.model.names import EnvPath


def test_escapes_as_realpath_says(tmp_path: Path) -> None:
    prefix, outside = tmp_path / "venv", tmp_path / "outside"
    (prefix / "site" / "pkg" / "deep").mkdir(parents=True)
    (outside / "lib").mkdir(parents=True)
    (prefix / "site" / "out").symlink_to(outside)  # a directory link leaving the prefix
    (prefix / "site" / "in").symlink_to("pkg")  # one staying inside
    (prefix / "site" / "up").symlink_to("../..")  # relative, above the prefix
    (prefix / "site" / "pkg" / "back").symlink_to(prefix / "site")
    paths = [
        "site/pkg/deep/a.py",
        "site/out/lib/b.so",
        "site/out/c.py",
        "site/in/deep/d.py",
        "site/up/x.py",
        "site/pkg/back/out/e.py",
        "site/pkg/back/pkg/f.py",
        "site/missing/dir/g.py",
        "top.py",
    ]
    guard = SymlinkGuard(prefix)
    real_prefix = os.path.realpath(prefix)
    for path in paths:
        real = os.path.realpath(prefix / os.path.dirname(path))
        expected = not (real == real_prefix or real.startswith(real_prefix + "/"))
        assert guard.escapes(EnvPath(path)) == expected, path
    assert [guard.escapes(EnvPath(p)) for p in paths] == [
        False, True, True, False, True, True, False, False, False,
    ]  # fmt: skip
