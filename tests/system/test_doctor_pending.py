"""doctor over a killed transaction: never "Healthy", its next step is ``cudafix recover``.

A run killed mid-transaction (SIGKILL at a journaled step, through the fault hooks) leaves
the environment half-changed; ``cudafix doctor -q && launch`` must stop there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cudafix.faults import CRASH_ENV
from cudafix.flows.target import doctor
from cudafix.model.args import FactArgs, TargetArgs
from cudafix.model.doctor import PendingTransaction
from cudafix.model.errors import ExitCode
from cudafix.tx.pending import pending_transactions
from tests.support.cli import as_json, cudafix, offline
from tests.support.doctor import with_facts
from tests.support.venvs import install, new_venv
from tests.support.wheels import make_wheel

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("step", ["plan", "backend"])
def test_a_killed_transaction_is_an_error_whose_next_step_is_recover(
    tmp_path: Path, step: str
) -> None:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "pc", "1.0", {"pc_mod.py": b"C = 1\n", "pc/data.txt": b"c\n"})
    prefix = new_venv(tmp_path / "venv")
    install(prefix, wheels, "pc==1.0")
    warm = cudafix("doctor", "-q", "--venv", prefix)  # remembered: healthy before the crash
    assert warm.returncode == 0, warm.stdout + warm.stderr
    remove = ["remove", "pc", "--venv", prefix, *offline(wheels), "--yes"]
    killed = cudafix(*remove, env={CRASH_ENV: step})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    [txid] = pending_transactions(prefix)
    recover = ["cudafix", "recover", "--venv", str(prefix)]

    quiet = cudafix("doctor", "-q", "--venv", prefix)
    assert quiet.returncode == ExitCode.LOCKED, quiet.stdout + quiet.stderr
    assert "Healthy" not in quiet.stdout
    assert quiet.stdout.splitlines()[-1] == f"Next: cudafix recover --venv {prefix}"

    report = as_json(cudafix("doctor", "--json", "--venv", prefix))
    assert report["next_command"] == recover
    first = report["findings"][0]
    assert (first["kind"], first["severity"], first["command"]) == (
        "pending-transaction",
        "error",
        recover,
    )
    report_value = doctor(FactArgs(TargetArgs(venv=str(prefix)))).report
    [(finding, facts)] = with_facts(report_value.findings, PendingTransaction)
    assert facts.txids == [txid] and finding.severity == "error"

    again = cudafix("doctor", "-q", "--venv", prefix)  # never remembered while pending
    assert again.returncode == ExitCode.LOCKED and "given again" not in again.stderr

    assert cudafix("recover", "--venv", prefix).returncode == 0
    assert cudafix("doctor", "-q", "--venv", prefix).returncode == 0
