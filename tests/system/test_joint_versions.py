"""A missing requirement is installed at the version every requirer allows, resolved together.

``cuda-toolkit[cublas]`` (asked for by torch) pins ``nvidia-cublas==12.9.2.10.*``; another
distribution requires ``nvidia-cublas`` unpinned. After a plain uninstall of nvidia-cublas,
installing the unpinned requirement alone picks the newest release and breaks the pin: the
specifier doctor prints and repair hands to uv is the intersection. Hand-made facts: no venv.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudafix.plan.doctor import diagnose
from cudafix.plan.versions import joint
from tests.support.cli import as_json, cudafix, uv_uninstall
from tests.support.facts import Dist, facts
from tests.support.venvs import install, new_venv
from tests.support.wheels import make_wheel

TORCH = Dist("torch", "2.9.0", {"torch/__init__.py": "t"}, requires=("cuda-toolkit[cublas]",))
TOOLKIT = Dist(
    "cuda-toolkit",
    "12.9.1",
    {"cuda_toolkit/__init__.py": "c"},
    requires=('nvidia-cublas==12.9.2.10.*; extra == "cublas"',),
)
LOOSE = Dist("loose", "1.0", {"loose/__init__.py": "l"}, requires=("nvidia-cublas",))


def test_the_pin_of_a_requested_extra_joins_an_unpinned_requirement() -> None:
    f = facts([TORCH, TOOLKIT, LOOSE])
    assert joint(f, "nvidia-cublas") == "nvidia-cublas==12.9.2.10.*"
    report = diagnose(f)
    assert list(report.install) == ["nvidia-cublas==12.9.2.10.*"]
    assert report.next_command[1:3] == ["install", "nvidia-cublas==12.9.2.10.*"]


def test_ranges_intersect_and_an_unrequested_extra_does_not_constrain() -> None:
    ranged = Dist("ranged", "1.0", {"ranged/__init__.py": "r"}, requires=("nvidia-cublas<13",))
    f = facts([TOOLKIT, LOOSE, ranged])  # nothing asks for cuda-toolkit[cublas]
    assert joint(f, "nvidia-cublas>=12") == "nvidia-cublas<13,>=12"


@pytest.mark.slow
def test_repair_installs_the_version_every_requirer_allows(tmp_path: Path) -> None:
    """Through the CLI on a real venv: uv offers 1.0.5 and 2.0; ``toolkit[lib]`` (asked for
    by ``top``) pins ``==1.0.*`` and ``loose`` takes any. Repair installs 1.0.5."""
    wheels = tmp_path / "wheels"
    for version in ("1.0.5", "2.0"):
        make_wheel(wheels, "libwheel", version, {"libwheel/__init__.py": b""})
    pinned = ['libwheel==1.0.*; extra == "lib"']
    extra = "Provides-Extra: lib\n"
    make_wheel(
        wheels, "toolkit", "1.0", {"t/__init__.py": b""}, requires=pinned, extra_metadata=extra
    )
    make_wheel(wheels, "top", "1.0", {"top/__init__.py": b""}, requires=["toolkit[lib]"])
    make_wheel(wheels, "loose", "1.0", {"loose/__init__.py": b""}, requires=["libwheel"])
    venv = new_venv(tmp_path / "venv")
    install(venv, wheels, "top", "loose")
    uv_uninstall(venv / "bin" / "python", "libwheel")
    report = as_json(cudafix("doctor", "--json", "--venv", venv))
    assert list(report["install"]) == ["libwheel==1.0.*"]
    proc = cudafix(
        "repair", "--dry-run", "--json", "--offline", "--find-links", wheels, "--venv", venv
    )
    plan = as_json(proc)
    assert [(i["name"], i["version"]) for i in plan["install"]] == [("libwheel", "1.0.5")]
    assert proc.returncode == 0, proc.stdout
