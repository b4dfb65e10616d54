"""``make bench-real``'s summary: every goal of the speed issue, measured side by side in one run.

Per run, on fresh hard-linked copies of the real venv (``fixtures.link_copy``, no
``.cudafix/``), in this order: the walk+sniff baseline process, cudafix's first ``doctor``
on the copy (goal 3), one more ``doctor`` past the racy window (it computes and remembers
its answer), then a warm ``doctor`` and a warm ``remove --dry-run`` (goal 2, the baseline
again right before; both answered from ``.cudafix/cache/answers.json``), a ``doctor`` with
that file deleted (the warm path that computes its answer, for information), ``cudafix run
-- python -c pass`` against the bare command (goal 4; run right after that doctor, so judged
against its remembered findings; then twice more, for information: the first run added
uv's ``.lock`` to the venv's root, a change doctor reads, so the second, past the racy
window, reads first and keeps its findings, and the third is judged against those; after
two more untimed, a sixth: the first commit past the five snapshots kept),
and ``cudafix remove DIST --yes --no-probe`` against ``uv pip uninstall DIST`` on twin
copies in alternating order (goal 5). Goal 1 counts the unpacked wheels in a private
``UV_CACHE_DIR`` (``archive-v0`` entries) after repeated dry runs and repairs of one plan,
against plain ``uv pip install --reinstall`` of the same pin; the second of those dry runs
(its wheel in uv's cache) is goal 5's ``install --dry-run``. Goal 6 is ``make bench``'s
section 5 (synthetic inputs at 1x/2x/4x), not measured here.
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import uv

from benchmarks import fixtures, sections
from benchmarks.proc import Timed, check, timed
from benchmarks.stats import median, table


@dataclass(frozen=True)
class Wheel:
    """The pin goal 1 installs and repairs, and where uv gets it (a registry: a local
    ``--find-links`` wheel is never re-unpacked, so only an index shows the bloat)."""

    pin: str
    index_url: str


def _uv_argv(*args: str | Path) -> list[str | Path]:
    return [uv.find_uv_bin(), *args]


def _archives(cache: Path) -> int:
    root = cache / "archive-v0"
    return sum(1 for _ in root.iterdir()) if root.is_dir() else 0


_RUNS_AFTER = {
    "again": "again (the first added uv's .lock to the root: reads first)",
    "third": "a third time (judged against the findings the second kept)",
    "sixth": "a sixth time (past the five snapshots kept: the oldest goes)",
}
"""The runs of goal 4 after its first, timed for information (``run/<key>``)."""


def _one(m: dict[str, list[float]], key: str, done: Timed) -> None:
    m[key].append(done.seconds)


def goal_runs(
    env: sections.Env, pristine: Path, plan_dist: str, tx_dist: str
) -> dict[str, list[float]]:
    """Goals 2-5, ``env.runs`` times; seconds per measurement key."""
    m: dict[str, list[float]] = defaultdict(list)
    for i in range(env.runs):
        a = fixtures.link_copy(pristine, env.work / "goal-a")
        b = fixtures.link_copy(pristine, env.work / "goal-b")
        sections.settle()
        _one(m, "walk/first", sections.inproc("walk", a)[0])
        doctor: list[str | Path] = ["doctor", "--venv", a]
        _one(m, "doctor/first", sections.cli(doctor, ok=(0, 1)))
        sections.settle()  # the first run's own .cudafix/ made the root racy
        sections.cli(doctor, ok=(0, 1))  # computes, and remembers, the answer
        _one(m, "walk/warm", sections.inproc("walk", a)[0])
        _one(m, "doctor/warm", sections.cli(doctor, ok=(0, 1)))
        dry: list[str | Path] = ["remove", plan_dist, "--dry-run", "--venv", a]
        sections.cli(dry, ok=(0, 3))
        _one(m, "dry-run/warm", sections.cli(dry, ok=(0, 3)))
        (a / ".cudafix" / "cache" / "answers.json").unlink()
        _one(m, "doctor/recomputed", sections.cli(doctor, ok=(0, 1)))
        py = a / "bin" / "python"
        _one(m, "bare/cmd", check(timed([py, "-c", "pass"])))
        run: list[str | Path] = ["run", "--venv", a, "--", py, "-c", "pass"]
        _one(m, "run/cmd", sections.cli(run))  # right after a doctor: its findings are current
        sections.settle()  # the first run made uv's .lock in the root: no recent change now
        _one(m, "run/again", sections.cli(run))  # reads first (the root changed), keeps findings
        _one(m, "run/third", sections.cli(run))  # judged against the findings the second kept
        for _ in range(2):
            sections.cli(run)  # five snapshots kept: the next commit sets the oldest aside
        _one(m, "run/sixth", sections.cli(run))
        ours: list[str | Path] = ["remove", tx_dist, "--yes", "--no-probe", "--venv", a]
        theirs = _uv_argv("pip", "uninstall", "--python", b / "bin" / "python", tx_dist)
        for who in ("cudafix", "uv") if i % 2 == 0 else ("uv", "cudafix"):
            done = sections.cli(ours) if who == "cudafix" else check(timed(theirs))
            _one(m, f"tx/{who}", done)
        if env.drop:
            cold = fixtures.link_copy(pristine, env.work / "goal-cold")
            sections.settle()
            env.cold(cold)
            _one(m, "walk/cold", sections.inproc("walk", cold)[0])
            env.cold(cold)
            _one(m, "doctor/cold", sections.cli(["doctor", "--venv", cold], ok=(0, 1)))
            shutil.rmtree(cold, ignore_errors=True)
        shutil.rmtree(a, ignore_errors=True)
        shutil.rmtree(b, ignore_errors=True)
    return m


def cache_growth(
    env: sections.Env, pristine: Path, wheel: Wheel
) -> tuple[dict[str, list[int]], float]:
    """Goal 1: ``archive-v0`` entries after each step, cudafix's and plain uv's; and goal
    5's install half: the seconds of the second ``install --dry-run`` (its wheel in uv's
    cache since the first)."""
    name = wheel.pin.split("==")[0]
    out: dict[str, list[int]] = {"cudafix": [], "uv": []}
    venv = fixtures.link_copy(pristine, env.work / "goal-cache")
    cache = env.work / "uv-cache-cudafix"
    shutil.rmtree(cache, ignore_errors=True)
    index = {"UV_DEFAULT_INDEX": wheel.index_url}
    environ = {**os.environ, **index, "UV_CACHE_DIR": str(cache)}
    install = [*sections.cudafix_argv(), "install", wheel.pin, "--venv", str(venv)]
    steps = [[*install, "--dry-run"], [*install, "--dry-run"], [*install, "--yes", "--no-probe"]]
    repair = [*sections.cudafix_argv(), "repair", "--venv", str(venv)]
    seconds = []
    for argv in steps:
        seconds.append(check(timed(argv, env=environ), (0,)).seconds)
        out["cudafix"].append(_archives(cache))
    for argv in ([*repair, "--dry-run"], [*repair, "--dry-run"], [*repair, "--yes", "--no-probe"]):
        _break_one_file(venv, name)
        check(timed(argv, env=environ), (0,))
        out["cudafix"].append(_archives(cache))
    plain = env.work / "uv-cache-plain"
    shutil.rmtree(plain, ignore_errors=True)
    py = venv / "bin" / "python"
    for _ in range(3):
        again = _uv_argv("pip", "install", "--reinstall", "--python", py, wheel.pin)
        check(timed(again, env={**os.environ, **index, "UV_CACHE_DIR": str(plain)}))
        out["uv"].append(_archives(plain))
    shutil.rmtree(venv, ignore_errors=True)
    return out, seconds[1]


def _break_one_file(venv: Path, name: str) -> None:
    """Delete one file the distribution's RECORD lists (what ``repair`` then restores)."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    stem = name.replace("-", "_")
    record = next(site.glob(f"{stem}-*.dist-info/RECORD"))
    for row in record.read_text().splitlines():
        path = site / row.split(",")[0]
        if row.split(",")[1] and path.is_file() and not path.name.endswith(".pyc"):
            path.unlink()
            return


