"""The scenario schema: synthetic distributions, the steps that install them, what to expect.

A scenario is a TOML file in ``scenarios/``; ``scenarios/README.md`` documents
every key. The models forbid unknown keys, so a typo in an expectation fails loudly instead
of silently expecting nothing.
"""

from __future__ import annotations

import posixpath
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_REQ_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==\S+$")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _relative(path: str) -> str:
    """A wheel-relative POSIX path that cannot leave the tree it is written into."""
    norm = posixpath.normpath(path)
    if path.startswith("/") or norm == ".." or norm.startswith("../"):
        raise ValueError(f"path must stay inside its tree: {path!r}")
    return norm


class Lib(_Model):
    """A shared library shipped inside a distribution's wheel."""

    path: str
    """Path inside the wheel (relative to site-packages): ``nvidia/cudnn/lib/libcudnn.so.9``."""
    soname: str | None = None
    """DT_SONAME; defaults to the file name. ``""`` builds a library without one."""
    needed: tuple[str, ...] = ()
    """Sonames of other libraries of the scenario; each becomes a DT_NEEDED entry."""
    rpath: tuple[str, ...] = ()
    """DT_RPATH entries, verbatim (``$ORIGIN`` and ``${ORIGIN}`` are kept)."""
    runpath: tuple[str, ...] = ()
    """DT_RUNPATH entries, verbatim. Mutually exclusive with ``rpath``."""
    dlopen: tuple[str, ...] = ()
    """Sonames a constructor dlopen()s when the library is loaded (no DT_NEEDED names them)."""
    literals: tuple[str, ...] = ()
    """Strings kept in its ``.rodata``: the sonames a framework's object names for the
    libraries it dlopen()s at run time (JAX's ``_versions.so`` has ``"libcudnn.so.9"``)."""
    loader: bool = False
    """Export ``int cudafix_dlopen(const char *name)``: dlopen() called from this object, so
    ld.so searches its RPATH/RUNPATH, as a framework's run-time loader does (1: loaded;
    0: failed, ``dlerror()`` on stderr)."""
    truncate: int | None = None
    """Cut the built file to this many bytes (a truncated ELF)."""
    machine: int | None = None
    """Patch e_machine to this value (e.g. 183, EM_AARCH64): an ELF of another architecture."""

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        return _relative(value)

    @model_validator(mode="after")
    def _one_search_path_kind(self) -> Lib:
        if self.rpath and self.runpath:
            raise ValueError(f"{self.path}: give rpath or runpath, not both")
        return self

    @property
    def effective_soname(self) -> str | None:
        """The DT_SONAME the built object gets."""
        if self.soname is None:
            return posixpath.basename(self.path)
        return self.soname or None


class Extension(_Model):
    """A CPython extension module; the interpreter's EXT_SUFFIX is appended to ``path``."""

    path: str
    """Path without suffix, e.g. ``torch/_C``; the module name is its last component."""
    needed: tuple[str, ...] = ()
    rpath: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    suffix: str | None = None
    """File ending instead of EXT_SUFFIX: ``.so`` for a name without ABI tag (``_jax.so``)."""
    literals: tuple[str, ...] = ()
    """Strings kept in its ``.rodata`` (:attr:`Lib.literals`)."""

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        return _relative(value)

    @field_validator("suffix")
    @classmethod
    def _check_suffix(cls, value: str | None) -> str | None:
        if value is not None and (not value.startswith(".") or "/" in value):
            raise ValueError(f"suffix {value!r}: a file ending such as '.so'")
        return value

    @property
    def module(self) -> str:
        return posixpath.basename(self.path)


class Dist(_Model):
    """One synthetic distribution, packed into one wheel."""

    name: str
    version: str
    requires: tuple[str, ...] = ()
    """Requires-Dist values, verbatim."""
    files: dict[str, str] = Field(default_factory=dict)
    """Plain files: path inside the wheel -> text content."""
    lib: tuple[Lib, ...] = ()
    ext: tuple[Extension, ...] = ()

    @field_validator("files")
    @classmethod
    def _check_files(cls, value: dict[str, str]) -> dict[str, str]:
        return {_relative(path): text for path, text in value.items()}

    @property
    def requirement(self) -> str:
        """``name==version``, what an install step names."""
        return f"{self.name}=={self.version}"


StepAction = Literal[
    "install", "uninstall", "append-record", "remove-record", "write", "symlink", "mkfifo", "grow"
]


class Step(_Model):
    """One action replayed in order on the fresh venv.

    Paths are relative to the venv; ``{site}`` expands to its site-packages directory
    (relative), ``{outside}`` (symlink targets only) to a directory next to the venv.
    """

    action: StepAction
    tag: Literal["setup", "break"] = "setup"
    """``break`` steps are replayed only for stage ``broken``."""
    installer: Literal["uv", "pip"] = "uv"
    """For install/uninstall: which tool runs it."""
    packages: tuple[str, ...] = ()
    """install: ``name==version`` requirements; uninstall: names."""
    no_deps: bool = False
    """install: pass ``--no-deps``."""
    dist: str | None = None
    """append-record/remove-record: whose RECORD; write/symlink/mkfifo/grow: record it there."""
    line: str | None = None
    """append-record: the RECORD line, verbatim."""
    path: str | None = None
    text: str = ""
    """write: content."""
    target: str | None = None
    """symlink: where it points (verbatim, after ``{outside}`` expansion)."""
    size: int | None = None
    """grow: extend the file sparsely to this many bytes (RECORD hash/size updated)."""

    @model_validator(mode="after")
    def _fields_for_action(self) -> Step:
        needs: dict[str, tuple[str, ...]] = {
            "install": ("packages",),
            "uninstall": ("packages",),
            "append-record": ("dist", "line"),
            "remove-record": ("dist",),
            "write": ("path",),
            "symlink": ("path", "target"),
            "mkfifo": ("path",),
            "grow": ("path", "size"),
        }
        missing = [f for f in needs[self.action] if not getattr(self, f)]
        if missing:
            raise ValueError(f"step {self.action!r} needs {', '.join(missing)}")
        if self.action == "install" and not all(_REQ_NAME.match(p) for p in self.packages):
            raise ValueError(f"install steps pin exact versions: {self.packages}")
        return self


