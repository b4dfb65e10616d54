"""``make bench-real``'s summary: every goal of the speed issue, measured side by side in one run.

Per run, on fresh hard-linked copies of the real venv (``fixtures.link_copy``, no
``.cudafix/``), in this order: the walk+sniff baseline process and cudafix's first
``doctor`` on the copy (goal 3), which remembers its answer (making ``.cudafix/`` is no
change), then at once a ``remove --dry-run``, remembered beside it; the walk again, then
a ``doctor`` after that dry run and a dry run after that ``doctor`` (goal 1: questions
that alternate, nothing changed); a ``doctor`` with ``answers.json`` deleted (for
information, and goal 6's computing ``doctor``); the floor: a process importing only the
modules that computing ``doctor`` imports (and one importing only those of a ``remove
--yes``, recorded once on a copy of its own), what no reading can take away; ``uv pip
uninstall`` of one distribution, then at once a ``doctor`` and the walk, and ``uv pip
install`` of it again, then at once the dry run and the walk (goal 2: a reading after a
change); ``cudafix run -- python -c pass`` against the bare command, right after a
``doctor`` (goal 4; then again, for information: each is judged against doctor's findings,
as uv's ``.lock``, which taking uv's lock makes in a venv uv never touched, is no change they
depend on; a sixth is the first commit past the five snapshots kept); ``cudafix remove DIST
--yes --no-probe`` against ``uv pip uninstall DIST`` on twin copies in alternating order
(goal 5), and on a third copy, the same ``remove`` right after its ``--dry-run``, the
copy's first command (for information: the user's way; it applies the plan the dry run
showed);
the peak RSS of the ``doctor`` runs (goal 6; ``make bench``'s section 5 measures it
against RECORD size).
Beside them, for an earlier goal: the unpacked wheels in a private ``UV_CACHE_DIR``
(``archive-v0`` entries) after repeated dry runs and repairs of one plan, against plain
``uv pip install --reinstall`` of the same pin, and the second of those dry runs' seconds
(its wheel in uv's cache).
"""

from __future__ import annotations

import os
import shutil
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks import fixtures, sections
from benchmarks.proc import Timed, check, timed, uv_argv
from benchmarks.stats import median, table


@dataclass(frozen=True)
class Wheel:
    """The pin goal 1 installs and repairs, and where uv gets it (a registry: a local
    ``--find-links`` wheel is never re-unpacked, so only an index shows the bloat)."""

    pin: str
    index_url: str


def _archives(cache: Path) -> int:
    root = cache / "archive-v0"
    return sum(1 for _ in root.iterdir()) if root.is_dir() else 0


_RUNS_AFTER = {
    "again": "again (judged against the same findings)",
    "third": "a third time",
    "sixth": "a sixth time (past the five snapshots kept: the oldest goes)",
}
"""The runs of goal 4 after its first, timed for information (``run/<key>``)."""


def _one(m: dict[str, list[float]], key: str, done: Timed) -> None:
    m[key].append(done.seconds)


