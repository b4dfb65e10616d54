"""``make e2e-real``, fourth part: the fleet recipes of ``docs/fleet.md`` on a real Ansible.

``ansible-core`` is installed once with uv from the index into ``$CUDAFIX_REAL_CACHE/ansible``
(default ``~/.cache/cudafix-real/ansible``). The "hosts" are aliases of this machine
(``ansible_connection: local``), each with its own scenario venv as ``cudafix_venv``:

- ``examples/fleet/site.yml`` (the ``cudafix`` role: doctor, repair dry run, repair, doctor):
  ``healthy`` (``clean``), ``broken`` (``incident-mirror`` after its plain ``uv pip
  uninstall``), ``pending`` (``clean`` with a ``cudafix run -- sleep 60`` killed by SIGKILL
  mid-transaction). First ``--limit broken -e cudafix_repair=false``: a plan, no change. Then
  ``--limit healthy,broken``: the play passes, ``healthy`` is untouched
  (fingerprint, no transaction), ``broken`` is repaired (``doctor`` exits 0 afterwards), and
  each host's JSON file parses. Then every host: the play fails (exit 2) naming ``pending``
  and ``cudafix recover``, ``pending`` is left as it was, the others change nothing.
- ``examples/fleet/apply-plan.yml``: one plan saved from ``examples/seed-cleanup.toml`` on an
  ``incident`` venv, applied to two copies of it, one changed by hand first (``nvidia-nvtx-cu13``
  uninstalled): ``node-a`` commits, ``node-b`` is refused as stale and untouched, the play
  passes in two waves (``cudafix_serial=50%``), ``results.jsonl`` holds one line per node, and
  the doc's ``jq`` lines read it.

Prints Markdown; writes ``bench-out/e2e-fleet.json``. Exit 0 only when every check holds.
The pdsh and Slurm recipes: ``benchmarks/e2e_fleet_hpc.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uv

from benchmarks.e2e_frameworks import cache_dir
from benchmarks.e2e_real import Run, user_env
from benchmarks.proc import Timed
from benchmarks.sections import cudafix_argv
from cudafix.tx.pending import pending_transactions
from scenarios import build_scenario
from scenarios.fingerprint import diff_fingerprints, fingerprint

REPO = Path(__file__).resolve().parents[1]
FLEET = REPO / "examples" / "fleet"
ANSIBLE_SPEC = "ansible-core"


def ansible_venv(run: Run) -> Path:
    """``ansible-core`` in its own venv, outside the repository; built once."""
    venv = cache_dir() / "ansible"
    if not (venv / "bin" / "ansible-playbook").exists():
        run.step("uv venv ansible", [uv.find_uv_bin(), "venv", "--python", sys.executable, venv])
        done = run.step(
            f"uv pip install {ANSIBLE_SPEC}",
            [uv.find_uv_bin(), "pip", "install", "--python", venv / "bin" / "python", ANSIBLE_SPEC],
        )
        if done.returncode != 0:
            raise SystemExit(f"installing {ANSIBLE_SPEC} failed:\n{done.stderr[-3000:]}")
    return venv


def ansible_env(work: Path) -> dict[str, str]:
    """A quiet, reproducible Ansible: UTF-8, no retry files, its state under ``work``."""
    return {
        **user_env(),
        "LC_ALL": "C.UTF-8",
        "ANSIBLE_HOME": str(work / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_HOST_KEY_CHECKING": "false",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
    }


def inventory(path: Path, ansible: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    """An INI inventory in the form docs/fleet.md shows: vars on each host's line (there a
    list is a Python literal; under ``[gpu_nodes:vars]`` it would be a string). Every host is
    this machine."""
    lines = ["[gpu_nodes]"]
    for name, own in hosts.items():
        values = {
            **own,
            "ansible_connection": "local",
            "ansible_python_interpreter": str(ansible / "bin" / "python"),
            "cudafix_command": cudafix_argv(),
        }
        words = [
            f"{k}='{json.dumps(v)}'" if isinstance(v, list) else f"{k}={v}"
            for k, v in values.items()
        ]
        lines.append(" ".join([name, *words]))
    path.write_text("\n".join(lines) + "\n")
    return path


def playbook(
    run: Run, label: str, ansible: Path, work: Path, inv: Path, book: str, *extra: str
) -> Timed:
    argv: list[str | Path] = [ansible / "bin" / "ansible-playbook", "-i", inv, FLEET / book, *extra]
    done = run.step(label, argv, env=ansible_env(work))
    logs = REPO / "bench-out" / "e2e-fleet"
    logs.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    (logs / f"{len(run.steps):02d}-{name}.log").write_text(done.stdout + done.stderr)
    return done


RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)


def recap(done: Timed) -> dict[str, dict[str, int]]:
    """PLAY RECAP: ``host: {ok, changed, unreachable, failed}``."""
    return {
        m[1]: dict(
            zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups()[1:]), strict=True)
        )
        for m in RECAP.finditer(done.stdout)
    }


def results(folder: Path) -> dict[str, Any]:
    """Every ``<host>.json`` the role sent to the controller, parsed (an error if one does not)."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def doctor_exit(venv: Path) -> int:
    done = subprocess.run(
        [*cudafix_argv(), "doctor", "-q", "--venv", str(venv)],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        check=False,
        env=user_env(),
    )
    return done.returncode


