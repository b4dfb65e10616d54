"""scenarios.wheel packs wheels that real uv and pip install as-is."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import uv

from scenarios.build import builder_env
from scenarios.compile import wheel_tag
from scenarios.wheel import pack_wheel, record_hash
from tests.support.wheels import CUDNN_META, cudnn_tree

UV = uv.find_uv_bin()


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return pack_wheel(CUDNN_META, cudnn_tree(tmp_path / "tree"), tmp_path / "wh")


@pytest.mark.slow
def test_filename_and_metadata(wheel: Path) -> None:
    assert wheel.name == f"nvidia_cudnn_cu12-9.10.2.21-{wheel_tag()}.whl"
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read("nvidia_cudnn_cu12-9.10.2.21.dist-info/METADATA").decode()
        wheel_file = zf.read("nvidia_cudnn_cu12-9.10.2.21.dist-info/WHEEL").decode()
        top = zf.read("nvidia_cudnn_cu12-9.10.2.21.dist-info/top_level.txt").decode()
    assert "Metadata-Version: 2.1\nName: nvidia-cudnn-cu12\nVersion: 9.10.2.21\n" in meta
    assert "Requires-Dist: nvidia-cublas-cu12\n" in meta
    assert "Root-Is-Purelib: false" in wheel_file
    assert f"Tag: {wheel_tag()}" in wheel_file
    assert top == "nvidia\n"


@pytest.mark.slow
def test_record_hashes_and_sizes_match_every_member(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        record_name = "nvidia_cudnn_cu12-9.10.2.21.dist-info/RECORD"
        rows = list(csv.reader(io.StringIO(zf.read(record_name).decode())))
        members = set(zf.namelist())
        for path, digest, size in rows:
            if path == record_name:
                assert (digest, size) == ("", "")
                continue
            data = zf.read(path)
            assert (digest, int(size)) == (record_hash(data), len(data))
    assert {r[0] for r in rows} == members


@pytest.mark.slow
def test_executable_bit_survives(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("nvidia/cudnn/lib/libcudnn.so.9")
    assert (info.external_attr >> 16) & 0o777 == 0o755


def _venv(path: Path) -> Path:
    subprocess.run(
        [UV, "venv", "--offline", "--python", sys.executable, str(path)],
        check=True,
        capture_output=True,
        env={**os.environ, **builder_env()},
    )
    return path / "bin" / "python"


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_real_installers_accept_it(wheel: Path, tmp_path: Path, installer: str) -> None:
    python = _venv(tmp_path / "venv")
    links = ["--no-index", "--find-links", str(wheel.parent), "--no-deps"]
    if installer == "uv":
        cmd = [UV, "pip", "install", "--offline", "--python", str(python), *links]
    else:
        cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", *links]
    env = {**os.environ, **builder_env()}
    subprocess.run([*cmd, "nvidia-cudnn-cu12==9.10.2.21"], check=True, capture_output=True, env=env)
    probe = (
        "import importlib.metadata as m, nvidia.cudnn as c;"
        "d = m.distribution('nvidia-cudnn-cu12');"
        "print(d.version, d.requires, d.read_text('INSTALLER').strip(), c.VARIANT)"
    )
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.split(" ", 1)[0] == "9.10.2.21"
    assert "['nvidia-cublas-cu12']" in out.stdout
    assert out.stdout.rstrip().endswith(f"{installer} cu12")
