"""``make e2e-real``, fourth part (continued): the pdsh and Slurm recipes of ``docs/fleet.md``.

The recipes are read from the doc and run as printed; only the host list (``gpu[001-064]``
becomes ``gpu[001-003]``, ``--nodes=2`` on ``sbatch``'s command line) and the plan's path
(``/shared/plans/plan.json`` is ``WORK/plan.json``: the one filesystem is the shared one)
change. The nodes are this machine: a command "on" ``gpu001`` runs in its own UTS and mount
namespaces, where ``hostname`` says ``gpu001`` and ``/opt/envs/train`` is a bind mount of
``WORK/gpu001/venv`` (a copy of one ``incident`` venv; the stale node has
``nvidia-nvtx-cu13`` uninstalled by hand, as in the Ansible part). Needs root (``unshare``,
``mount``, the Slurm daemons); Debian's ``pdsh``, ``slurmctld``, ``slurmd`` and
``slurm-client`` are installed with ``apt-get`` when missing.

- pdsh: ``-R exec`` runs each node's command through a shim that enters the node and hands
  the command to ``sh -c``, as ``-R ssh`` hands it to the login shell. doctor ``| dshbak -c``
  folds the two identical nodes; the plan commits on two nodes and is refused as stale (exit
  3) on the third, which is left untouched; ``results.jsonl`` is one JSON line per node and
  the doc's ``jq`` lines read it; doctor again: the committed nodes are healthy.
- Slurm: ``slurmctld`` and one ``slurmd`` per node (``slurmd -N``) on local ports, from a
  minimal ``slurm.conf`` (``auth/none``, ``proctrack/linuxproc``) in a scratch directory. The
  doc's batch script passes ``bash -n`` and ``sbatch --test-only``; its dry run (``--dry-run
  --json`` for ``--yes --json``) changes nothing; the job itself commits on one node and is
  refused as stale on the other; the doc's ``jq`` lines read ``results.jsonl``.

``--only pdsh`` / ``--only slurm`` runs one part. Prints Markdown; writes
``bench-out/e2e-fleet-hpc.json``. Exit 0 only when every check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.e2e_fleet import doctor_exit, planned_fleet
from benchmarks.e2e_real import Run, user_env
from benchmarks.proc import Timed
from benchmarks.sections import cudafix_argv
from scenarios.fingerprint import diff_fingerprints, fingerprint

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "fleet.md"
LOGS = REPO / "bench-out" / "e2e-fleet-hpc"
DOC_HOSTS = "gpu[001-064]"
DOC_PLAN = "/shared/plans/plan.json"
NODE_VENV = Path("/opt/envs/train")
PARTS = ("pdsh", "slurm")
DEBIAN = {"pdsh": "pdsh", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client"}


def fenced(markdown: str, heading: str) -> list[str]:
    """The fenced code blocks of the section whose heading line starts with ``heading``, up to
    the next heading of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    blocks: list[str] = []
    current: list[str] | None = None
    for line in lines[start + 1 :]:
        if current is None and re.match(rf"#{{1,{level}}} ", line):
            break
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def swap(text: str, pairs: Mapping[str, str]) -> str:
    """``text`` with each key replaced by its value; a key ``text`` lacks is an error (the
    recipe changed under the harness)."""
    for old, new in pairs.items():
        if old not in text:
            raise ValueError(f"{old!r} is not in the recipe:\n{text}")
        text = text.replace(old, new)
    return text


def dshbak_groups(text: str) -> dict[str, str]:
    """``dshbak -c`` output as ``{hosts: their common output}``."""
    rule = re.compile(r"^-{8,}$")
    lines = text.splitlines()
    groups: dict[str, str] = {}
    i = 0
    while i + 2 < len(lines):
        if rule.match(lines[i]) and rule.match(lines[i + 2]):
            j = i + 3
            while j < len(lines) and not (j + 2 < len(lines) and rule.match(lines[j])):
                j += 1
            groups[lines[i + 1]] = "\n".join(lines[i + 3 : j])
            i = j
        else:
            i += 1
    return groups