def kill_mid_transaction(run: Run, venv: Path) -> str:
    """``cudafix run -- sleep 60``, SIGKILLed (with its command) once its journal exists."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [*cudafix_argv(), "run", "--venv", str(venv), "--", "sleep", "60"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=user_env(),
    )
    try:
        deadline = time.monotonic() + 60
        while not pending_transactions(venv) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    pending = pending_transactions(venv)
    run.steps.append(
        {"step": "cudafix run -- sleep 60, killed", "seconds": time.perf_counter() - start}
    )
    if not run.check("pending: a killed run left its transaction unfinished", len(pending) == 1):
        raise SystemExit("no unfinished transaction to test with")
    return pending[0]


def doctor_repair(run: Run, ansible: Path, work: Path) -> None:
    """``site.yml``: healthy untouched, broken repaired, pending fails the play by name."""
    venvs = {
        "healthy": build_scenario("clean", work / "healthy" / "venv").venv,
        "pending": build_scenario("clean", work / "pending" / "venv").venv,
    }
    broken = build_scenario("incident-mirror", work / "broken" / "venv", stage="broken")
    venvs["broken"] = broken.venv
    txid = kill_mid_transaction(run, venvs["pending"])
    hosts: dict[str, dict[str, Any]] = {name: {"cudafix_venv": str(v)} for name, v in venvs.items()}
    hosts["broken"]["cudafix_options"] = ["--offline", "--find-links", str(broken.wheelhouse)]
    inv = inventory(work / "inventory.ini", ansible, hosts)
    out = work / "results"
    before = {name: fingerprint(v) for name, v in venvs.items()}
    run.check("broken: doctor exits 1 before the play", doctor_exit(venvs["broken"]) == 1)

    planned = playbook(
        run, "site.yml --limit broken -e cudafix_repair=false", ansible, work, inv, "site.yml",
        "--limit", "broken", "-e", "cudafix_repair=false", "-e", f"cudafix_results_dir={out}",
    )  # fmt: skip
    only = results(out).get("broken", {})
    run.check(
        "cudafix_repair=false: the play passes, the plan is kept, nothing changes",
        planned.returncode == 0
        and only.get("plan", {}).get("exit") == 0
        and "repair" not in only
        and not diff_fingerprints(before["broken"], fingerprint(venvs["broken"])),
        f"exit {planned.returncode}; {sorted(only)}",
    )
    (out / "broken.json").unlink(missing_ok=True)

    first = playbook(
        run, "site.yml --limit healthy,broken", ansible, work, inv, "site.yml",
        "--limit", "healthy,broken", "-e", f"cudafix_results_dir={out}",
    )  # fmt: skip
    tail = "\n".join(first.stdout.strip().splitlines()[-6:])
    run.check("site.yml on healthy,broken: the play passes (exit 0)", first.returncode == 0, tail)
    counts = recap(first)
    run.check(
        "recap: healthy ok, nothing changed; broken changed once",
        counts.get("healthy", {}).get("changed") == 0
        and counts.get("broken", {}).get("changed") == 1
        and all(c["failed"] == 0 for c in counts.values()),
        json.dumps(counts),
    )
    got = results(out)
    run.check("a JSON file per host, each parses", sorted(got) == ["broken", "healthy"], str(got))
    healthy, fixed = got.get("healthy", {}), got.get("broken", {})
    run.check(
        "healthy: doctor exit 0, nothing planned",
        healthy.get("doctor", {}).get("exit") == 0 and "repair" not in healthy,
    )
    diff = diff_fingerprints(before["healthy"], fingerprint(venvs["healthy"]))
    run.check("healthy: untouched (fingerprint equal)", not diff, "; ".join(diff[:5]))
    run.check(
        "healthy: no transaction recorded",
        not (venvs["healthy"] / ".cudafix" / "transactions").exists()
        or not any((venvs["healthy"] / ".cudafix" / "transactions").iterdir()),
    )
    run.check(
        "broken: doctor 1, plan passes, repair commits, doctor 0 (its JSON)",
        [fixed.get(k, {}).get("exit") for k in ("doctor", "plan", "repair", "after")]
        == [1, 0, 0, 0]
        and fixed["plan"]["result"].get("verdict") == "pass"
        and fixed["repair"]["result"].get("state") == "committed",
        json.dumps(
            {k: fixed.get(k, {}).get("exit") for k in ("doctor", "plan", "repair", "after")}
        ),
    )
    run.check("broken: doctor exits 0 afterwards", doctor_exit(venvs["broken"]) == 0)
    repaired = fingerprint(venvs["broken"])

    second = playbook(
        run, "site.yml, every host", ansible, work, inv, "site.yml",
        "-e", f"cudafix_results_dir={out}",
    )  # fmt: skip
    fatal = [ln for ln in second.stdout.splitlines() if ln.startswith("fatal: [")]
    run.check(
        "every host: the play fails (exit 2)", second.returncode == 2, f"exit {second.returncode}"
    )
    run.check(
        "the failure names pending, needs a human, and cudafix recover",
        len(fatal) == 1
        and fatal[0].startswith("fatal: [pending]")
        and "needs a human" in second.stdout
        and f"cudafix recover --venv {venvs['pending']}" in second.stdout,
        fatal[0][:300] if fatal else second.stdout[-600:],
    )
    counts = recap(second)
    run.check(
        "recap: pending failed; healthy and broken ok, nothing changed",
        counts.get("pending", {}).get("failed") == 1
        and all(counts.get(h, {}).get("failed") == 0 for h in ("healthy", "broken"))
        and all(c["changed"] == 0 for c in counts.values()),
        json.dumps(counts),
    )
    got = results(out)
    pending = got.get("pending", {}).get("doctor", {})
    run.check(
        "pending: its JSON names the unfinished transaction, exit 4",
        pending.get("exit") == 4
        and pending["result"]["findings"][0]["kind"] == "pending-transaction"
        and txid in pending["result"]["findings"][0]["message"],
        json.dumps(pending)[:300],
    )
    run.check(
        "pending: left for a human (transaction still unfinished, files as they were)",
        pending_transactions(venvs["pending"]) == [txid]
        and not diff_fingerprints(before["pending"], fingerprint(venvs["pending"])),
    )
    run.check(
        "healthy and broken: the second play changed nothing",
        not diff_fingerprints(before["healthy"], fingerprint(venvs["healthy"]))
        and not diff_fingerprints(repaired, fingerprint(venvs["broken"])),
    )


def planned_fleet(run: Run, work: Path, names: list[str], stale: str) -> dict[str, Path] | None:
    """``work/plan.json``, saved from ``examples/seed-cleanup.toml`` on an ``incident`` venv, and
    a copy of that venv per node (``work/NAME/venv``); ``stale`` changed by hand first
    (``nvidia-nvtx-cu13`` uninstalled). None when the plan could not be saved."""
    built = build_scenario("incident", work / "planned" / "venv")
    plan = work / "plan.json"
    saved = run.step(
        "apply examples/seed-cleanup.toml --dry-run --out plan.json",
        [
            *cudafix_argv(), "apply", REPO / "examples" / "seed-cleanup.toml",
            "--venv", built.venv, "--dry-run", "--offline", "--find-links", built.wheelhouse,
            "--out", plan,
        ],
        env=user_env(),
    )  # fmt: skip
    if not run.check("the plan is saved", saved.returncode == 0 and plan.exists(), saved.stderr):
        return None
    nodes = {name: work / name / "venv" for name in names}
    for node in nodes.values():
        node.parent.mkdir(parents=True)
        subprocess.run(["cp", "-a", str(built.venv), str(node)], check=True)
    changed = subprocess.run(
        [uv.find_uv_bin(), "pip", "uninstall", "--python", nodes[stale] / "bin" / "python",
         "nvidia-nvtx-cu13"],
        capture_output=True,
        check=False,
    )  # fmt: skip
    run.check(f"{stale} changed by hand (nvidia-nvtx-cu13 uninstalled)", changed.returncode == 0)
    return nodes


def apply_plan(run: Run, ansible: Path, work: Path) -> None:
    """``apply-plan.yml``: one reviewed plan, two nodes, one of them not the one planned for."""
    nodes = planned_fleet(run, work, ["node-a", "node-b"], stale="node-b")
    if nodes is None:
        return
    plan = work / "plan.json"
    inv = inventory(
        work / "nodes.ini", ansible, {n: {"cudafix_venv": str(v)} for n, v in nodes.items()}
    )
    before = fingerprint(nodes["node-b"])
    lines = work / "results.jsonl"
    done = playbook(
        run, "apply-plan.yml on node-a, node-b", ansible, work, inv, "apply-plan.yml",
        "-e", f"cudafix_plan={plan}", "-e", f"cudafix_plan_dest={work / 'plan-copy.json'}",
        "-e", f"cudafix_results={lines}", "-e", "cudafix_serial=50%",
    )  # fmt: skip
    run.check("apply-plan.yml: the play passes (exit 0)", done.returncode == 0, done.stdout[-600:])
    run.check(
        "cudafix_serial=50%: two waves of one node",
        done.stdout.count("PLAY [Apply the reviewed cudafix plan]") == 2,
    )
    rows = (
        [json.loads(ln) for ln in lines.read_text().splitlines() if ln.strip()]
        if lines.exists()
        else []
    )
    by_host = {r["host"]: r for r in rows}
    run.check(
        "results.jsonl: node-a committed (exit 0), node-b stale (exit 3)",
        {h: (r["exit"], r["result"]["state"]) for h, r in by_host.items()}
        == {"node-a": (0, "committed"), "node-b": (3, "stale")},
        json.dumps({h: (r["exit"], r["result"]["state"]) for h, r in by_host.items()}),
    )
    run.check(
        "the summary shows the states by host",
        "'node-a': 'committed'" in done.stdout or '"node-a": "committed"' in done.stdout,
    )
    run.check("node-b: untouched", not diff_fingerprints(before, fingerprint(nodes["node-b"])))
    run.check("node-a: doctor exits 0 after the plan", doctor_exit(nodes["node-a"]) == 0)
    jq = shutil.which("jq")
    if jq is None:
        run.notes.append("jq not found: the doc's jq aggregation was not run")
        return
    table = subprocess.run(
        [jq, "-r", "[.host, .exit, .result.state] | @tsv", lines], capture_output=True, text=True
    )
    replan = subprocess.run(
        [jq, "-r", "select(.exit == 3) | .host", lines], capture_output=True, text=True
    )
    run.check(
        "the doc's jq lines: a table by host, node-b on the re-plan list",
        table.stdout.splitlines() == ["node-a\t0\tcommitted", "node-b\t3\tstale"]
        and replan.stdout == "node-b\n",
        table.stdout + table.stderr + replan.stdout,
    )


def report(run: Run, seconds: float) -> bool:
    ok = all(passed for _what, passed, _detail in run.checks)
    print(
        f"## make e2e-real, fourth part: the fleet on Ansible ({time.strftime('%Y-%m-%d %H:%M')})"
    )
    print()
    print("| step | exit | seconds |\n| --- | --- | --- |")
    for step in run.steps:
        print(f"| {step['step']} | {step.get('exit', '')} | {step['seconds']:.1f} |")
    print()
    print("| check | result |\n| --- | --- |")
    for what, passed, detail in run.checks:
        print(f"| {what} | {'pass' if passed else 'FAIL: ' + detail.replace('|', '/')[:300]} |")
    print(f"\n{'all checks pass' if ok else 'FAILED'}; {seconds:.0f} s in all")
    out = REPO / "bench-out"
    out.mkdir(exist_ok=True)
    value = {"steps": run.steps, "checks": run.checks, "seconds": round(seconds, 1), "ok": ok}
    (out / "e2e-fleet.json").write_text(json.dumps(value, indent=2) + "\n")
    return ok


def main() -> int:
    start = time.perf_counter()
    run = Run()
    ansible = ansible_venv(run)
    version = subprocess.run(
        [ansible / "bin" / "ansible-playbook", "--version"], capture_output=True, text=True
    )
    run.notes.append(version.stdout.splitlines()[0] if version.stdout else "?")
    with tempfile.TemporaryDirectory(prefix="cudafix-fleet-") as tmp:
        work = Path(tmp)
        doctor_repair(run, ansible, work)
        apply_plan(run, ansible, work)
    print(f"<!-- {'; '.join(run.notes)} -->")
    return 0 if report(run, time.perf_counter() - start) else 1


if __name__ == "__main__":
    sys.exit(main())
