"""The simplest incident: a required distribution uninstalled whole, followed through the CLI.

``requires``: a torch that requires ``nvidia-cudnn-cu12==9.10.2.21`` and loads its
``libcudnn.so.9``. Plain ``uv pip uninstall nvidia-cudnn-cu12`` breaks ``import torch``.
doctor must name ``cudafix install nvidia-cudnn-cu12==9.10.2.21`` for it (the pin the broken
requirement asks for), print a ``Next:`` line, and both that command and ``cudafix repair``
must fix the venv when run as printed, from a shell with no venv activated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_doctor_next_step import run_words, user_shell

from benchmarks.follow import applying, names_target, printed_next
from scenarios import BuiltScenario
from tests.support.cli import as_json, cudafix, uv_uninstall
from tests.support.venvs import ScenarioFactory, try_import

pytestmark = pytest.mark.slow
"""Runs the CLI on real venvs: left out of ``make test-fast``."""

PIN = "nvidia-cudnn-cu12==9.10.2.21"


def _broken(scenario: ScenarioFactory) -> BuiltScenario:
    built = scenario("requires")
    uv_uninstall(built.python, "nvidia-cudnn-cu12")
    assert try_import(built.python, "torch").returncode != 0
    return built


def test_doctor_names_the_install_of_the_required_pin_and_it_fixes_the_venv(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = _broken(scenario)
    report = as_json(cudafix("doctor", "--json", "--venv", built.venv))
    [req] = [f for f in report["findings"] if f["kind"] == "requirement"]
    assert req["command"] == ["cudafix", "install", PIN, "--dry-run", "--venv", str(built.venv)]
    assert req["reason"] and "cudafix" not in req["reason"]
    [lost] = [f for f in report["findings"] if f["need"] == "libcudnn.so.9"]
    assert lost["severity"] == "error" and lost["command"] == req["command"]
    assert report["install"] == {PIN: "required by torch"}

    env = user_shell(built)
    done = run_words(applying(req["command"]), tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert try_import(built.python, "torch").returncode == 0
    assert "installed 1" in done.stdout


def test_doctor_next_line_is_repair_and_repair_installs_the_missing_requirement(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    built = _broken(scenario)
    env = user_shell(built)
    doctor = run_words(["cudafix", "doctor", "--venv", str(built.venv)], tmp_path, env)
    assert doctor.returncode == 1
    words = printed_next(doctor.stdout)
    assert words is not None and words[1] == "repair", doctor.stdout
    assert names_target(words, built.venv)
    assert PIN in doctor.stdout.split("Next: ", 1)[1]

    preview = run_words(words, tmp_path, env)
    assert preview.returncode == 0, preview.stdout + preview.stderr
    assert f"+ {PIN}" in preview.stdout
    done = run_words(applying(words), tmp_path, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert try_import(built.python, "torch").returncode == 0
    after = run_words(["cudafix", "doctor", "--venv", str(built.venv)], tmp_path, env)
    assert after.returncode == 0, after.stdout


def test_errors_come_first_and_information_is_folded(scenario: ScenarioFactory) -> None:
    """Errors, then one line per kind of information; ``-v`` lists it, ``-q`` says only the
    verdict and the next command; ``--json`` keeps every finding."""
    built = _broken(scenario)
    out = cudafix("doctor", "--venv", built.venv).stdout.splitlines()
    heads = [ln[0] for ln in out if ln.startswith(("x [", "! [", "i "))]
    assert heads == sorted(heads, key="x!i".index) and heads[0] == "x", out
    quiet = cudafix("doctor", "--venv", built.venv, "-q")
    assert quiet.returncode == 1
    lines = quiet.stdout.strip().splitlines()
    assert lines[0] == "3 problem(s) found." and lines[1].startswith("Next: cudafix repair")
    assert len(lines) == 2

    healthy = scenario("requires")
    out = cudafix("doctor", "--venv", healthy.venv).stdout.splitlines()
    note = "i 1 note: path groups several distributions claim with identical bytes; "
    assert any(ln.startswith(note) for ln in out), out
    assert not any(ln.startswith("i [") for ln in out), out
    assert "i [shared]" in cudafix("doctor", "-v", "--venv", healthy.venv).stdout
    report = as_json(cudafix("doctor", "--json", "--venv", healthy.venv))
    assert [f["kind"] for f in report["findings"]] == ["shared"]
    assert cudafix("doctor", "-q", "--venv", healthy.venv).stdout.strip() == (
        "Healthy: no problems found."
    )


def test_repair_with_nothing_to_do_prints_json(scenario: ScenarioFactory) -> None:
    built = scenario("requires")
    done = cudafix("repair", "--dry-run", "--json", "--venv", built.venv)
    assert done.returncode == 0
    assert as_json(done)["state"] == "nothing-to-do"


@pytest.mark.parametrize(
    "name", ["incident", "incident-mirror", "incident-pip", "requires", "runtime", "shadowing"]
)
def test_every_problem_carries_its_fix_as_argv_and_reason(
    scenario: ScenarioFactory, name: str
) -> None:
    """doctor --json: each error and warning of a broken scenario names the command that
    fixes it as an argv (runnable as is) and, apart, why; no command hides in ``hint``."""
    stage = "ready" if name == "shadowing" else "broken"
    built = scenario(name, stage)
    report = as_json(cudafix("doctor", "--venv", built.venv, "--json"))
    problems = [f for f in report["findings"] if f["severity"] != "info"]
    assert problems, name
    for f in problems:
        assert f["command"][:1] == ["cudafix"] and "--venv" in f["command"], f
        assert f["reason"], f


def test_an_extra_none_of_whose_wheels_was_installed_is_no_error(tmp_path: Path) -> None:
    """A pristine torch 2.14.1 cu130, in small: ``cuda-bindings[all]`` asks for
    ``cuda-toolkit[nvvm]==13.*``, met by version alone, and no ``nvidia-nvvm`` was ever
    installed. doctor exited 1 on it with a false ``[requirement]`` error; an extra with one
    of its wheels left is still judged."""
    from tests.support.venvs import install, new_venv
    from tests.support.wheels import make_wheel

    wheels = tmp_path / "wheels"
    make_wheel(wheels, "torch", "2.14.1", {"torch/__init__.py": b""},
               requires=["cuda-toolkit[cublas,curand]==13.0.3"])  # fmt: skip
    make_wheel(wheels, "cuda-bindings", "13.5.0", {"cuda/__init__.py": b""},
               requires=['cuda-toolkit[nvvm]==13.*; extra == "all"'])  # fmt: skip
    toolkit = [
        'nvidia-nvvm==13.0.88; extra == "nvvm"',
        'nvidia-cublas==13.1.1.3; extra == "cublas"',
        'nvidia-curand==10.4.0.35; extra == "curand"',
    ]
    make_wheel(wheels, "cuda-toolkit", "13.0.3", {"cuda_toolkit.py": b""}, requires=toolkit)
    make_wheel(wheels, "nvidia-cublas", "13.1.1.3", {"nvidia/cublas/x.py": b""})
    make_wheel(wheels, "nvidia-curand", "10.4.0.35", {"nvidia/curand/x.py": b""})
    prefix = new_venv(tmp_path / "venv")
    install(prefix, wheels, "torch", "cuda-bindings", "cuda-toolkit", "nvidia-cublas",
            "nvidia-curand", deps=False)  # fmt: skip
    healthy = cudafix("doctor", "--venv", prefix, "--json")
    assert healthy.returncode == 0, as_json(healthy)["findings"]
    uv_uninstall(prefix / "bin" / "python", "nvidia-curand")
    broken = as_json(cudafix("doctor", "--venv", prefix, "--json"))
    said = [f["message"] for f in broken["findings"] if f["kind"] == "requirement"]
    assert any("nvidia-curand" in m for m in said), said  # torch's own request still counts
