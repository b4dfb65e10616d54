"""Each family of doctor's findings, over hand-made facts: typed fields, no venv, no words."""

from __future__ import annotations

import dataclasses

from cudafix.env.inventory import Unmanaged, UnreadableRecord, UnsafeEntry
from cudafix.env.scripts import Shebang
from cudafix.linker.elf import ElfProblem
from cudafix.model.doctor import (
    Difference,
    DuplicateSoname,
    Finding,
    ForeignBytes,
    Holding,
    MissingFiles,
    MixedMajors,
    PendingTransaction,
    RequirementUnmet,
    Scripts,
    Shadowed,
    SharedPaths,
    UnloadableElf,
    Unresolved,
    UnsafeRecord,
)
from cudafix.model.doctor import Unmanaged as UnmanagedFacts
from cudafix.model.doctor import (
    UnreadableRecord as UnreadableFacts,
)
from cudafix.model.names import DistName
from cudafix.plan.doctor import cuda_leftovers, diagnose, files, records, requirements, scripts
from cudafix.plan.doctor.common import Commands
from cudafix.plan.doctor.cuda import needed_by
from cudafix.plan.facts import Facts
from tests.support.facts import Dist, Lib, env, facts

CMD = Commands(("--venv", "/v"))
REPAIR = ["cudafix", "repair", "--dry-run", "--venv", "/v"]


def _with(f: Facts, **inventory: object) -> Facts:
    return dataclasses.replace(f, inventory=dataclasses.replace(f.inventory, **inventory))


def _kind(found: list[Finding], kind: str) -> list[Finding]:
    return [f for f in found if f.kind == kind]


# -- files ------------------------------------------------------------------------------------


def test_an_unfinished_transaction_is_the_first_error_and_recover_comes_before_repair() -> None:
    """A killed run's half-change (here: a missing file) is not repaired over: recover first."""
    base = facts([Dist("pa", "1.2", {"pa/a.py": "A", "pa/b.py": "B"})])
    f = dataclasses.replace(
        _with(base, missing={DistName("pa"): [env("pa/b.py")]}), pending=("t1", "t2")
    )
    report = diagnose(f, ("--venv", "/v"))
    first = report.findings[0]
    assert (first.kind, first.severity) == ("pending-transaction", "error")
    assert first.facts == PendingTransaction(txids=["t1", "t2"])
    assert report.next_command == first.command == ["cudafix", "recover", "--venv", "/v"]
    assert not report.healthy and _kind(report.findings, "missing-files")
    quiet = diagnose(dataclasses.replace(f, pending=()), ("--venv", "/v"))
    assert not _kind(quiet.findings, "pending-transaction") and quiet.next_command[1] == "repair"


def test_missing_files_carry_the_version_and_paths_and_repair_is_the_command() -> None:
    base = facts([Dist("pa", "1.2", {"pa/a.py": "A", "pa/b.py": "B"})])
    f = _with(base, missing={DistName("pa"): [env("pa/b.py")]})
    [found] = files.missing(f.inventory, CMD)
    assert (found.kind, found.severity, found.distribution) == ("missing-files", "error", "pa")
    assert found.facts == MissingFiles(version="1.2")
    assert found.paths == [env("pa/b.py")] and found.command == REPAIR


def test_a_path_holding_one_owners_bytes_is_clobbered_and_the_spare_owner_is_removed() -> None:
    f = facts([Dist("pa", "1", {"lib/x.so": "A"}), Dist("pb", "1", {"lib/x.so": "B"})])
    [found] = files.clobbered(f.inventory, frozenset({DistName("pa")}), {}, CMD)
    assert (found.kind, found.severity, found.owners) == ("clobbered", "warning", ["pa", "pb"])
    assert isinstance(found.facts, SharedPaths)
    assert found.facts.holdings == [Holding(path=env("lib/x.so"), state="holder", owners=["pb"])]
    assert (found.facts.differ, found.facts.removes, found.facts.required_by) == (1, "pb", {})
    assert found.command == ["cudafix", "remove", "pb", "--repair", "--dry-run", "--venv", "/v"]


def test_owners_each_a_framework_requires_are_named_and_none_is_removed() -> None:
    f = facts([Dist("pa", "1", {"lib/x.so": "A"}), Dist("pb", "1", {"lib/x.so": "B"})])
    loaded = frozenset({DistName("pa"), DistName("pb")})
    wanted = {DistName("pa"): [DistName("jax")], DistName("pb"): [DistName("torch")]}
    [found] = files.clobbered(f.inventory, loaded, wanted, CMD)
    assert isinstance(found.facts, SharedPaths) and found.command == []
    assert found.facts.removes is None
    assert found.facts.required_by == {"pa": ["jax"], "pb": ["torch"]}


