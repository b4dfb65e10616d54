"""Inventory, RECORD and hashing against real venvs built by uv from tiny real wheels."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shutil
from pathlib import Path

import pytest

from cudafix.env.hashing import CACHE_FORMAT, CACHE_VERSION, HashCache
from cudafix.env.inventory import Inventory, is_bytecode, pyc_source
from cudafix.env.owners import holder_of
from cudafix.env.reading import read_inventory, walk_files
from cudafix.env.record import (
    Refusal,
    parse_record,
    resolve_record_path,
    without_entries,
)
from cudafix.env.statedir import save_cache
from cudafix.model.errors import ExitCode, InputError
from cudafix.model.names import DistName, EnvPath
from cudafix.tx.manifest import path_syntax
from tests.support.venvs import install, new_venv, site_dir, uninstall
from tests.support.wheels import make_wheel, record_hash

CUDNN = "nvidia/cudnn/lib/libcudnn.so.9"
HEADER = "nvidia/cudnn/include/cudnn.h"
CU12 = DistName("nvcu12")
CU13 = DistName("nvcu13")
SP = EnvPath("lib/python3.11/site-packages")


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uvcache")


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh = tmp_path_factory.mktemp("wheels")
    make_wheel(wh, "nvcu12", "1.0", {CUDNN: b"cu12-bytes" * 10, HEADER: b"// 12\n"})
    make_wheel(
        wh,
        "nvcu13",
        "1.0",
        {CUDNN: b"cu13-bytes" * 10, HEADER: b"// thirteen\n", "nvidia/cudnn/lib/x13.so": b"x"},
    )
    make_wheel(
        wh,
        "tool",
        "2.0",
        {
            "tool/__init__.py": b"",
            "tool/core.py": b"X = 1\n",
            "single.py": b"",
            "tool-2.0.data/scripts/tool": b"#!/bin/sh\necho tool\n",
        },
        requires=["nvcu13>=1", "missing-dep; extra == 'x'"],
    )
    return wh


def _venv(tmp_path: Path, wheels: Path, cache: Path, *names: str) -> Path:
    venv = new_venv(tmp_path / "venv", cache=cache)
    for name in names:  # one at a time, so a later install overwrites an earlier one's files
        install(venv, wheels, name, cache=cache)
    return venv


def _inventory(venv: Path) -> Inventory:
    sp = site_dir(venv).relative_to(venv).as_posix()
    return read_inventory(venv, [EnvPath(sp)], venv / "bin" / "python")


def _ep(venv: Path, rel: str) -> EnvPath:
    return EnvPath(f"{site_dir(venv).relative_to(venv).as_posix()}/{rel}")


def _append_record(venv: Path, dist_info: str, *lines: str) -> None:
    record = site_dir(venv) / dist_info / "RECORD"
    record.write_text(record.read_text() + "".join(f"{line}\n" for line in lines))


# --- bytecode ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "bytecode", "source"),
    [
        ("pkg/__pycache__/mod.cpython-311.pyc", True, "pkg/mod.py"),
        ("pkg/__pycache__/mod.cpython-311.opt-1.pyc", True, "pkg/mod.py"),
        ("__pycache__/single.cpython-311.pyc", True, "single.py"),
        ("pkg/mod.pyc", True, None),  # sourceless bytecode: nothing recompiles it
        ("pkg/__pycache__", True, None),  # the directory itself
        ("__pycache__", True, None),  # a bare name from a directory listing
        ("pkg/__pycache__/sub/x.pyc", True, None),
        ("pkg/__pycache__/notes.txt", True, None),
        ("pkg/mod.py", False, None),
        ("pkg/my__pycache__/x.txt", False, None),  # a whole path component only
        ("pkg/__pycache__x/y.txt", False, None),
    ],
)
def test_bytecode_and_the_source_of_a_cache_file(
    path: str, bytecode: bool, source: str | None
) -> None:
    assert (is_bytecode(path), pyc_source(path)) == (bytecode, source)


# --- ownership and holders -------------------------------------------------------------


@pytest.mark.slow
def test_shared_path_holds_the_second_installers_bytes(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    venv = _venv(tmp_path, wheels, cache, "nvcu12", "nvcu13")
    inv = _inventory(venv)
    cudnn, header = _ep(venv, CUDNN), _ep(venv, HEADER)
    assert inv.owners[cudnn] == (CU12, CU13)
    shared = {s.path: s for s in inv.shared}
    assert set(shared) == {cudnn, header}
    # same size, different bytes: decided by hashing
    assert shared[cudnn].holder == CU13
    assert shared[cudnn].matching == (CU13,)
    assert not shared[cudnn].missing
    # different sizes: decided by size, then confirmed by hash
    assert shared[header].holder == CU13
    assert inv.missing == {}


@pytest.mark.slow
def test_holder_of_a_file_nobody_wrote(tmp_path: Path, wheels: Path, cache: Path) -> None:
    venv = _venv(tmp_path, wheels, cache, "nvcu12", "nvcu13")
    cudnn = _ep(venv, CUDNN)
    (venv / cudnn).write_bytes(b"cu99-bytes" * 10)
    inv = _inventory(venv)
    (shared,) = (s for s in inv.shared if s.path == cudnn)
    assert shared.holder is None
    only13 = _ep(venv, "nvidia/cudnn/lib/x13.so")
    assert holder_of(inv, only13, (CU13,), HashCache(venv)) == (CU13,)
    assert holder_of(inv, _ep(venv, "absent.so"), (CU13,)) == ()


@pytest.mark.slow
def test_plain_uninstall_of_a_co_owner_leaves_the_other_missing(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    venv = _venv(tmp_path, wheels, cache, "nvcu12", "nvcu13")
    uninstall(venv, "nvcu12", cache=cache)
    inv = _inventory(venv)
    assert set(inv.distributions) == {CU13}
    assert _ep(venv, CUDNN) in inv.missing[CU13]
    assert _ep(venv, HEADER) in inv.missing[CU13]
    assert inv.shared == ()


# --- distributions ----------------------------------------------------------------------


@pytest.mark.slow
def test_distribution_fields_scripts_and_top_level(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    venv = _venv(tmp_path, wheels, cache, "tool")
    inv = _inventory(venv)
    tool = inv.distributions[DistName("tool")]
    assert tool.version == "2.0"
    assert tool.installer == "uv"
    assert tool.requires == ("nvcu13>=1", "missing-dep; extra == 'x'")
    assert tool.top_level == ("single", "tool")
    assert tool.dist_info == _ep(venv, "tool-2.0.dist-info")
    # a data script installed to bin/ stays inside the prefix and is owned
    assert inv.owners[EnvPath("bin/tool")] == (DistName("tool"),)
    raw = {e.path: e.raw for e in tool.files}
    assert raw[EnvPath("bin/tool")].endswith("bin/tool")
    assert inv.files[EnvPath("bin/tool")].kind == "file"


@pytest.mark.slow
def test_distribution_paths_include_dist_info_and_bytecode(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    venv = _venv(tmp_path, wheels, cache, "tool")
    pyc = site_dir(venv) / "tool" / "__pycache__" / "core.cpython-311.pyc"
    pyc.parent.mkdir()
    pyc.write_bytes(b"pyc")
    (site_dir(venv) / "tool-2.0.dist-info" / "extra.txt").write_text("x")
    paths = _inventory(venv).distribution_paths(DistName("tool"))
    assert _ep(venv, "tool/__pycache__/core.cpython-311.pyc") in paths
    assert _ep(venv, "tool-2.0.dist-info/extra.txt") in paths
    assert _ep(venv, "tool/core.py") in paths
    assert EnvPath("bin/tool") in paths


@pytest.mark.slow
def test_unsafe_record_entries_are_flagged_and_not_owned(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    venv = _venv(tmp_path, wheels, cache, "tool")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "payload.so").write_bytes(b"not yours")
    (site_dir(venv) / "evil").symlink_to(outside)
    _append_record(
        venv,
        "tool-2.0.dist-info",
        "../../../../etc/x,,",
        "/etc/passwd,,",
        "evil/payload.so,,",
        "tool/../../../../../x,,",
    )
    inv = _inventory(venv)
    reasons = {u.raw: u.reason for u in inv.unsafe}
    assert reasons == {
        "../../../../etc/x": "escapes the environment",
        "/etc/passwd": "absolute path",
        "evil/payload.so": "through a symlink out of the environment",
        "tool/../../../../../x": "'..' after a directory name",
    }
    owned = {e.raw for e in inv.distributions[DistName("tool")].files}
    assert owned.isdisjoint(reasons)
    assert not any("payload" in p or p.startswith("..") for p in inv.owners)
    # the walk records the symlink itself and never descends through it
    assert inv.files[_ep(venv, "evil")].kind == "symlink"
    assert _ep(venv, "evil/payload.so") not in inv.files


@pytest.mark.slow
def test_bad_record_rows_are_collected_and_still_owned(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    venv = _venv(tmp_path, wheels, cache, "tool")
    _append_record(
        venv,
        "tool-2.0.dist-info",
        "tool/a.py,crc32=abc,3",
        "tool/b.py,,big",
        "tool/c.py",
        "tool/d.py,md5=abc,3",
    )
    inv = _inventory(venv)
    issues = {(i.row.split(",")[0], i.reason) for i in inv.record_issues}
    assert issues == {
        ("tool/a.py", "unknown hash algorithm 'crc32'"),
        ("tool/d.py", "hash algorithm 'md5' is too weak for RECORD"),
        ("tool/b.py", "size 'big' is not an integer"),
        ("tool/c.py", "expected 3 columns, found 1"),
    }
    for rel in ("tool/a.py", "tool/b.py", "tool/c.py", "tool/d.py"):
        assert inv.owners[_ep(venv, rel)] == (DistName("tool"),)


@pytest.mark.slow
def test_unmanaged_installs(tmp_path: Path, wheels: Path, cache: Path) -> None:
    venv = _venv(tmp_path, wheels, cache, "tool", "nvcu12")
    sp = site_dir(venv)
    (sp / "nvcu12-1.0.dist-info" / "RECORD").unlink()
    egg = sp / "legacy-0.1.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Name: legacy\nVersion: 0.1\n")
    inv = _inventory(venv)
    kinds = {(u.name, u.kind) for u in inv.unmanaged}
    assert kinds == {("nvcu12", "no-record"), ("legacy", "egg-info")}
    assert set(inv.distributions) == {DistName("tool"), CU13}  # nvcu13: a dependency of tool


@pytest.mark.slow
def test_second_dist_info_of_one_name_is_flagged(tmp_path: Path, wheels: Path, cache: Path) -> None:
    venv = _venv(tmp_path, wheels, cache, "nvcu12")
    sp = site_dir(venv)
    shutil.copytree(sp / "nvcu12-1.0.dist-info", sp / "nvcu12-0.9.dist-info")
    inv = _inventory(venv)
    assert [(u.name, u.kind) for u in inv.unmanaged] == [("nvcu12", "duplicate")]
    assert inv.distributions[CU12].dist_info == _ep(venv, "nvcu12-0.9.dist-info")


@pytest.mark.parametrize(
    ("filename", "corrupt"),
    [("RECORD", "directory"), ("RECORD", "invalid-utf8"), ("METADATA", "invalid-utf8")],
)
@pytest.mark.slow
def test_unreadable_metadata_file_is_one_clear_input_error(
    tmp_path: Path, wheels: Path, cache: Path, filename: str, corrupt: str
) -> None:
    # Tests run as root, so chmod 000 cannot produce EACCES: a directory named RECORD
    # (EISDIR) and bytes that are not UTF-8 stand in for an unreadable file.
    venv = _venv(tmp_path, wheels, cache, "tool")
    target = site_dir(venv) / "tool-2.0.dist-info" / filename
    target.unlink()
    if corrupt == "directory":
        target.mkdir()
    else:
        target.write_bytes(b"Name: tool\n\xff\xfe broken\n")
    with pytest.raises(InputError) as info:
        _inventory(venv)
    assert str(target) in info.value.message
    assert f"unreadable {filename}" in info.value.message
    assert "\n" not in info.value.message
    assert info.value.exit_code == ExitCode.USAGE


def test_walk_skips_state_dir_and_symlinked_dirs(tmp_path: Path) -> None:
    (tmp_path / ".cudafix").mkdir()
    (tmp_path / ".cudafix" / "journal").write_text("j")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.so").write_bytes(b"a")
    (tmp_path / "lib64").symlink_to("lib")
    files = walk_files(tmp_path)
    assert set(files) == {"lib/a.so", "lib64"}
    assert files[EnvPath("lib64")].link_target == "lib"
    assert files[EnvPath("lib/a.so")].size == 1


@pytest.mark.slow
def test_lib64_symlink_site_packages_is_read_once(
    tmp_path: Path, wheels: Path, cache: Path
) -> None:
    venv = _venv(tmp_path, wheels, cache, "nvcu13")
    if not (venv / "lib64").is_symlink():
        (venv / "lib64").symlink_to("lib")
    sp = site_dir(venv).relative_to(venv).as_posix()
    inv = read_inventory(venv, [EnvPath(sp), EnvPath("lib64/" + sp[4:])], None)
    assert inv.site_packages == (EnvPath(sp),)
    assert inv.distributions[CU13].site_packages == EnvPath(sp)


# --- record (pure) ----------------------------------------------------------------------


def test_parse_record_tolerates_missing_hash_and_size() -> None:
    parsed = parse_record('a.py,sha256=AbC,12\n"we,ird.py",,\n\nb.py,sha512=xyz,\n')
    assert [(e.path, e.sha256, e.size) for e in parsed.entries] == [
        ("a.py", "AbC", 12),
        ("we,ird.py", None, None),
        ("b.py", None, None),
    ]
    assert parsed.problems == ()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("pkg/mod.py", f"{SP}/pkg/mod.py"),
        ("./pkg/mod.py", f"{SP}/pkg/mod.py"),
        ("../../../bin/tool", "bin/tool"),
        ("../../../../etc/x", Refusal("escapes the environment")),
        ("../../..", Refusal("names the environment itself")),
        ("/etc/passwd", Refusal("absolute path")),
        ("pkg/../../../../../x", Refusal("'..' after a directory name")),
    ],
)
def test_resolve_record_path(raw: str, expected: str | Refusal) -> None:
    assert resolve_record_path(SP, raw) == expected


@pytest.mark.parametrize("bad", ["", "/abs", "../x", "a/../b", "a//b", "."])
def test_path_syntax_refuses(bad: str) -> None:
    assert path_syntax(bad) is not None


def test_path_syntax_accepts() -> None:
    assert path_syntax("lib/x.so") is None


# --- hashing ----------------------------------------------------------------------------


def test_hash_streams_and_matches_record_encoding(tmp_path: Path) -> None:
    data = os.urandom(3 * (1 << 20) + 17)
    (tmp_path / "big.so").write_bytes(data)
    cache = HashCache(tmp_path)
    assert f"sha256={cache(EnvPath('big.so'))}" == record_hash(data)
    assert hashlib.sha256(data).digest()  # sanity: the oracle is hashlib itself
    assert cache(EnvPath("absent")) is None


def test_hash_follows_symlinks_only_inside(tmp_path: Path) -> None:
    prefix, outside = tmp_path / "env", tmp_path / "outside"
    prefix.mkdir()
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    (prefix / "real").write_bytes(b"r")
    (prefix / "in").symlink_to("real")
    (prefix / "out").symlink_to(outside / "secret")
    cache = HashCache(prefix)
    assert cache(EnvPath("in")) == cache(EnvPath("real")) is not None
    assert cache(EnvPath("out")) is None


def test_hash_cache_roundtrip_corrupt_and_unwritable(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    cache_file = tmp_path / ".cudafix" / "hash-cache.json"
    first = HashCache(tmp_path)
    digest = first(EnvPath("f"))
    assert first.save(cache_file)
    loaded = HashCache.load(tmp_path, cache_file)
    assert len(loaded) == 1
    # the loaded memo answers without reading: prove it by planting a wrong value
    ((key, (_digest, ctime)),) = json.loads(cache_file.read_text())["entries"].items()
    planted = {"entries": {key: ["planted", ctime]}}
    assert save_cache(cache_file, CACHE_FORMAT, CACHE_VERSION, planted)
    assert HashCache.load(tmp_path, cache_file)(EnvPath("f")) == "planted"
    # a cache reached through a symlink is not read (it could be planted anywhere)
    planted = tmp_path / "planted.json"
    cache_file.rename(planted)
    cache_file.symlink_to(planted)
    assert HashCache.load(tmp_path, cache_file)(EnvPath("f")) == digest
    cache_file.unlink()
    cache_file.write_text("{not json")
    assert HashCache.load(tmp_path, cache_file)(EnvPath("f")) == digest
    (tmp_path / "blocker").write_text("a file, not a dir")
    assert not first.save(tmp_path / "blocker" / "sub" / "hash-cache.json")


def test_hash_cache_reads_no_bytes_when_only_ctime_moved(tmp_path: Path) -> None:
    """A hard link or a chmod moves ctime and no byte: no re-read, but by the strict check
    under the lock (a write in place that restores mtime moves only ctime too). A write that
    moves mtime or size is read again."""
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"A" * 4096)
    cache_file = tmp_path / ".cudafix" / "hash-cache.json"
    first = HashCache(tmp_path)
    digest = first(EnvPath("lib.so"))
    assert first.save(cache_file)
    before = lib.stat().st_ctime_ns
    os.link(lib, tmp_path / "copy.so")
    lib.chmod(0o600)
    assert lib.stat().st_ctime_ns != before
    again = HashCache.load(tmp_path, cache_file)
    assert again(EnvPath("lib.so")) == digest
    assert again.hashed == 0
    strict = HashCache.load(tmp_path, cache_file, strict=True)  # the check under the lock
    assert strict(EnvPath("lib.so")) == digest
    assert strict.hashed == 1
    st = lib.stat()
    with lib.open("r+b") as fh:  # same size, new bytes, mtime moved
        fh.write(b"B")
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert again(EnvPath("lib.so")) != digest
    assert again.hashed == 1
    lib.write_bytes(b"A" * 4097)  # size moved
    os.utime(lib, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert again(EnvPath("lib.so")) not in (None, digest)
    assert again.hashed == 2


@pytest.mark.parametrize(
    "raw",
    [
        "a/b.py",
        "../../../bin/x",
        "a/./b",
        "a//b",
        "/etc/x",
        "//x",
        "a\\b",
        "C:x",
        ".hidden",
        "a/.h",
        "a/b/",
        "../../../../etc/x",
        "pkg/../../x",
        "nvidia/cudnn/lib/libcudnn.so.9",
    ],
)
def test_fast_path_agrees_with_the_lexical_rules(raw: str) -> None:
    """The plain-path shortcut must give exactly what the full normalisation gives."""
    site = EnvPath("lib/python3.11/site-packages")
    got = resolve_record_path(site, raw)
    if raw.startswith("/") or raw.startswith("//"):
        assert isinstance(got, Refusal)
    if not isinstance(got, Refusal):
        assert got == posixpath.normpath(posixpath.join(site, raw.replace("\\", "/")))


def test_without_entries_drops_only_the_named_rows_and_keeps_csv_quoting() -> None:
    text = 'a/x.py,sha256=AA,3\n"odd,name.py",sha256=BB,4\n/etc/evil,,\n../../../../x,,\n'
    kept = without_entries(text, {"/etc/evil", "../../../../x"})
    assert [e.path for e in parse_record(kept).entries] == ["a/x.py", "odd,name.py"]
