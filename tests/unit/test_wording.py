"""The words for reinstall reasons and alternatives: the one place their sentences are pinned.

Everything else compares the typed records; these check that each kind reads as it always has
(the CLI's text output is a contract), paths shown site-relative.
"""

from __future__ import annotations

from cudafix.cli.wording import alternative_text, reinstall_text
from cudafix.model import reasons as R

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


def test_each_alternative_reads_as_before() -> None:
    pins = ["a==1", "b==2"]
    assert [
        alternative_text(R.RemoveThenReinstall(pins=pins)),
        alternative_text(R.RemoveKeepingShared(paths=[INIT, LIB])),
        alternative_text(R.InstallToday(pins=pins)),
    ] == [
        "remove, then reinstall a==1, b==2 so its own files come back",
        "remove, keeping 2 shared path(s) that remaining distributions claim",
        "install a==1, b==2, the build the consumers load today",
    ]
