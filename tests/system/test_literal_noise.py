"""Names a healthy venv spells but never loads are no finding (seen on a real GPU venv).

torch 2.11 ships ``torch/testing/_internal/torchbind_impls.py``, which spells
``libtorchbind_test.so`` (built only in torch's source tree), and treescope's ``docs`` extra
asks for ``torch==2.3.1``. ``doctor`` on that healthy venv called the name a load a plain
uninstall of torch had broken, and its ``Next:`` asked uv for an install it cannot resolve.
Here the same shapes, in real wheels installed by uv: a test module's names are fixtures, and
a requirement met at another version took no file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.cli import as_json, cudafix
from tests.support.venvs import venv_with
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow
"""Builds a real venv and runs the CLI on it: left out of ``make test-fast``."""

LOADER = b"import ctypes\n\ndef load():\n    return ctypes.CDLL(%s)\n"


def _venv(tmp_path: Path) -> Path:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(
        wheels, "fw", "2.0",
        {
            "fw/__init__.py": b"",
            "fw/testing/_internal/impls.py": LOADER % b'"libfw_test.so"',
            "fw/tests/test_load.py": LOADER % b'"libfw_suite.so.1"',
            "fw/_extras.py": LOADER % b'"libfw_extra.so.1"',
        },
    )  # fmt: skip
    make_wheel(
        wheels, "viewer", "1.0", {"viewer/__init__.py": b""},
        requires=("fw", 'fw==1.0; extra == "docs"', 'helper; extra == "docs"'),
        extra_metadata="Provides-Extra: docs\n",
    )  # fmt: skip
    make_wheel(wheels, "helper", "1.0", {"helper/__init__.py": b""})
    return venv_with(tmp_path / "venv", wheels, "fw", "viewer", "helper")


def test_a_healthy_venv_whose_sources_spell_absent_libraries_is_healthy(tmp_path: Path) -> None:
    prefix = _venv(tmp_path)
    # the oracle: the module outside the tests cannot load its name, and nothing asks it to
    code = "import fw._extras as m\ntry:\n    m.load()\nexcept OSError:\n    print('absent')"
    run = [str(prefix / "bin" / "python"), "-c", code]
    assert subprocess.run(run, capture_output=True, text=True).stdout == "absent\n"

    proc = cudafix("doctor", "--venv", prefix, "--json")
    report = as_json(proc)
    named = [f for f in report["findings"] if "libfw_" in (f.get("need") or "")]
    assert (proc.returncode, named) == (0, []), proc.stdout
    proc = cudafix("doctor", "--venv", prefix)
    assert proc.returncode == 0 and "Next:" not in proc.stdout, proc.stdout
