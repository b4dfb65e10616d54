"""Installs a dry run must refuse (not pass, then roll back) and ELF damage in plain words."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import cudafix
from tests.support.venvs import site_rel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""


def _dry_remove(prefix: Path, wheels: Path) -> subprocess.CompletedProcess[str]:
    return cudafix(
        "remove", "pa", "--venv", prefix, "--repair", "--dry-run", "--offline",
        "--find-links", wheels,
    )  # fmt: skip


def test_an_odd_case_dist_info_is_refused_at_plan_time(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    sp = prefix / site_rel(prefix)
    (sp / "pa-1.0.dist-info").rename(sp / "PA-1.0.dist-info")
    proc = _dry_remove(prefix, wheels)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "its directory is PA-1.0.dist-info but its RECORD lists pa-1.0.dist-info" in proc.stdout


def test_a_duplicate_dist_info_is_refused_at_plan_time(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    sp = prefix / site_rel(prefix)
    shutil.copytree(sp / "pa-1.0.dist-info", sp / "pa-0.9.dist-info")
    proc = _dry_remove(prefix, wheels)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "pa has a second dist-info directory" in proc.stdout


def test_a_dist_info_without_record_is_named_unmanaged(venv: tuple[Path, Path]) -> None:
    prefix, wheels = venv
    sp = prefix / site_rel(prefix)
    (sp / "pa-1.0.dist-info" / "RECORD").unlink()
    proc = _dry_remove(prefix, wheels)
    assert proc.returncode == 2
    assert "pa-1.0.dist-info has no RECORD" in proc.stderr
    assert "no similar names" not in proc.stderr


def _gcc(tmp: Path, name: str, source: str, *extra: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    c = tmp / f"{name}.c"
    c.write_text(source)
    out = tmp / f"{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", out, c, *extra], check=True, cwd=tmp)
    return out


def test_damaged_elf_objects_are_findings_in_plain_words(
    venv: tuple[Path, Path], tmp_path: Path
) -> None:
    from elftools.elf.elffile import ELFFile

    prefix, _ = venv
    liba = _gcc(tmp_path, "liba", "int f(void){return 1;}\n")
    libb = _gcc(tmp_path, "libb", "int g(void){return 2;}\n", "-Wl,--no-as-needed", "./liba.so")
    here = prefix / site_rel(prefix) / "odd"
    here.mkdir()
    data = liba.read_bytes()
    with liba.open("rb") as fh:
        dyn = ELFFile(fh).get_section_by_name(".dynamic")
        off, size = dyn["sh_offset"], dyn["sh_size"]
    (here / "libgarbage.so").write_bytes(data[:off] + b"\xfe" * size + data[off + size :])
    broken = bytearray(data)
    struct.pack_into("<Q", broken, 0x28, len(data) + 4096)
    (here / "libsections.so").write_bytes(bytes(broken))
    empty = bytearray(libb.read_bytes())
    empty[empty.find(b"./liba.so\0")] = 0
    (here / "libempty.so").write_bytes(bytes(empty))
    (here / "libloop.so").symlink_to("libloop.so")
    out = cudafix("doctor", "--venv", prefix, "-v").stdout  # information is folded without -v
    said = {ln.split(":")[0].split()[-1]: ln for ln in out.splitlines() if "[bad-elf]" in ln}
    assert "dynamic section holds garbage" in said["odd/libgarbage.so"]
    assert "section header table lies past the end" in said["odd/libsections.so"]
    assert "needs a library with an empty name" in said["odd/libempty.so"]
    assert "symlink loop" in said["odd/libloop.so"]
    assert "needs ," not in out