def test_identical_bytes_are_shared_information_with_no_command() -> None:
    f = facts([Dist("pa", "1", {"nv/__init__.py": "E"}), Dist("pb", "1", {"nv/__init__.py": "E"})])
    [found] = files.clobbered(f.inventory, frozenset(), {}, CMD)
    assert (found.kind, found.severity, found.command) == ("shared", "info", [])
    assert isinstance(found.facts, SharedPaths) and found.facts.differ == 0
    assert found.facts.holdings[0].state == "identical"
    assert found.facts.holdings[0].owners == ["pa", "pb"]


def test_foreign_bytes_carry_how_each_file_differs() -> None:
    f = facts([Dist("pa", "3.0", {"pa/lib.so": "A"})])
    wrong = {DistName("pa"): [(env("pa/lib.so"), Difference(size=3, recorded_size=1))]}
    [found] = files.foreign_bytes(f.inventory, wrong, CMD)
    assert found.facts == ForeignBytes(
        version="3.0", differences=[Difference(size=3, recorded_size=1)]
    )
    assert found.paths == [env("pa/lib.so")] and found.command == REPAIR


# -- scripts ----------------------------------------------------------------------------------


def _scripted(exists: bool) -> Facts:
    """A script whose RECORD size disagrees (its ``#!`` line rewritten), of an ELF provider."""
    dist = Dist("pa", "2.0", {"pa/lib.so": "L", "bin/tool": "old"})
    base = facts([dist], {"pa/lib.so": Lib(soname="lib.so")}, disk={"bin/tool": "rewritten"})
    shebang = Shebang(interpreter="/elsewhere/bin/python", exists=exists)
    return dataclasses.replace(base, shebangs={env("bin/tool"): shebang})


def test_a_script_naming_an_existing_interpreter_is_relocated_information() -> None:
    [found] = scripts.scripts(_scripted(exists=True), CMD)
    assert (found.kind, found.severity, found.command) == ("relocated", "info", [])
    assert found.facts == Scripts(interpreters=["/elsewhere/bin/python"])
    assert found.paths == [env("bin/tool")]


def test_a_script_naming_a_missing_interpreter_is_a_warning_repair_fixes() -> None:
    [found] = scripts.scripts(_scripted(exists=False), CMD)
    assert (found.kind, found.severity, found.command) == ("bad-script", "warning", REPAIR)
    assert found.facts == Scripts(version="2.0", interpreters=["/elsewhere/bin/python"])
    assert files.foreign_files(_scripted(exists=False)) == {}  # scripts are judged apart


# -- linkage ----------------------------------------------------------------------------------


def test_needs_of_an_object_nothing_loads_are_information_listing_the_search_once() -> None:
    lib = Lib(soname="liba.so", needed=("libgone1.so", "libgone2.so"))
    f = facts([Dist("pa", "1", {"pa/liba.so": "A"})], {"pa/liba.so": lib})
    found = _kind(diagnose(f).findings, "unresolved")
    assert [x.need for x in found] == ["libgone1.so", "libgone2.so"]
    first, second = (x.facts for x in found)
    assert isinstance(first, Unresolved) and isinstance(second, Unresolved)
    assert all(x.severity == "info" and x.consumer == env("pa/liba.so") for x in found)
    assert (first.chains, first.requester_owners, first.searched_as) == (0, ["pa"], None)
    assert first.searched and first.searched_count == len(first.searched)
    assert (second.searched, second.searched_as) == ([], "libgone1.so")
    assert second.searched_count == first.searched_count


def test_a_need_a_record_claims_is_an_error_that_repair_fixes() -> None:
    dists = [Dist("pa", "1", {"pa/liba.so": "A"}), Dist("pb", "1", {"pb/libb.so": "B"})]
    lib = Lib(soname="liba.so", needed=("libb.so",))
    base = facts(dists, {"pa/liba.so": lib}, disk={"pb/libb.so": None})
    f = _with(base, missing={DistName("pb"): [env("pb/libb.so")]})
    [found] = _kind(diagnose(f, ("--venv", "/v")).findings, "unresolved")
    assert (found.severity, found.need, found.owners, found.command) == (
        "error",
        "libb.so",
        ["pb"],
        REPAIR,
    )
    assert isinstance(found.facts, Unresolved) and found.facts.elsewhere == []


