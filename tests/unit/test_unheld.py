"""Which paths a backend wrote that a rollback cannot put back (``restore.unheld``)."""

from __future__ import annotations

from pathlib import Path

from cudafix.tx.manifest import Entry, Manifest
from cudafix.tx.restore import unheld

SITE = "lib/python3.11/site-packages"


def test_only_paths_neither_snapshotted_nor_new_nor_safe_are_named(tmp_path: Path) -> None:
    site = tmp_path / SITE
    (site / "shared").mkdir(parents=True)
    (site / "shared" / "data.txt").write_text("owner\n")
    (tmp_path / "outside").mkdir()
    (site / "plugins").symlink_to(tmp_path / "outside")
    manifest = Manifest(
        (Entry(SITE, "dir"), Entry(f"{SITE}/held.py", "absent")),
        {SITE: ("plugins", "shared")},
    )
    written = [
        f"{SITE}/held.py",  # snapshotted
        f"{SITE}/newpkg/__init__.py",  # below a name new in a snapshotted directory
        f"{SITE}/shared/__pycache__/x.cpython-311.pyc",  # bytecode: derived
        f"{SITE}/shared/data.txt",  # existed, never snapshotted
        f"{SITE}/plugins/evil.py",  # through a symlink
    ]
    said = unheld(tmp_path, manifest, written)
    assert len(said) == 2
    assert said[0].startswith(f"'{SITE}/shared/data.txt': was never snapshotted")
    assert said[1].startswith(f"'{SITE}/plugins/evil.py': goes through the symlink {SITE}/plugins")
