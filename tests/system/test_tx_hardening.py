"""The transaction's state and recovery under a hostile or damaged environment.

Symlinked state, tampered manifests and post-states, damaged journals, failing journal
writes and per-path restore failures, on real venvs with the real uv binary.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from test_transaction import BAD, OK, _run_child, assert_same

from cudafix.env.statedir import StateDir, new_txid
from cudafix.faults import CRASH_ENV, FAIL_ENV
from cudafix.model.errors import (
    DamagedState,
    ExitCode,
    RollbackIncomplete,
    StalePlan,
    TransactionFailed,
    UnsafeState,
)
from cudafix.tx import journal
from cudafix.tx.apply import run_transaction
from cudafix.tx.difference import Difference
from cudafix.tx.history import history, show
from cudafix.tx.manifest import Entry, stored
from cudafix.tx.manifest import load as load_manifest
from cudafix.tx.pending import pending_transactions
from cudafix.tx.poststate import post_state_from_json
from cudafix.tx.recovery import recover
from cudafix.tx.steps import Opening, RollbackBegin
from cudafix.tx.undo import undo
from scenarios.fingerprint import fingerprint
from tests.support.tx import mirror_store, remove_pa_plan
from tests.support.venvs import site_rel

pytestmark = pytest.mark.slow
"""Builds real venvs or runs the CLI through transactions: left out of ``make test-fast``."""


def _listing(where: Path) -> list[str]:
    return sorted(str(p.relative_to(where)) for p in where.rglob("*"))


# -- state under .cudafix is never followed out of the environment ---------------------------


@pytest.mark.parametrize("link", [".cudafix", ".cudafix/transactions", ".cudafix/lock"])
def test_symlinked_state_is_refused_and_nothing_lands_outside(
    venv: tuple[Path, Path], tmp_path: Path, link: str
) -> None:
    prefix, wheels = venv
    outside = tmp_path / "outside"
    outside.mkdir()
    (prefix / link).parent.mkdir(parents=True, exist_ok=True)
    target = outside / "victim" if link.endswith("lock") else outside
    if link.endswith("lock"):
        target.write_text("precious\n")
    (prefix / link).symlink_to(target)
    before = fingerprint(prefix)
    with pytest.raises(UnsafeState) as info:
        run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    assert info.value.exit_code == ExitCode.USAGE
    assert link.split("/")[-1] in info.value.message
    assert_same(prefix, before)
    assert _listing(outside) == (["victim"] if link.endswith("lock") else [])
    if link.endswith("lock"):
        assert target.read_text() == "precious\n"


def test_symlinked_transactions_are_not_listed(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, _ = venv
    elsewhere = tmp_path / "foreign" / "20990101T000000-1-abc"
    elsewhere.mkdir(parents=True)
    (elsewhere / "journal.jsonl").write_text('{"event": "plan"}\n')
    state = StateDir(prefix)
    state.transactions.mkdir(parents=True)
    (state.transactions / elsewhere.name).symlink_to(elsewhere)
    assert history(prefix) == [] and pending_transactions(prefix) == []
    (state.transactions / elsewhere.name).unlink()
    state.transactions.rmdir()
    state.transactions.symlink_to(elsewhere.parent)
    with pytest.raises(UnsafeState):
        history(prefix)


# -- recover trusts nothing it reads ----------------------------------------------------------


def _crashed(prefix: Path, wheels: Path, tmp: Path, step: str = "backend") -> StateDir:
    """A transaction SIGKILLed after the uninstall changed the environment."""
    assert _run_child(remove_pa_plan(prefix, wheels), OK, tmp, {CRASH_ENV: step}) == -signal.SIGKILL
    return StateDir(prefix)


def _only_tx(state: StateDir):  # type: ignore[no-untyped-def]
    [txid] = state.transaction_ids()
    return state.tx(txid)


@pytest.mark.parametrize(
    "tamper",
    [
        {"path": "../../outside/victim", "kind": "absent"},
        {"path": "/etc/hostname-cudafix-test", "kind": "absent"},
        {"path": ".cudafix/lock", "kind": "absent"},
        "listing",
    ],
    ids=["dotdot", "absolute", "statedir", "listing"],
)
def test_manifest_paths_outside_are_refused(
    venv: tuple[Path, Path], tmp_path: Path, tamper: object
) -> None:
    prefix, wheels = venv
    victim = tmp_path / "outside" / "victim"
    victim.parent.mkdir()
    victim.write_text("precious\n")
    state = _crashed(prefix, wheels, tmp_path)
    t = _only_tx(state)
    data = json.loads(t.manifest.read_text())
    if tamper == "listing":
        key = next(iter(data["listings"]))
        data["listings"][key].append("../../../../outside")
    else:
        assert isinstance(tamper, dict)
        written = Entry(**tamper)._asdict()
        data["rows"].append([written[f] for f in data["fields"]])
    t.manifest.write_text(json.dumps(data))
    mid = fingerprint(prefix)
    with pytest.raises(DamagedState) as info:
        recover(prefix)
    assert info.value.exit_code == ExitCode.LOCKED
    assert str(t.manifest) in info.value.message
    assert victim.read_text() == "precious\n"
    assert fingerprint(prefix) == mid
    assert t.snapshot.is_dir()
    dry = recover(prefix, dry_run=True)
    assert "cannot restore" in dry.actions[0]
    assert [e.state for e in history(prefix)] == ["pending"]


def _older_form(data: dict[str, Any]) -> dict[str, Any]:
    """The manifest as cudafix wrote it before rows: one dict per entry."""
    entries = [dict(zip(data["fields"], row, strict=True)) for row in data["rows"]]
    return {"entries": entries, "listings": data["listings"]}


def test_manifest_of_an_older_cudafix_still_restores(
    venv: tuple[Path, Path], tmp_path: Path
) -> None:
    """A transaction left pending by a cudafix that wrote one dict per entry: recover reads
    that form, restores byte-identically, and still refuses a path outside in it."""
    prefix, wheels = venv
    before = fingerprint(prefix)
    t = _only_tx(_crashed(prefix, wheels, tmp_path))
    data = _older_form(json.loads(t.manifest.read_text()))
    t.manifest.write_text(
        json.dumps({**data, "entries": [*data["entries"], {"path": "../x", "kind": "absent"}]})
    )
    with pytest.raises(DamagedState):
        recover(prefix)
    t.manifest.write_text(json.dumps(data))
    recover(prefix)
    assert_same(prefix, before)
    assert [e.state for e in history(prefix)] == ["rolled-back"]


def test_a_mirrored_store_of_an_older_cudafix_still_recovers(
    venv: tuple[Path, Path], tmp_path: Path
) -> None:
    """A transaction left pending by a cudafix whose store mirrored the environment (each
    file at its own path, a manifest without slots): recover restores byte-identically."""
    prefix, wheels = venv
    before = fingerprint(prefix)
    t = _only_tx(_crashed(prefix, wheels, tmp_path))
    mirror_store(t)
    assert all(e.slot == -1 for e in load_manifest(t).entries)
    recover(prefix)
    assert_same(prefix, before)
    assert [e.state for e in history(prefix)] == ["rolled-back"]


@pytest.mark.parametrize("layout", ["flat", "mirrored"])
def test_undo_refuses_a_replaced_snapshot_file_and_undoes_either_layout(
    venv: tuple[Path, Path], layout: str
) -> None:
    """Undo reads each file of the store where its entry says (a number in a flat store, its
    own path in a mirrored one): one replaced there is refused, the intact store undone."""
    prefix, wheels = venv
    before = fingerprint(prefix)
    done = run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    t = StateDir(prefix).tx(done.txid)
    if layout == "mirrored":
        mirror_store(t)
    [e] = [e for e in load_manifest(t).entries if e.path.endswith("/pa_mod.py")]
    kept = t.snapshot / stored(e)
    aside = kept.rename(t.snapshot / "aside")
    kept.write_bytes(aside.read_bytes())  # the same bytes in another file
    with pytest.raises(StalePlan) as info:
        undo(prefix, done.txid)
    assert any("its snapshot was modified" in c for c in info.value.context)
    aside.rename(kept)
    undo(prefix, done.txid)
    assert_same(prefix, before)


def test_post_state_outside_is_refused_by_undo(venv: tuple[Path, Path], tmp_path: Path) -> None:
    prefix, wheels = venv
    done = run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    post = StateDir(prefix).tx(done.txid).post
    data = json.loads(post.read_text())
    data["changed"]["../../outside"] = ["dir", 0o777, []]
    post.write_text(json.dumps(data))
    after = fingerprint(prefix)
    with pytest.raises(DamagedState, match="post-state"):
        undo(prefix, done.txid)
    assert fingerprint(prefix) == after


def test_post_state_of_an_older_cudafix_still_undoes(
    venv: tuple[Path, Path], tmp_path: Path
) -> None:
    """A post-state written before it was kept as a difference from the manifest (every path
    itself) is still checked and undone; one naming a path outside is still refused."""
    prefix, wheels = venv
    before = fingerprint(prefix)
    done = run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    t = StateDir(prefix).tx(done.txid)
    whole = post_state_from_json(json.loads(t.post.read_text()), load_manifest(t))
    assert len(whole) > len(json.loads(t.post.read_text())["changed"])
    t.post.write_text(json.dumps({**whole, "../outside": ["absent"]}))
    with pytest.raises(DamagedState, match="post-state"):
        undo(prefix, done.txid)
    t.post.write_text(json.dumps(whole))
    undo(prefix, done.txid)
    assert_same(prefix, before)


# -- a damaged journal never discards the only copy ---------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "garbled", "binary"])
def test_damaged_journal_still_restores(
    venv: tuple[Path, Path], tmp_path: Path, damage: str
) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    t = _only_tx(_crashed(prefix, wheels, tmp_path))
    lines = t.journal.read_bytes().splitlines(keepends=True)
    if damage == "truncated":
        t.journal.write_bytes(lines[0])
    elif damage == "garbled":
        t.journal.write_bytes(lines[0] + b'{"event": "snap\n' + b"".join(lines[3:]))
    else:
        t.journal.write_bytes(lines[0] + b"\xff\xfe\x00garbage\n")
    assert not (prefix / site_rel(prefix) / "pa_mod.py").exists()
    [entry] = history(prefix)
    assert entry.state == "pending"
    assert "restore" in recover(prefix, dry_run=True).actions[0]
    recover(prefix)
    assert_same(prefix, before)


@pytest.mark.parametrize("damage", ["garbled", "missing"])
def test_damaged_manifest_is_a_clear_refusal(
    venv: tuple[Path, Path], tmp_path: Path, damage: str
) -> None:
    prefix, wheels = venv
    t = _only_tx(_crashed(prefix, wheels, tmp_path))
    if damage == "garbled":
        t.manifest.write_text('{"entries": [{"path": ')
    else:
        t.manifest.unlink()
    with pytest.raises(DamagedState) as info:
        recover(prefix)
    assert "manifest" in info.value.message and str(t.manifest) in info.value.message
    assert t.snapshot.is_dir()
    assert [e.state for e in history(prefix)] == ["pending"]
    assert show(prefix, t.txid).entry.state == "pending" if damage == "missing" else True


def test_torn_line_does_not_swallow_the_next_record(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal.append(path, Opening())
    with path.open("a") as fh:
        fh.write('{"event": "snapshot-be')
    journal.append(path, RollbackBegin(reason="test"))
    log = journal.load(path)
    assert journal.events(log.records) == ["plan", "rollback-begin"]
    assert log.damaged == (2,)


# -- failing writes: the rollback goes on without its journal ------------------------------------


def test_enospc_at_commit_rolls_back(
    venv: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    monkeypatch.setenv(FAIL_ENV, "commit:ENOSPC")
    with pytest.raises(TransactionFailed, match="No space left") as info:
        run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    assert not isinstance(info.value, RollbackIncomplete)
    assert_same(prefix, before)
    assert [e.state for e in history(prefix)] == ["rolled-back"]


def test_enospc_for_the_rollback_journal_still_restores(
    venv: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    failing = ["rollback-begin", "restore-begin", "rolled-back", "aborted"]
    monkeypatch.setenv(FAIL_ENV, ",".join(f"journal@{e}:ENOSPC" for e in failing))
    with pytest.raises(TransactionFailed) as info:
        run_transaction(remove_pa_plan(prefix, wheels), probes=BAD)
    assert_same(prefix, before)
    assert any("could not record" in c for c in info.value.context)
    assert any(
        c == f"once there is space: cudafix recover --venv {prefix}" for c in info.value.context
    )
    monkeypatch.delenv(FAIL_ENV)
    assert pending_transactions(prefix)
    recover(prefix)
    assert_same(prefix, before)
    assert pending_transactions(prefix) == []


def test_enospc_at_the_first_journal_write_leaves_nothing(
    venv: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, wheels = venv
    before = fingerprint(prefix)
    monkeypatch.setenv(FAIL_ENV, "journal@plan:ENOSPC")
    with pytest.raises(TransactionFailed, match="nothing was changed"):
        run_transaction(remove_pa_plan(prefix, wheels), probes=OK)
    assert_same(prefix, before)
    assert pending_transactions(prefix) == [] and history(prefix) == []
    monkeypatch.delenv(FAIL_ENV)
    run_transaction(remove_pa_plan(prefix, wheels), probes=OK)


def test_one_path_that_cannot_be_restored_does_not_stop_the_rest(
    venv: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix, wheels = venv
    sp = site_rel(prefix)
    before = fingerprint(prefix)
    monkeypatch.setenv(FAIL_ENV, "restore@*/pa_mod.py:EPERM")
    with pytest.raises(RollbackIncomplete) as info:
        run_transaction(remove_pa_plan(prefix, wheels), probes=BAD)
    assert info.value.exit_code == ExitCode.LOCKED
    assert info.value.context[0].startswith(f"{sp}/pa_mod.py: Operation not permitted")
    assert [c for c in info.value.context if "differs" in c or "missing" in c] == []
    assert (prefix / sp / "pa-1.0.dist-info" / "RECORD").is_file()
    assert not (prefix / sp / "pa_mod.py").exists()
    monkeypatch.delenv(FAIL_ENV)
    recover(prefix)
    assert_same(prefix, before)


@pytest.mark.skipif(os.geteuid() != 0, reason="chattr +i needs root")
def test_an_immutable_directory_with_the_right_mode_is_left_alone(
    venv: tuple[Path, Path],
) -> None:
    import subprocess

    prefix, wheels = venv
    before = fingerprint(prefix)
    lib = prefix / "lib"
    if subprocess.run(["chattr", "+i", str(lib)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable attribute")
    try:
        with pytest.raises(TransactionFailed) as info:
            run_transaction(remove_pa_plan(prefix, wheels), probes=BAD)
        assert not isinstance(info.value, RollbackIncomplete), info.value.context
    finally:
        subprocess.run(["chattr", "-i", str(lib)], check=True)
    assert_same(prefix, before)


def test_verify_reports_a_missing_name(venv: tuple[Path, Path], tmp_path: Path) -> None:
    from cudafix.tx import restore, snapshot

    prefix, _ = venv
    sp = site_rel(prefix)
    t = StateDir(prefix).tx("t")
    t.root.mkdir(parents=True)
    manifest = snapshot.take(prefix, t, [f"{sp}/shared"])
    (prefix / sp / "shared" / "lib.so").unlink()
    problems = restore.verify(prefix, manifest)
    assert Difference(f"{sp}/shared", "missing-names", ("lib.so",)) in problems


def test_a_new_id_sorts_after_the_newest_even_with_the_clock_behind_it() -> None:
    ahead = "20991231T235959-999999999-abcdef"
    assert new_txid(ahead).startswith("21000101T000000-000000000-")
    assert new_txid("20991231T235959-000000041-abcdef").startswith("20991231T235959-000000042-")
    now = new_txid()
    assert now > "20261201T000000" and new_txid(now) > now
    for other in ("not-an-id", "20261301T000000-000000000-abcdef", "20261201T000000-1" + "0" * 30):
        assert new_txid(other) < ahead  # a name cudafix did not make: the clock decides