def _copies(rpath: tuple[str, ...]) -> Facts:
    """An extension module finding ``libx.so`` by ``rpath``, of two copies in the venv."""
    dists = [
        Dist("app", "1", {"app/_ext.so": "E"}),
        Dist("pa", "1", {"a/lib/libx.so": "A"}),
        Dist("pb", "1", {"b/lib/libx.so": "B"}),
    ]
    libs = {
        "app/_ext.so": Lib(needed=("libx.so",), rpath=rpath),
        "a/lib/libx.so": Lib(soname="libx.so"),
        "b/lib/libx.so": Lib(soname="libx.so"),
    }
    return facts(dists, libs)


def test_copies_no_search_path_puts_side_by_side_are_a_duplicate_soname() -> None:
    [found] = _kind(diagnose(_copies(("$ORIGIN/../a/lib",))).findings, "duplicate-soname")
    assert (found.severity, found.need) == ("info", "libx.so")
    assert found.paths == [env("a/lib/libx.so"), env("b/lib/libx.so")]
    assert isinstance(found.facts, DuplicateSoname)
    assert [c.owners for c in found.facts.copies] == [["pa"], ["pb"]]


def test_a_copy_found_first_outside_the_consumers_requirements_is_shadowed() -> None:
    f = _copies(("$ORIGIN/../b/lib", "$ORIGIN/../a/lib"))
    [found] = _kind(diagnose(f, ("--venv", "/v")).findings, "shadowed")
    assert (found.severity, found.need, found.provider) == (
        "warning",
        "libx.so",
        env("b/lib/libx.so"),
    )
    assert isinstance(found.facts, Shadowed)
    assert (found.facts.found_owners, found.facts.competing, found.facts.wrong) == (["pb"], 2, True)
    assert (found.facts.removes, found.facts.repairs_shared) == ("pb", False)
    assert found.command == ["cudafix", "remove", "pb", "--dry-run", "--venv", "/v"]


# -- cuda -------------------------------------------------------------------------------------


def test_two_majors_without_framework_evidence_offer_a_pattern_not_a_command() -> None:
    f = facts(
        [Dist("nvidia-a-cu12", "1", {"a.py": "A"}), Dist("nvidia-b-cu13", "1", {"b.py": "B"})]
    )
    [found] = diagnose(f, ("--venv", "/v")).findings
    assert (found.kind, found.severity, found.command) == ("mixed-cuda", "warning", [])
    assert found.owners == ["nvidia-a-cu12", "nvidia-b-cu13"]
    assert found.facts == MixedMajors(
        majors={12: ["nvidia-a-cu12"], 13: ["nvidia-b-cu13"]},
        pattern=["cudafix", "remove", "nvidia-*-cuNN", "--repair", "--dry-run", "--venv", "/v"],
    )


def test_a_major_no_framework_needs_is_a_leftover() -> None:
    f = facts(
        [Dist("nvidia-a-cu12", "1", {"a.py": "A"}), Dist("nvidia-b-cu13", "1", {"b.py": "B"})]
    )
    needs = {DistName("torch"): frozenset({DistName("nvidia-b-cu13")})}
    assert cuda_leftovers(f, needs) == {"nvidia-a-cu12"}
    assert cuda_leftovers(f, {}) == frozenset()
    assert needed_by(needs) == {"nvidia-b-cu13": ["torch"]}


def test_one_process_mapping_two_majors_of_a_library_is_a_warning() -> None:
    dists = [
        Dist("app", "1", {"app/_ext.so": "E"}),
        Dist("rt", "1", {"rt/libcudart.so.12": "C", "rt/libcudart.so.13": "D"}),
    ]
    libs = {
        "app/_ext.so": Lib(needed=("libcudart.so.12", "libcudart.so.13"), rpath=("$ORIGIN/../rt",)),
        "rt/libcudart.so.12": Lib(soname="libcudart.so.12"),
        "rt/libcudart.so.13": Lib(soname="libcudart.so.13"),
    }
    found = _kind(diagnose(facts(dists, libs)).findings, "mixed-cuda")
    [tree] = [x.facts for x in found]
    assert tree.kind == "mixed-sonames" and tree.root.endswith("app/_ext.so")
    assert [(ld.need, ld.provider.rsplit("/", 1)[-1]) for ld in tree.loads] == [
        ("libcudart.so.12", "libcudart.so.12"),
        ("libcudart.so.13", "libcudart.so.13"),
    ]