def json_lines(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The lines of ``path`` that parse as JSON objects, and those that do not."""
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            value = json.loads(line)
        except ValueError:
            bad.append(line)
            continue
        if isinstance(value, dict):
            rows.append(value)
        else:
            bad.append(line)
    return rows, bad


def outcome(rows: list[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """``{host: (exit, state or verdict)}`` of result lines."""
    return {
        r.get("host", "?"): (
            r.get("exit"),
            (r.get("result") or {}).get("state") or (r.get("result") or {}).get("verdict"),
        )
        for r in rows
    }


def debian_tools(run: Run, commands: list[str]) -> None:
    """Install the Debian packages that ship ``commands`` where one is missing."""
    missing = sorted({DEBIAN[c] for c in commands if shutil.which(c) is None})
    if not missing:
        return
    apt_env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run.step("apt-get update", ["apt-get", "update", "-qq"], env=apt_env)
    done = run.step(
        f"apt-get install {' '.join(missing)}",
        ["apt-get", "install", "-y", "--no-install-recommends", *missing],
        env=apt_env,
    )
    if done.returncode != 0:
        raise SystemExit(f"installing {missing} failed:\n{done.stderr[-2000:]}")


def shims(work: Path) -> Path:
    """``WORK/bin``: ``cudafix`` as a user runs it, and ``node HOST CMD...``, which runs CMD
    "on" HOST (its hostname; ``WORK/HOST/venv`` at /opt/envs/train)."""
    bin_dir = work / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    argv = " ".join(f"'{a}'" for a in cudafix_argv())
    write_script(bin_dir / "cudafix", f'#!/bin/sh\nexec {argv} "$@"\n')
    write_script(
        bin_dir / "node",
        "#!/bin/sh\n"
        "host=$1; shift\nexec unshare --mount --uts --propagation private -- sh -c '\n"
        '  hostname "$1" && mount --bind "$2" "$3" && shift 3 && exec "$@"\n'
        f'\' node "$host" "{work}/$host/venv" {NODE_VENV} "$@"\n',
    )
    return bin_dir


def write_script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@contextmanager
def mountpoint() -> Iterator[None]:
    """``/opt/envs/train`` exists for the bind mounts; what this made is removed after."""
    made = [p for p in (*reversed(NODE_VENV.parents), NODE_VENV) if not p.exists()]
    NODE_VENV.mkdir(parents=True, exist_ok=True)
    try:
        yield
    finally:
        for path in reversed(made):
            path.rmdir()


def keep(label: str, text: str) -> None:
    """``text`` in ``bench-out/e2e-fleet-hpc/NN-LABEL.log``."""
    LOGS.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    (LOGS / f"{len(list(LOGS.iterdir())) + 1:02d}-{name}.log").write_text(text)


def shell(run: Run, label: str, text: str, cwd: Path, env: Mapping[str, str]) -> Timed:
    """``text`` run by bash in ``cwd``."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = run.step(label, ["bash", "-c", text], env=env, cwd=cwd)
    keep(label, f"$ {text}\n{done.stdout}{done.stderr}")
    return done


def unchanged(before: dict[str, Any], nodes: Mapping[str, Path]) -> list[str]:
    return [d for n, fp in before.items() for d in diff_fingerprints(fp, fingerprint(nodes[n]))]


def aggregate(run: Run, where: Path, env: Mapping[str, str], hosts: Mapping[str, str]) -> None:
    """The doc's ``jq`` lines on ``where/results.jsonl``: a table, the re-plan list."""
    jq_block = next(b for b in fenced(DOC.read_text(), "## Slurm") if b.startswith("jq "))
    done = shell(run, "the doc's jq lines", jq_block, where, env)
    table = [line.split() for line in done.stdout.splitlines()]
    replan = (
        (where / "needs-replan.txt").read_text() if (where / "needs-replan.txt").exists() else ""
    )
    run.check(
        "the doc's jq lines: a table by host and state, the stale host on the re-plan list",
        done.returncode == 0
        and sorted(table) == sorted([h, "0" if s != "stale" else "3", s] for h, s in hosts.items())
        and replan.split() == [h for h, s in hosts.items() if s == "stale"],
        done.stdout + done.stderr + replan,
    )


def pdsh_part(run: Run, work: Path) -> None:
    """doctor ``| dshbak -c``, the plan on three nodes (one stale), ``jq``, doctor again."""
    debian_tools(run, ["pdsh"])
    nodes = planned_fleet(run, work, ["gpu001", "gpu002", "gpu003"], stale="gpu002")
    if nodes is None:
        return
    bin_dir = shims(work)
    pdsh = shutil.which("pdsh")
    write_script(
        bin_dir / "pdsh",
        "#!/bin/bash\n# pdsh -R exec, each node's command through sh -c as -R ssh would\n"
        'cmd=${@: -1}; set -- "${@:1:$#-1}"\n'
        f'exec {pdsh} -R exec "$@" {bin_dir}/node %h sh -c "${{cmd//%/%%}}"\n',
    )
    env = {**user_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    pairs = {DOC_HOSTS: "gpu[001-003]"}
    doctor_block, apply_block = fenced(DOC.read_text(), "## pdsh")
    before = {n: fingerprint(v) for n, v in nodes.items()}
    first = shell(run, "pdsh: cudafix doctor, dshbak -c", swap(doctor_block, pairs), work, env)
    groups = dshbak_groups(first.stdout)
    run.check(
        "dshbak -c: gpu001 and gpu003 folded into one block, gpu002 apart; each has problems",
        sorted(groups) == ["gpu002", "gpu[001,003]"]
        and all("problem(s) found" in body for body in groups.values())
        and groups["gpu002"] != groups["gpu[001,003]"],
        first.stdout[-800:] + first.stderr[-400:],
    )
    run.check(
        "doctor's answers name the node's own path, /opt/envs/train",
        f"--venv {NODE_VENV}" in first.stdout,
    )
    run.check("doctor changed nothing", not unchanged(before, nodes))
    pairs[DOC_PLAN] = str(work / "plan.json")
    done = shell(
        run, "pdsh: cudafix apply plan.json --yes --json", swap(apply_block, pairs), work, env
    )
    rows, bad = json_lines(work / "results.jsonl")
    states = outcome(rows)
    run.check(
        "results.jsonl: one JSON line per node",
        not bad and sorted(states) == sorted(nodes),
        f"exit {done.returncode}; {bad[:2]}; {done.stderr[-400:]}",
    )
    run.check(
        "gpu001, gpu003 committed (exit 0); gpu002 stale (exit 3)",
        states == {"gpu001": (0, "committed"), "gpu002": (3, "stale"), "gpu003": (0, "committed")},
        json.dumps(states),
    )
    run.check("gpu002: untouched", not unchanged({"gpu002": before["gpu002"]}, nodes))
    run.check(
        "gpu001, gpu003: doctor exits 0 after the plan",
        [doctor_exit(nodes[n]) for n in ("gpu001", "gpu003")] == [0, 0],
    )
    aggregate(run, work, env, {"gpu001": "committed", "gpu002": "stale", "gpu003": "committed"})
    pairs.pop(DOC_PLAN)
    after = shell(
        run, "pdsh: cudafix doctor, dshbak -c, again", swap(doctor_block, pairs), work, env
    )
    groups = dshbak_groups(after.stdout)
    run.check(
        "dshbak -c again: gpu[001,003] healthy, gpu002 as before",
        groups.get("gpu[001,003]", "").startswith("Healthy")
        and "problem(s) found" in groups.get("gpu002", ""),
        after.stdout[-600:],
    )


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def slurm_conf(state: Path, nodes: list[str], ports: list[int]) -> str:
    """One controller and ``nodes`` on this machine, every daemon as root, no munge."""
    lines = [
        "ClusterName=cudafix",
        f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmdPort={ports[1]}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/none",
        "CredType=cred/none",
        f"StateSaveLocation={state}/ctld",
        f"SlurmdSpoolDir={state}/spool-%n",
        f"SlurmctldPidFile={state}/slurmctld.pid",
        f"SlurmdPidFile={state}/slurmd-%n.pid",
        f"SlurmctldLogFile={state}/slurmctld.log",
        f"SlurmdLogFile={state}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SchedulerType=sched/builtin",
        "SelectType=select/linear",
        "ReturnToService=2",
    ]
    lines += [
        f"NodeName={n} NodeAddr=127.0.0.1 Port={port} CPUs=1 State=UNKNOWN"
        for n, port in zip(nodes, ports[2:], strict=True)
    ]
    lines.append(
        f"PartitionName=fleet Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP"
    )
    return "\n".join(lines) + "\n"


def daemon(argv: list[str | Path], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@contextmanager
def slurm_cluster(
    run: Run, work: Path, bin_dir: Path, nodes: list[str]
) -> Iterator[dict[str, str]]:
    """slurmctld and one slurmd per node, each "on" its node; yields the environment that
    reaches them (``SLURM_CONF``); stops them after."""
    state = work / "slurm-state"
    (state / "ctld").mkdir(parents=True)
    conf = work / "slurm.conf"
    conf.write_text(slurm_conf(state, nodes, free_ports(2 + len(nodes))))
    env = {**user_env(), "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_CONF": str(conf)}
    daemons = [daemon(["slurmctld", "-D", "-i", "-f", conf], env)]
    start = time.perf_counter()
    try:
        for n in nodes:
            argv: list[str | Path] = [bin_dir / "node", n, "slurmd", "-D", "-f", conf, "-N", n]
            daemons.append(daemon(argv, env))
        deadline = time.monotonic() + 60
        idle = ""
        while time.monotonic() < deadline:
            sinfo = subprocess.run(
                ["sinfo", "-h", "-N", "-o", "%N %t"], env=env, capture_output=True, text=True
            )
            idle = sinfo.stdout
            if sorted(idle.split()) == sorted([*nodes, *["idle"] * len(nodes)]):
                break
            time.sleep(0.5)
        run.steps.append(
            {"step": "slurmctld, slurmd per node: idle", "seconds": time.perf_counter() - start}
        )
        if not run.check(
            "slurm: every node idle within 60 s", "idle" in idle and "down" not in idle, idle
        ):
            raise SystemExit(f"slurm did not come up; logs in {state}")
        yield env
    finally:
        for proc in reversed(daemons):
            proc.terminate()
        for proc in daemons:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def sbatch(run: Run, label: str, script: Path, where: Path, env: Mapping[str, str]) -> Timed:
    where.mkdir(parents=True, exist_ok=True)
    argv: list[str | Path] = ["timeout", "300", "sbatch", "--wait", "--nodes=2", script]
    done = run.step(label, argv, env=env, cwd=where)
    files = [script, *sorted(where.iterdir())]
    keep(label, "".join(f"==> {f.name} <==\n{f.read_text()}\n" for f in files))
    return done


def slurm_part(run: Run, work: Path) -> None:
    """The doc's batch script: checked, dry run (nothing changes), run (one stale node)."""
    debian_tools(run, ["slurmctld", "slurmd", "sbatch"])
    names = ["gpu001", "gpu002"]
    nodes = planned_fleet(run, work, names, stale="gpu002")
    if nodes is None:
        return
    bin_dir = shims(work)
    script = swap(fenced(DOC.read_text(), "## Slurm")[0], {DOC_PLAN: str(work / "plan.json")})
    apply_sh, dry_sh = work / "apply.sh", work / "dry-run.sh"
    apply_sh.write_text(script)
    dry_sh.write_text(swap(script, {"--yes --json": "--dry-run --json"}))
    syntax = run.step("bash -n apply.sh", ["bash", "-n", apply_sh])
    run.check("the doc's batch script: bash -n", syntax.returncode == 0, syntax.stderr)
    with slurm_cluster(run, work, bin_dir, names) as env:
        test = run.step(
            "sbatch --test-only --nodes=2 apply.sh",
            ["sbatch", "--test-only", "--nodes=2", apply_sh],
            env=env,
            cwd=work,
        )
        run.check(
            "sbatch --test-only accepts it (its #SBATCH lines parse)",
            test.returncode == 0,
            test.stderr,
        )
        before = {n: fingerprint(v) for n, v in nodes.items()}
        dry = sbatch(run, "sbatch --wait dry-run.sh (--dry-run --json)", dry_sh, work / "dry", env)
        rows, bad = json_lines(work / "dry" / "results.jsonl")
        run.check(
            "dry run: one JSON line per node; gpu001 pass (exit 0), gpu002 stale (exit 3)",
            not bad and outcome(rows) == {"gpu001": (0, "pass"), "gpu002": (3, "stale")},
            f"exit {dry.returncode}; {json.dumps(outcome(rows))}; {bad[:1]}",
        )
        run.check("dry run: nothing changed on either node", not unchanged(before, nodes))
        done = sbatch(run, "sbatch --wait apply.sh", apply_sh, work / "apply", env)
        rows, bad = json_lines(work / "apply" / "results.jsonl")
        run.check(
            "job: one JSON line per node; gpu001 committed (exit 0), gpu002 stale (exit 3)",
            not bad and outcome(rows) == {"gpu001": (0, "committed"), "gpu002": (3, "stale")},
            f"exit {done.returncode}; {json.dumps(outcome(rows))}; {bad[:1]}",
        )
        logs = list((work / "apply").glob("cudafix-*.out"))
        run.check(
            "cudafix-<jobid>.out holds the stale node's error (stderr), not its JSON",
            len(logs) == 1 and "error: the plan does not fit" in logs[0].read_text(),
        )
        run.check("gpu002: untouched", not unchanged({"gpu002": before["gpu002"]}, nodes))
        run.check("gpu001: doctor exits 0 after the job", doctor_exit(nodes["gpu001"]) == 0)
        aggregate(run, work / "apply", env, {"gpu001": "committed", "gpu002": "stale"})


def report(runs: dict[str, Run], notes: list[str], seconds: float) -> bool:
    """Markdown, a table of steps and one of checks per part; ``bench-out/e2e-fleet-hpc.json``."""
    checks = [c for run in runs.values() for c in run.checks]
    ok = all(passed for _what, passed, _detail in checks)
    print(
        f"## make e2e-real, fourth part: the fleet on {' and '.join(runs)} "
        f"({time.strftime('%Y-%m-%d %H:%M')})"
    )
    print(f"\n<!-- {'; '.join(notes)} -->")
    for part, run in runs.items():
        print(f"\n### {part}\n\n| step | exit | seconds |\n| --- | --- | --- |")
        for step in run.steps:
            print(f"| {step['step']} | {step.get('exit', '')} | {step['seconds']:.1f} |")
        print("\n| check | result |\n| --- | --- |")
        for what, passed, detail in run.checks:
            result = "pass" if passed else "FAIL: " + detail.replace("|", "/")[:300]
            print(f"| {what} | {result} |")
    verdict = "all checks pass" if ok else "FAILED"
    print(f"\n{verdict}; {len(checks)} checks; {seconds:.0f} s in all")
    out = REPO / "bench-out"
    out.mkdir(exist_ok=True)
    value = {
        "parts": {part: {"steps": r.steps, "checks": r.checks} for part, r in runs.items()},
        "notes": notes,
        "seconds": round(seconds, 1),
        "ok": ok,
    }
    (out / "e2e-fleet-hpc.json").write_text(json.dumps(value, indent=2) + "\n")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.e2e_fleet_hpc")
    parser.add_argument("--only", choices=PARTS, action="append", help="run only this part")
    args = parser.parse_args(argv)
    parts: list[str] = args.only or list(PARTS)
    if os.geteuid() != 0:
        raise SystemExit("the pdsh and Slurm parts need root (unshare, mount, the Slurm daemons)")
    start = time.perf_counter()
    shutil.rmtree(LOGS, ignore_errors=True)
    runs = {part: Run() for part in PARTS if part in parts}
    with tempfile.TemporaryDirectory(prefix="cudafix-fleet-hpc-") as tmp, mountpoint():
        work = Path(tmp)
        if "pdsh" in runs:
            pdsh_part(runs["pdsh"], work / "pdsh")
        if "slurm" in runs:
            slurm_part(runs["slurm"], work / "slurm")
    notes = []
    for package in ("pdsh", "slurm-client"):
        version = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Package} ${Version}", package],
            capture_output=True,
            text=True,
        )
        if version.returncode == 0:
            notes.append(version.stdout)
    return 0 if report(runs, notes, time.perf_counter() - start) else 1


if __name__ == "__main__":
    sys.exit(main())
