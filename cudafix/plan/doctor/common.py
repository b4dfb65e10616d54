"""What doctor's families of findings share: commands, owners, frameworks and closures.

The commands they offer, the owners of absolute paths, the frameworks (owners of what
``import`` loads) and their requirement closures.

Pure functions of :class:`~cudafix.plan.facts.Facts` and the resolved load chains.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from cudafix.env.inventory import Inventory
from cudafix.linker.linkage import Chains, Root, RootKind, to_env_path
from cudafix.model.commands import TargetFlags, cudafix_argv
from cudafix.model.names import DistName, EnvPath
from cudafix.plan.facts import Facts
from cudafix.plan.requirements import reached

IMPORT_KINDS: tuple[RootKind, ...] = ("extension", "run-time")
"""Roots whose chains are what the environment is for (executables are tools it ships)."""

REPAIR = ("repair", "--dry-run")
"""The words of ``cudafix repair --dry-run``: the fix of every finding ``repair`` mends."""

Needs = Mapping[DistName, frozenset[DistName]]
"""Per framework, the CUDA libraries its requirement closure holds: computed once per
diagnosis (:func:`cudafix.plan.doctor.cuda.framework_cuda_needs`) for the clobber hint,
mixed-cuda and leftovers."""


@dataclass(frozen=True)
class Commands:
    """Commands as the report prints them: with the user's target flags, runnable as is."""

    flags: TargetFlags

    def argv(self, *words: str) -> list[str]:
        """``cudafix WORDS... --venv DIR``, or nothing for no words."""
        return cudafix_argv(*words, target=self.flags) if words else []


def owners_abs(inv: Inventory, path: str) -> list[DistName]:
    """The distributions claiming an absolute path (none for one outside the environment)."""
    rel = to_env_path(str(inv.prefix), path) if path else None
    return list(inv.owners.get(rel, ())) if rel else []


Copies = Mapping[str, list[EnvPath]]
"""Every file of the venv whose name holds ``.so``, by base name (:func:`copies_by_name`)."""


def copies_by_name(inv: Inventory) -> dict[str, list[EnvPath]]:
    """Every file in the venv by base name: where a soname sits, on anyone's path or not."""
    out: dict[str, list[EnvPath]] = defaultdict(list)
    for path in inv.files:
        name = path.rsplit("/", 1)[-1]
        if ".so" in name:
            out[name].append(path)
    return out


def closure(facts: Facts, roots: Iterable[DistName]) -> frozenset[DistName]:
    """:func:`requirement_closure` through the requested extras, as the planner judges
    requirements: what ``roots`` were installed to load."""
    return reached(facts.requirement_edges, roots)


def import_roots(chains: Chains) -> list[Root]:
    return [r for r in chains.roots if r.kind in IMPORT_KINDS]


def frameworks(inv: Inventory, chains: Chains) -> set[DistName]:
    """Distributions owning an extension module or a run-time load."""
    return {o for r in import_roots(chains) for o in owners_abs(inv, r.path)}


def loaded_closure(facts: Facts, chains: Chains) -> frozenset[DistName]:
    """The requirement closure of the distributions owning the extension modules ``import``
    loads (and run-time loads): what the environment is for (torch and its pins), as
    opposed to leftovers."""
    return closure(facts, frameworks(facts.inventory, chains))
