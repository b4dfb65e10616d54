"""scenarios.wheel's packing: PEP 376 hashes, determinism, top-level names (no installer run)."""

from __future__ import annotations

from pathlib import Path

from scenarios.wheel import pack_wheel, record_hash, top_level
from tests.support.wheels import CUDNN_META, cudnn_tree


def test_record_hash_is_the_pep376_encoding() -> None:
    """A known vector: sha256 of nothing, urlsafe base64 without padding."""
    assert record_hash(b"") == "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"


def test_packing_is_deterministic(tmp_path: Path) -> None:
    tree = cudnn_tree(tmp_path / "tree")
    first = pack_wheel(CUDNN_META, tree, tmp_path / "a").read_bytes()
    assert pack_wheel(CUDNN_META, tree, tmp_path / "b").read_bytes() == first


def test_top_level_skips_dist_info_and_non_identifiers() -> None:
    paths = ["torch/_C.so", "six.py", "x.dist-info/RECORD", "bin-stuff/tool"]
    assert top_level(paths) == ["six", "torch"]
