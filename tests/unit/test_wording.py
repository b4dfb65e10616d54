"""The words for reinstall reasons and alternatives: the one place their sentences are pinned.

Everything else compares the typed records; these check that each kind reads as it always has
(the CLI's text output is a contract), paths shown site-relative.
"""

from __future__ import annotations

from pathlib import Path

from cudafix.cli.wording import alternative_text, reinstall_text, warning_text
from cudafix.model import plan as P
from cudafix.model import reasons as R
from cudafix.model.plan import Target
from cudafix.plan.verdict import warnings

SITE = "lib/python3.12/site-packages"
SITES = [SITE]
INIT, LIB = f"{SITE}/nvidia/__init__.py", f"{SITE}/nvidia/cudnn/lib/libcudnn.so.9"


def test_each_reinstall_reason_reads_as_before() -> None:
    cu12 = "nvidia-cudnn-cu12"
    worded = [
        reinstall_text(why, SITES)
        for why in (
            R.MissingFiles(subject=cu12, count=3),
            R.ForeignOwnFiles(subject=cu12, count=1),
            R.StaleScripts(subject=cu12, count=2),
            R.CoOwnsDeleted(subject=cu12, paths=[INIT, LIB]),
            R.CoOwnsDeleted(subject=cu12, paths=[INIT]),
            R.HoldsForeign(subject=cu12, paths=[LIB], holder="nvidia-cudnn-cu13"),
            R.ScriptStep(subject=cu12, step=2),
        )
    ]
    assert worded == [
        "3 file(s) from its RECORD are missing",
        "1 of its own file(s) hold another build's bytes",
        "2 of its scripts name an interpreter that is gone",
        "co-owns nvidia/cudnn/lib/libcudnn.so.9 and 1 more, which the removal deletes",
        "co-owns nvidia/__init__.py, which the removal deletes",
        "nvidia/cudnn/lib/libcudnn.so.9 holds nvidia-cudnn-cu13's bytes, not its own",
        "step 2 of the script reinstalls it",
    ]


def test_each_alternative_says_what_it_leaves_behind() -> None:
    pins = ["a==1", "b==2"]
    cu12 = "nvidia-cudnn-cu12"
    keeps = R.RemoveKeepingShared(paths=[INIT, LIB, f"{LIB}.1"], foreign=[LIB], holders=[cu12])
    assert [
        alternative_text(R.RemoveThenReinstall(pins=pins), SITES),
        alternative_text(R.RemoveKeepingShared(paths=[INIT, LIB]), SITES),
        alternative_text(keeps, SITES),
        alternative_text(keeps.model_copy(update={"foreign": [LIB, INIT]}), SITES),
        alternative_text(R.InstallToday(pins=pins), SITES),
    ] == [
        "remove, then reinstall a==1, b==2 so its own files come back; leaves none of the "
        "removed files",
        "remove, keeping 2 shared path(s) that remaining distributions claim; leaves each with "
        "its remaining owner's bytes",
        "remove, keeping 3 shared path(s) that remaining distributions claim; leaves "
        "nvidia-cudnn-cu12's bytes in 1 of them (nvidia/cudnn/lib/libcudnn.so.9)",
        "remove, keeping 3 shared path(s) that remaining distributions claim; leaves "
        "nvidia-cudnn-cu12's bytes in 2 of them (nvidia/cudnn/lib/libcudnn.so.9, ...)",
        "install a==1, b==2, the build the consumers load today",
    ]


def test_kept_paths_are_folded_per_holder_and_spelt_site_relative() -> None:
    target = Target(prefix="/v", python=None, site_packages=SITES)
    cu12, cu13 = "nvidia-cudnn-cu12", "nvidia-cudnn-cu13"
    libs = [f"{SITE}/nvidia/cudnn/lib/libcudnn_{n}.so.9" for n in range(6)]
    one = R.KeptForeign(subject=cu12, paths=[LIB], owners=[cu13])
    many = R.KeptForeign(subject=cu12, paths=libs, owners=[cu13])
    assert warning_text(one, target) == (
        f"kept nvidia/cudnn/lib/libcudnn.so.9 holds {cu12}'s bytes, not {cu13}'s; "
        "add --repair to reinstall its own"
    )
    assert warning_text(many, target) == (
        f"kept 6 paths hold {cu12}'s bytes, not {cu13}'s: nvidia/cudnn/lib/libcudnn_0.so.9, "
        "nvidia/cudnn/lib/libcudnn_1.so.9, nvidia/cudnn/lib/libcudnn_2.so.9, "
        "nvidia/cudnn/lib/libcudnn_3.so.9 and 2 more; add --repair to reinstall their own"
    )


def test_a_kept_path_whose_bytes_a_remaining_owner_ships_too_is_no_warning() -> None:
    """Identical bytes in both wheels: the holder is whichever RECORD came first, and the
    remaining owner's RECORD matches as well; only paths no remaining owner matches warn."""
    cu12, cu13 = "nvidia-cudnn-cu12", "nvidia-cudnn-cu13"

    def shared(path: str, matching: list[str]) -> P.SharedPath:
        return P.SharedPath(
            path=path,
            owners=[cu12, cu13],
            holder=matching[0],
            remaining_owners=[cu13],
            fate="kept",
            matching=matching,
        )

    said = warnings(
        [shared(INIT, [cu12, cu13]), shared(LIB, [cu12]), shared(f"{LIB}.1", [cu12])],
        P.Options(keep_shared=True),
        [],
        [],
    )
    assert said == [R.KeptForeign(subject=cu12, paths=[LIB, f"{LIB}.1"], owners=[cu13])]


def test_a_library_many_objects_lose_is_one_entry(tmp_path: Path) -> None:
    """A build's dozen objects losing one library read as one entry naming three of them
    and counting the rest; another library stays its own entry."""
    from cudafix.cli.render import render_plan
    from tests.support.tx import make_plan

    (tmp_path / "lib/python3.11/site-packages").mkdir(parents=True)
    plan = make_plan(tmp_path, tmp_path, remove=[("nvidia-x-cu12", "1.0")], verdict="refused")
    site = plan.target.site_packages[0]

    def lost(consumer: str, need: str) -> P.LostNeed:
        return P.LostNeed(
            consumer=f"{site}/torch/lib/{consumer}",
            consumer_distribution="torch",
            need=need,
            resolved_before=f"{site}/nvidia/x/lib/{need}",
            lost_file_owners=["nvidia-x-cu12"],
            searched=[f"{site}/torch/lib"],
        )

    many = [lost(f"lib{i:02}.so", "libx.so.1") for i in range(12)]
    plan = plan.model_copy(update={"lost": [*many, lost("lib00.so", "liby.so.1")]})
    text = render_plan(plan)
    entries = [ln for ln in text.splitlines() if ln.startswith("  x ")]
    assert entries == [
        "  x libx.so.1 needed by torch/lib/lib00.so (torch), torch/lib/lib01.so (torch), "
        "torch/lib/lib02.so (torch) and 9 more",
        "  x liby.so.1 needed by torch/lib/lib00.so (torch)",
    ]
