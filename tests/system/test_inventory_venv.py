"""Inventory and RECORD against real venvs built by uv from tiny real wheels."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cudafix.env.hashing import HashCache
from cudafix.env.inventory import Inventory
from cudafix.env.owners import holder_of
from cudafix.env.reading import read_inventory
from cudafix.model.errors import ExitCode, InputError
from cudafix.model.names import DistName, EnvPath
from tests.support.venvs import install, new_venv, site_dir, uninstall
from tests.support.wheels import make_wheel

CUDNN = "nvidia/cudnn/lib/libcudnn.so.9"
HEADER = "nvidia/cudnn/include/cudnn.h"
CU12 = DistName("nvcu12")
CU13 = DistName("nvcu13")


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
