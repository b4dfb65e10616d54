"""fingerprint sees every byte, mode and link target, and ignores .cudafix/."""

from __future__ import annotations

from pathlib import Path

from scenarios.fingerprint import diff_fingerprints, fingerprint


def make(root: Path) -> Path:
    (root / "d").mkdir(parents=True)
    (root / "d/f").write_bytes(b"x")
    (root / "l").symlink_to("d/f")
    return root


def test_detects_content_mode_and_target(tmp_path: Path) -> None:
    root = make(tmp_path / "env")
    base = fingerprint(root)
    assert set(base) == {"d", "d/f", "l"}
    (root / "d/f").write_bytes(b"y")
    assert diff_fingerprints(base, fingerprint(root))[0].startswith("~ d/f")
    (root / "d/f").write_bytes(b"x")
    (root / "d/f").chmod(0o600)
    assert len(diff_fingerprints(base, fingerprint(root))) == 1
    (root / "d/f").chmod(base["d/f"][1])  # type: ignore[arg-type]
    (root / "l").unlink()
    (root / "l").symlink_to("d")
    assert diff_fingerprints(base, fingerprint(root)) == [
        "~ l ('symlink', 'd/f') -> ('symlink', 'd')"
    ]


def test_ignores_state_dir_and_reports_added_removed(tmp_path: Path) -> None:
    root = make(tmp_path / "env")
    base = fingerprint(root)
    (root / ".cudafix/transactions").mkdir(parents=True)
    assert fingerprint(root) == base
    (root / "new").write_text("n")
    (root / "d/f").unlink()
    removed, added = diff_fingerprints(base, fingerprint(root))
    assert removed == f"- d/f {base['d/f']}"
    assert added.startswith("+ new ('file', ")