def installed_version(venv: Path, dist: str) -> str:
    """The installed version of ``dist`` in ``venv`` (from its dist-info directory name)."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    stem = dist.replace("-", "_").lower()
    for info in site.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        if name.lower() == stem:
            return version
    raise SystemExit(f"{dist} is not installed in {venv}: pass --change-dist")


def _floor_modules(env: sections.Env, pristine: Path, a: Path, tx_dist: str) -> dict[str, Path]:
    """The modules a computing ``doctor`` (on ``a``) and a ``remove TX_DIST --yes
    --no-probe`` (on a copy of its own) import, each written to a file under ``env.work``:
    the floor under goals 2, 3 and 5, timed by importing them alone."""
    (a / ".cudafix" / "cache" / "answers.json").unlink()
    out = {"doctor": env.work / "modules-doctor.json", "remove": env.work / "modules-remove.json"}
    sections.inproc("modules", a, str(out["doctor"]), "doctor", "--venv", str(a))
    d = fixtures.link_copy(pristine, env.work / "goal-d")
    remove = ["remove", tx_dist, "--yes", "--no-probe", "--venv", str(d)]
    sections.inproc("modules", d, str(out["remove"]), *remove)
    shutil.rmtree(d, ignore_errors=True)
    return out


def goal_runs(
    env: sections.Env,
    pristine: Path,
    plan_dist: str,
    tx_dist: str,
    change: tuple[str, str] | None = None,
) -> dict[str, list[float]]:
    """Goals 1-6, ``env.runs`` times; seconds (or MiB, ``rss/...``) per measurement key.
    ``change``: the distribution goal 2 uninstalls and installs again with uv, and the index
    it comes back from."""
    m: dict[str, list[float]] = defaultdict(list)
    change_dist = change[0] if change else "mpmath"
    version = installed_version(pristine, change_dist)
    for i in range(env.runs):
        a = fixtures.link_copy(pristine, env.work / "goal-a")
        b = fixtures.link_copy(pristine, env.work / "goal-b")
        sections.settle()
        _one(m, "walk/first", sections.inproc("walk", a)[0])
        doctor: list[str | Path] = ["doctor", "--venv", a]
        first = sections.cli(doctor, ok=(0, 1))  # computes, and remembers, the answer
        _one(m, "doctor/first", first)
        m["rss/doctor-first"].append(first.max_rss_mib)
        dry: list[str | Path] = ["remove", plan_dist, "--dry-run", "--venv", a]
        sections.cli(dry, ok=(0, 3))  # a second question, remembered beside the first
        _one(m, "walk/warm", sections.inproc("walk", a)[0])
        _one(m, "ask/doctor", sections.cli(doctor, ok=(0, 1)))  # after the dry run
        _one(m, "ask/dry-run", sections.cli(dry, ok=(0, 3)))  # after that doctor
        (a / ".cudafix" / "cache" / "answers.json").unlink()
        computed = sections.cli(doctor, ok=(0, 1))
        _one(m, "doctor/recomputed", computed)
        m["rss/doctor-computed"].append(computed.max_rss_mib)
        if i == 0:
            floors = _floor_modules(env, pristine, a, tx_dist)
        for what, listed in floors.items():
            _one(m, f"floor/{what}", sections.inproc("imports", a, str(listed))[0])
        py = a / "bin" / "python"
        uv_env = {**os.environ, "UV_DEFAULT_INDEX": change[1]} if change else None
        check(timed(uv_argv("pip", "uninstall", "--python", py, change_dist)))
        _one(m, "change/removed", sections.cli(doctor, ok=(0, 1)))
        _one(m, "walk/removed", sections.inproc("walk", a)[0])
        pin = f"{change_dist}=={version}"
        check(timed(uv_argv("pip", "install", "--python", py, pin), env=uv_env))
        _one(m, "change/installed", sections.cli(dry, ok=(0, 3)))
        _one(m, "walk/installed", sections.inproc("walk", a)[0])
        sections.settle()
        sections.cli(doctor, ok=(0, 1))  # its findings are what run judges against
        _one(m, "bare/cmd", check(timed([py, "-c", "pass"])))
        run: list[str | Path] = ["run", "--venv", a, "--", py, "-c", "pass"]
        _one(m, "run/cmd", sections.cli(run))  # right after a doctor: its findings are current
        sections.settle()
        _one(m, "run/again", sections.cli(run))
        _one(m, "run/third", sections.cli(run))
        for _ in range(2):
            sections.cli(run)
        _one(m, "run/sixth", sections.cli(run))
        ours: list[str | Path] = ["remove", tx_dist, "--yes", "--no-probe", "--venv", a]
        theirs = uv_argv("pip", "uninstall", "--python", b / "bin" / "python", tx_dist)
        for who in ("cudafix", "uv") if i % 2 == 0 else ("uv", "cudafix"):
            done = sections.cli(ours) if who == "cudafix" else check(timed(theirs))
            _one(m, f"tx/{who}", done)
        c = fixtures.link_copy(pristine, env.work / "goal-c")  # the user's way: look, then act
        sections.settle()  # a copy just made: nothing read from it can be remembered yet
        shown: list[str | Path] = ["remove", tx_dist, "--no-probe", "--venv", c]
        sections.cli([*shown, "--dry-run"])  # the copy's first command: makes .cudafix/
        _one(m, "tx/after-dry-run", sections.cli([*shown, "--yes"]))
        if env.drop:
            cold = fixtures.link_copy(pristine, env.work / "goal-cold")
            sections.settle()
            env.cold(cold)
            _one(m, "walk/cold", sections.inproc("walk", cold)[0])
            env.cold(cold)
            _one(m, "doctor/cold", sections.cli(["doctor", "--venv", cold], ok=(0, 1)))
            shutil.rmtree(cold, ignore_errors=True)
        for copy in (a, b, c):
            shutil.rmtree(copy, ignore_errors=True)
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
        again = uv_argv("pip", "install", "--reinstall", "--python", py, wheel.pin)
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
        "tx/extra-after-dry-run": [
            o - t for o, t in zip(m["tx/after-dry-run"], m["tx/uv"], strict=False)
        ],
        "floor/remove-extra": [f - t for f, t in zip(m["floor/remove"], m["tx/uv"], strict=False)],
    }
    for k in _RUNS_AFTER:
        runs = zip(m[f"run/{k}"], m["bare/cmd"], strict=False)
        extra[f"run/extra-{k}"] = [r - c for r, c in runs]
    m = {**m, **extra}
    if growth:
        added = growth["cudafix"][-1] - growth["cudafix"][0]
        rows.append(
            [
                "-",
                "uv archive-v0 entries: install dry-run x2 + apply, repair dry-run x2 + apply",
                " -> ".join(map(str, growth["cudafix"])),
                "uv pip install --reinstall x3: " + " -> ".join(map(str, growth["uv"])),
                "nothing added after the first fetch",
                "met" if added == 0 else "MISSED",
            ]
        )
    quick = "<= 0.5 s and <= 0.8x walk+sniff"
    row("1", "doctor after a dry run, nothing changed", "ask/doctor", "walk/warm",
        lambda v, r: v <= 0.5 and r <= 0.8, quick)  # fmt: skip
    row("1", "remove --dry-run after a doctor, nothing changed", "ask/dry-run", "walk/warm",
        lambda v, r: v <= 0.5 and r <= 0.8, quick)  # fmt: skip
    row("1", "for information: doctor computing its answer (answers.json deleted)",
        "doctor/recomputed", "walk/warm", None, "-")  # fmt: skip
    row("-", "floor: a process importing what a computing doctor imports, no more",
        "floor/doctor", "walk/warm", None, "-")  # fmt: skip
    row("2", "doctor right after `uv pip uninstall` of one wheel", "change/removed",
        "walk/removed", lambda v, r: r <= 1.0, "<= 1.0x walk+sniff")  # fmt: skip
    row("2", "remove --dry-run right after `uv pip install` of it again", "change/installed",
        "walk/installed", lambda v, r: r <= 1.0, "<= 1.0x walk+sniff")  # fmt: skip
    row("3", "first doctor on a cp -al copy, no .cudafix/", "doctor/first", "walk/first",
        lambda v, r: r <= 2.0, "<= 2x walk+sniff")  # fmt: skip
    row("3", "first doctor, page cache dropped", "doctor/cold", "walk/cold",
        lambda v, r: r <= 2.0, "<= 2x cold walk+sniff")  # fmt: skip
    row("4", "run -- python -c pass, over the bare command", "run/extra", None,
        lambda v, r: v <= 1.0, "<= +1.0 s")  # fmt: skip
    for k, what in _RUNS_AFTER.items():
        row("4", f"for information: {what}", f"run/extra-{k}", None, None, "-")
    row("5", "remove --yes --no-probe, over uv pip uninstall", "tx/extra", None,
        lambda v, r: v <= 0.5, "<= +0.5 s")  # fmt: skip
    row("5", "for information: the same right after its dry run, over uv pip uninstall",
        "tx/extra-after-dry-run", None, None, "-")  # fmt: skip
    row("-", "floor: a process importing what remove --yes imports, over uv pip uninstall",
        "floor/remove-extra", None, None, "-")  # fmt: skip
    if install_seconds is not None:
        rows.append(
            [
                "-",
                "install PIN --dry-run, its wheel in uv's cache (one run)",
                f"{install_seconds:.2f} s",
                "-",
                "<= 2 s",
                "met" if install_seconds <= 2.0 else "MISSED",
            ]
        )
    for key, what in (("rss/doctor-first", "first"), ("rss/doctor-computed", "computing")):
        if m.get(key):
            peak = max(m[key])
            rows.append(["6", f"peak RSS of doctor ({what}), MiB", f"{peak:.0f} MiB", "-",
                         "< 200 MB", "met" if peak * 1.048576 < 200 else "MISSED"])  # fmt: skip
    header = [
        "goal",
        "measure",
        "median (ratio to baseline)",
        "baseline, same runs",
        "target",
        "verdict",
    ]
    return sections.Section(
        "Goals, one run", table(header, rows), {"seconds": m, "uv_cache": growth}
    )