def test_mixed_cuda_is_silent_with_one_major() -> None:
    f = facts([Dist("nvidia-a-cu12", "1", {"a.py": "A"})])
    assert _kind(diagnose(f).findings, "mixed-cuda") == []


# -- requirements -----------------------------------------------------------------------------


def test_an_unmet_requirement_no_command_fixes_offers_the_removal() -> None:
    f = facts(
        [Dist("pa", "1", {"pa.py": "A"}, requires=("pb>=2",)), Dist("pb", "1", {"pb.py": "B"})]
    )
    [found] = requirements.requirements(f, CMD, (), {}, frozenset())
    assert (found.kind, found.severity, found.distribution, found.command) == (
        "requirement",
        "error",
        "pa",
        [],
    )
    assert isinstance(found.facts, RequirementUnmet)
    assert (found.facts.requested_as, found.facts.requirement) == ("pa", "pb>=2")
    assert "pb" in found.facts.problem
    assert found.facts.removal == ["cudafix", "remove", "pa", "--dry-run", "--venv", "/v"]


def test_a_leftovers_unmet_requirement_is_mended_by_removing_the_leftover() -> None:
    f = facts([Dist("nvidia-a-cu12", "1", {"a.py": "A"}, requires=("nvidia-b-cu12",))])
    [found] = requirements.requirements(f, CMD, (), {}, frozenset({DistName("nvidia-a-cu12")}))
    assert found.command[:3] == ["cudafix", "remove", "nvidia-a-cu12"]
    assert isinstance(found.facts, RequirementUnmet) and found.facts.removal == []


# -- records ----------------------------------------------------------------------------------


def test_records_cudafix_cannot_act_on_are_typed() -> None:
    base = facts([Dist("pa", "1", {"pa.py": "A"})])
    f = _with(
        base,
        unsafe=(UnsafeEntry(DistName("pa"), "../../etc/x", "outside the environment"),),
        unreadable=(UnreadableRecord(DistName("pa"), env("pa-1.dist-info/RECORD"), "NUL byte"),),
        unmanaged=(Unmanaged(env("old.egg-info"), "Old_Pkg", "egg-info"),),
    )
    [unsafe] = records.unsafe(f.inventory)
    assert unsafe.facts == UnsafeRecord(entry="../../etc/x", problem="outside the environment")
    [unreadable] = records.unreadable(f.inventory)
    assert unreadable.facts == UnreadableFacts(problem="NUL byte")
    assert unreadable.paths == [env("pa-1.dist-info/RECORD")] and unreadable.severity == "error"
    [unmanaged] = records.unmanaged(f.inventory)
    assert unmanaged.facts == UnmanagedFacts(
        name="old-pkg", path=env("old.egg-info"), install="egg-info"
    )


def test_a_file_named_like_a_library_that_is_no_elf_is_information() -> None:
    base = facts([Dist("pa", "1", {"pa/libx.so": "A"})])
    problem = ElfProblem("not-elf", "no ELF magic")
    f = dataclasses.replace(
        base, elf=dataclasses.replace(base.elf, problems={env("pa/libx.so"): problem})
    )
    [found] = records.bad_elf(f)
    assert (found.kind, found.severity) == ("bad-elf", "info")
    assert found.facts == UnloadableElf(
        path=env("pa/libx.so"), problem="not-elf", detail="no ELF magic"
    )


def test_repair_reinstalls_the_fewest_distributions_that_bring_every_missing_file_back() -> None:
    """Most missing first: a path several claim comes back with the first claimant chosen;
    a distribution whose missing paths are all back already is not reinstalled."""
    f = facts(
        [
            Dist("a", "1", {"a1.py": "a", "s1.py": "s"}),
            Dist("b", "1", {"b1.py": "b", "s1.py": "s"}),
            Dist("c", "1", {"s1.py": "s", "s2.py": "t"}),
            Dist("d", "1", {"s2.py": "t"}),
            Dist("e", "1", {"e1.py": "e"}),
        ]
    )
    missing = {"a": ["a1.py", "s1.py"], "b": ["s1.py"], "c": ["s1.py", "s2.py"], "d": ["s2.py"]}
    missing["e"] = ["e1.py"]
    gone = {DistName(n): tuple(env(p) for p in ps) for n, ps in missing.items()}
    f = dataclasses.replace(f, inventory=dataclasses.replace(f.inventory, missing=gone))
    chosen = files.repair_candidates(f)
    assert {n: r.count for n, r in chosen.items()} == {"a": 2, "c": 2, "e": 1}