class DoctorExpect(_Model):
    """What ``cudafix doctor`` should report for the venv at this stage."""

    ok: bool | None = None
    """Whether doctor should find no problem at all."""
    unresolved: tuple[str, ...] = ()
    """Sonames some object in the venv needs and the loader cannot find."""
    shared: tuple[str, ...] = ()
    """Paths (relative to site-packages) claimed by two or more distributions."""
    shadowed: tuple[str, ...] = ()
    """Sonames with several providers where the loader picks an unexpected one."""
    unmanaged: tuple[str, ...] = ()
    """Installs cudafix will not plan for (egg-info, dist-info without RECORD), by name."""
    unsafe: tuple[str, ...] = ()
    """RECORD entries (verbatim) that point outside the environment."""
    problems: tuple[str, ...] = ()
    """Site-packages-relative paths of files that look like libraries but are not usable."""


class RemoveExpect(_Model):
    """What ``cudafix remove --dry-run SELECTORS`` should plan."""

    selectors: tuple[str, ...]
    verdict: Literal["pass", "refused"]
    removes: tuple[str, ...] | None = None
    """Distributions the plan removes (normalised names), when given."""
    lost: tuple[str, ...] = ()
    """Sonames that resolve before and not after."""
    switches: tuple[str, ...] = ()
    """Sonames that keep resolving, to another file."""
    requirement_breaks: tuple[str, ...] = ()
    """Remaining distributions whose Requires-Dist the plan breaks."""
    reinstall: tuple[str, ...] = ()
    """Distributions the plan reinstalls (with ``repair = true``)."""
    refused_paths: tuple[str, ...] = ()
    """RECORD entries (verbatim) the plan refuses to act on."""
    deletes_shared: tuple[str, ...] = ()
    """Paths (site-packages relative) among those a remaining distribution claims that the
    plan deletes and nothing puts back; any such path refuses the plan."""
    repair: bool = False
    """Plan with ``--repair``."""
    keep_shared: bool = False
    """Plan with ``--keep-shared``."""


class StageExpect(_Model):
    """Expectations for the venv after replaying the steps of one stage."""

    imports_ok: tuple[str, ...] = ()
    """Modules that import in the venv's interpreter."""
    imports_fail: dict[str, str] = Field(default_factory=dict)
    """Module -> substring of the ImportError/OSError message."""
    pip_check_clean: bool | None = None
    """Whether ``uv pip check`` exits 0."""
    installed: tuple[str, ...] = ()
    """Distributions ``uv pip list`` shows (normalised names)."""
    absent: tuple[str, ...] = ()
    """Distributions ``uv pip list`` does not show."""
    loader: dict[str, str] = Field(default_factory=dict)
    """``consumer:soname`` -> site-packages-relative path the real loader maps for it."""
    doctor: DoctorExpect = Field(default_factory=DoctorExpect)
    remove: tuple[RemoveExpect, ...] = ()


class Expect(_Model):
    """Expected findings, per stage (see ``scenarios/README.md``)."""

    ready: StageExpect = Field(default_factory=StageExpect)
    broken: StageExpect = Field(default_factory=StageExpect)


class Scenario(_Model):
    """A parsed scenario: distributions, steps, dlopen edges and expectations."""

    name: str
    description: str
    generator: str | None = None
    """Name of a Python generator that fills ``dist`` and ``steps`` from ``params``."""
    params: dict[str, int] = Field(default_factory=dict)
    dist: tuple[Dist, ...] = ()
    steps: tuple[Step, ...] = ()
    dlopen: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """soname -> sonames it dlopen()s: edges no DT_NEEDED shows, for the resolver."""
    expect: Expect = Field(default_factory=Expect)
    compile: bool = False
    """Install steps leave bytecode as pip does by default (``.pyc`` files; pip also RECORDs
    them, with an empty hash). Off: no install step writes bytecode."""

    @model_validator(mode="after")
    def _unique_dists(self) -> Scenario:
        seen = [d.requirement for d in self.dist]
        dupes = {r for r in seen if seen.count(r) > 1}
        if dupes:
            raise ValueError(f"distribution defined twice: {sorted(dupes)}")
        return self

    def steps_for(self, stage: str) -> tuple[Step, ...]:
        """The steps replayed for ``stage`` (``ready`` skips ``break`` steps)."""
        if stage not in ("ready", "broken"):
            raise ValueError(f"unknown stage {stage!r}; use 'ready' or 'broken'")
        return tuple(s for s in self.steps if stage == "broken" or s.tag != "break")

    def expectations(self, stage: str) -> StageExpect:
        """The ``[expect.<stage>]`` table."""
        return self.expect.ready if stage == "ready" else self.expect.broken
