"""A venv copied elsewhere with its console scripts' shebangs rewritten (venv-pack,
conda-pack, Docker multi-stage builds) is healthy; a script whose interpreter is gone is
its own finding, and ``repair`` as printed fixes it.

Real parts: a wheel holding a gcc-built library and a console script, installed by uv, the
venv copied with ``cp -a`` and its shebang rewritten as the packers do.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cudafix.model.doctor import Scripts
from tests.support.cli import as_json, cudafix
from tests.support.doctor import diagnosed, with_facts
from tests.support.venvs import install, new_venv
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow


def _relocated(tmp_path: Path) -> tuple[Path, Path]:
    src = tmp_path / "pr.c"
    src.write_text("int pr(void){return 1;}\n")
    lib = tmp_path / "libpr.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)
    wheels = tmp_path / "wheels"
    files = {"pr_mod.py": b"def main():\n    print('hi')\n", "pr/libpr.so": lib.read_bytes()}
    make_wheel(wheels, "pr", "1.0", files, scripts=True)
    first = new_venv(tmp_path / "built")
    install(first, wheels, "pr==1.0")
    moved = tmp_path / "deployed" / "venv"
    moved.parent.mkdir()
    subprocess.run(["cp", "-a", first, moved], check=True)
    script = moved / "bin" / "pr-cli"
    body = script.read_text().split("\n", 1)[1]
    script.write_text(f"#!{moved}/bin/python\n{body}")
    return moved, wheels


def _kinds(prefix: Path) -> dict[str, list[dict[str, object]]]:
    report = as_json(cudafix("doctor", "--venv", prefix, "--json"))
    out: dict[str, list[dict[str, object]]] = {}
    for f in report["findings"]:
        out.setdefault(f["kind"], []).append(f)
    return out


def test_a_relocated_venv_is_healthy_and_says_so(tmp_path: Path) -> None:
    moved, _ = _relocated(tmp_path)
    assert subprocess.run([moved / "bin" / "pr-cli"], capture_output=True).returncode == 0
    done = cudafix("doctor", "--venv", moved)
    assert done.returncode == 0, done.stdout
    kinds = _kinds(moved)
    assert "foreign-bytes" not in kinds and "bad-script" not in kinds
    [note] = kinds["relocated"]
    assert note["severity"] == "info" and note["paths"] == ["bin/pr-cli"]
    [(_, script)] = with_facts(diagnosed(moved).findings, Scripts)
    assert script.interpreters == [f"{moved}/bin/python"]
    assert as_json(cudafix("repair", "--venv", moved, "--dry-run", "--json"))["state"] == (
        "nothing-to-do"
    )


def test_a_script_whose_interpreter_is_gone_is_named_and_repaired(tmp_path: Path) -> None:
    moved, wheels = _relocated(tmp_path)
    script = moved / "bin" / "pr-cli"
    body = script.read_text().split("\n", 1)[1]
    script.write_text(f"#!/nonexistent/venv/bin/python\n{body}")
    done = cudafix("doctor", "--venv", moved)
    assert done.returncode == 1
    [bad] = _kinds(moved)["bad-script"]
    assert bad["severity"] == "warning" and bad["paths"] == ["bin/pr-cli"]
    assert bad["command"][:2] == ["cudafix", "repair"]
    fixed = cudafix("repair", "--venv", moved, "--yes", "--offline", "--find-links", wheels)
    assert fixed.returncode == 0, fixed.stderr
    assert script.read_text().startswith(f"#!{moved}/bin/python")
    assert cudafix("doctor", "--venv", moved).returncode == 0


@pytest.mark.parametrize(
    ("first", "shown"),
    [
        pytest.param(b"#!/nonexistent/py\0thon", "/nonexistent/py", id="nul-byte"),
        pytest.param(
            b"#!/nonexistent/py\xfft\x1bhon", "/nonexistent/py\\xfft\x1bhon", id="not-utf8"
        ),
    ],
)
def test_a_hostile_shebang_is_a_bad_script_in_every_report(
    tmp_path: Path, first: bytes, shown: str
) -> None:
    """A ``#!`` line no system call can take (a NUL byte: the kernel stops the interpreter's
    name there) or no UTF-8 report can carry is read as the kernel reads it: one bad script,
    in the text report, ``--json`` and ``repair``'s plan, never an internal error."""
    moved, wheels = _relocated(tmp_path)
    script = moved / "bin" / "pr-cli"
    script.write_bytes(first + b"\n" + script.read_bytes().split(b"\n", 1)[1])
    text = cudafix("doctor", "--venv", moved)
    assert text.returncode == 1 and "internal error" not in text.stderr, text.stderr
    assert "[bad-script]" in text.stdout
    [bad] = _kinds(moved)["bad-script"]
    assert bad["paths"] == ["bin/pr-cli"]
    [(_, facts)] = with_facts(diagnosed(moved).findings, Scripts)
    assert facts.interpreters == [shown]
    plan = as_json(cudafix("repair", "--venv", moved, "--dry-run", "--json", "--offline",
                           "--find-links", wheels))  # fmt: skip
    assert [r["name"] for r in plan["reinstall"]] == ["pr"]