def summary(
    m: dict[str, list[float]],
    growth: dict[str, list[int]] | None,
    install_seconds: float | None = None,
) -> sections.Section:
    """One row per goal: measured median, the baseline of the same runs, target, verdict."""
    rows: list[Sequence[object]] = []

    def row(
        goal: str,
        what: str,
        key: str,
        base: str | None,
        ok: Callable[[float, float], bool] | None,
        target: str,
    ) -> None:
        if not m.get(key):
            return
        value = median(m[key])
        ref = median(m[base]) if base else float("nan")
        ratio = median([x / y for x, y in zip(m[key], m[base], strict=False)]) if base else None
        shown = f"{value:.2f} s" + (f" ({ratio:.2f}x)" if ratio is not None else "")
        rows.append(
            [
                goal,
                what,
                shown,
                f"{ref:.2f} s" if base else "-",
                target,
                "-" if ok is None else "met" if ok(value, ratio or 0.0) else "MISSED",
            ]
        )

    extra = {
        "run/extra": [r - c for r, c in zip(m["run/cmd"], m["bare/cmd"], strict=False)],
        "tx/extra": [o - t for o, t in zip(m["tx/cudafix"], m["tx/uv"], strict=False)],
    }
    for k in _RUNS_AFTER:
        runs = zip(m[f"run/{k}"], m["bare/cmd"], strict=False)
        extra[f"run/extra-{k}"] = [r - c for r, c in runs]
    m = {**m, **extra}
    if growth:
        added = growth["cudafix"][-1] - growth["cudafix"][0]
        rows.append(
            [
                "1",
                "uv archive-v0 entries: install dry-run x2 + apply, repair dry-run x2 + apply",
                " -> ".join(map(str, growth["cudafix"])),
                "uv pip install --reinstall x3: " + " -> ".join(map(str, growth["uv"])),
                "nothing added after the first fetch",
                "met" if added == 0 else "MISSED",
            ]
        )
    row(
        "2",
        "warm doctor (CLI wall)",
        "doctor/warm",
        "walk/warm",
        lambda v, r: v <= 0.5 and r <= 0.8,
        "<= 0.5 s and <= 0.8x walk+sniff",
    )
    row(
        "2",
        "warm remove --dry-run (CLI wall)",
        "dry-run/warm",
        "walk/warm",
        lambda v, r: v <= 0.5 and r <= 0.8,
        "<= 0.5 s and <= 0.8x walk+sniff",
    )
    row(
        "2",
        "for information: warm doctor computing its answer (answers.json deleted)",
        "doctor/recomputed",
        "walk/warm",
        None,
        "-",
    )
    row(
        "3",
        "first doctor on a cp -al copy, no .cudafix/",
        "doctor/first",
        "walk/first",
        lambda v, r: r <= 2.0,
        "<= 2x walk+sniff",
    )
    row(
        "3",
        "first doctor, page cache dropped",
        "doctor/cold",
        "walk/cold",
        lambda v, r: r <= 1.5,
        "<= 1.5x cold walk+sniff",
    )
    row(
        "4",
        "run -- python -c pass, over the bare command",
        "run/extra",
        None,
        lambda v, r: v <= 1.5,
        "<= 1.5 s",
    )
    for k, what in _RUNS_AFTER.items():
        row("4", f"for information: {what}", f"run/extra-{k}", None, None, "-")
    row(
        "5",
        "remove --yes --no-probe, over uv pip uninstall",
        "tx/extra",
        None,
        lambda v, r: v <= 0.5,
        "<= 0.5 s",
    )
    if install_seconds is not None:
        rows.append(
            [
                "5",
                "install PIN --dry-run, its wheel in uv's cache (one run)",
                f"{install_seconds:.2f} s",
                "-",
                "<= 2 s",
                "met" if install_seconds <= 2.0 else "MISSED",
            ]
        )
    header = [
        "goal",
        "measure",
        "median (ratio to baseline)",
        "baseline, same runs",
        "target",
        "verdict",
    ]
    return sections.Section(
        "Goals (issue 24), one run", table(header, rows), {"seconds": m, "uv_cache": growth}
    )
