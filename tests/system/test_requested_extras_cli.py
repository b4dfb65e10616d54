"""doctor on a venv holding packages whose ``all``-style extras name their own extras.

Real wheels installed with the real uv: ``etils``-shaped ``kit[all]`` asks for ``kit[app]``
and ``kit[py]``; ``kit[app]`` needs a wheel that is not installed. pip and uv installed
plain ``kit``; nothing is broken, so doctor must exit 0. A wheel removed from
``plugin[with-cuda]``, which ``kit[gpu]`` asked for (nothing else brings ``plugin``), is
still a broken requirement.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import as_json, cudafix
from tests.support.venvs import install, new_venv, uninstall
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Builds a venv with uv and runs the CLI: left out of ``make test-fast``."""


def _venv(tmp_path: Path) -> Path:
    house = tmp_path / "wheels"
    make_wheel(house, "kit", "1.0", {"kit/__init__.py": b""}, requires=[
        'kit[app]; extra == "all"', 'kit[py]; extra == "all"',
        'helper; extra == "app"', 'parsing-lib; extra == "app"',
        'helper; extra == "py"', 'plugin[with-cuda]; extra == "gpu"',
    ])  # fmt: skip
    make_wheel(house, "plugin", "1.0", {"plugin/__init__.py": b""}, requires=[
        'lib-a; extra == "with-cuda"', 'lib-b; extra == "with-cuda"',
    ])  # fmt: skip
    for name in ("helper", "lib-a", "lib-b"):
        make_wheel(house, name, "1.0", {f"{name.replace('-', '_')}/__init__.py": b""})
    prefix = new_venv(tmp_path / "venv")
    install(prefix, house, "kit[gpu]", "helper")
    return prefix


def test_an_all_extra_naming_unmet_extras_is_no_error(tmp_path: Path) -> None:
    prefix = _venv(tmp_path)
    proc = cudafix("doctor", "--venv", prefix, "--json")
    problems = [f for f in as_json(proc)["findings"] if f["kind"] == "requirement"]
    assert (proc.returncode, problems) == (0, [])


def test_a_wheel_removed_from_an_extra_asked_for_is_still_reported(tmp_path: Path) -> None:
    prefix = _venv(tmp_path)
    assert cudafix("doctor", "--venv", prefix).returncode == 0
    uninstall(prefix, "lib-a")
    proc = cudafix("doctor", "--venv", prefix, "--json")
    problems = [f["message"] for f in as_json(proc)["findings"] if f["kind"] == "requirement"]
    assert proc.returncode == 1
    assert problems == [
        'plugin[with-cuda] requires lib-a; extra == "with-cuda": lib-a is not installed'
    ]
