"""Needs judged on the chains that really load an object, and what counts as a chain's root.

Each case is a venv built from gcc-compiled objects by the scenario builder and installed
with uv; doctor and the planner run through the CLI, and ``ldd`` (or an import in the
venv) is the oracle for what the loader really does.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from cudafix.model.doctor import MixedMajors, Unresolved
from scenarios import BuiltScenario, build_spec
from scenarios.spec import Scenario
from tests.support.cli import as_json, cudafix
from tests.support.doctor import diagnosed, with_facts
from tests.support.loadertree import cudafix_tree, ldd, parse_ldd, real
from tests.support.venvs import ScenarioFactory, site_dir, try_import

pytestmark = pytest.mark.slow
"""Builds real venvs and runs doctor on them: left out of ``make test-fast``."""

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GFORTRAN = "libgfortran-8f1e9814.so.5.0.0"
QUADMATH = "libquadmath-828275a7.so.0.0.0"


def _build(text: str, dest: Path) -> BuiltScenario:
    return build_spec(Scenario.model_validate(tomllib.loads(text)), dest)


def _unresolved(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Unresolved findings by ``consumer-file-name:need``."""
    return {
        f"{f['consumer'].rsplit('/', 1)[-1]}:{f['need']}": f
        for f in report["findings"]
        if f["kind"] == "unresolved"
    }


# ---- point 2: a bundled library is judged through the extension that loads it ----------------


def test_a_bundled_library_resolves_through_its_loaders_rpath(scenario: ScenarioFactory) -> None:
    """scipy's shape: healthy (exit 0), as ``ldd`` on the extension and the import say."""
    built = scenario("bundled")
    [ext] = (site_dir(built.venv) / "scipy" / "odr").glob("__odrpack*.so")
    seen = parse_ldd(ldd(ext).stdout)
    assert real(seen[QUADMATH]) == str(site_dir(built.venv) / "scipy.libs" / QUADMATH)
    ours = {s.need: real(s.provider) for s in cudafix_tree(ext).steps}
    assert {need: ours.get(need) for need in seen} == {n: real(p) for n, p in seen.items()}
    assert try_import(built.python, "scipy.odr").returncode == 0
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    assert _unresolved(report) == {}, _unresolved(report)
    assert proc.returncode == 0, proc.stdout


LIBA = 'path = "pkg.libs/liba-1a2b3c4d.so"\nneeded = ["libb-5e6f7a8b.so"]'
LIBB = 'path = "pkg.libs/libb-5e6f7a8b.so"'


def _pkg(libs: list[str], exts: list[tuple[str, str]], also: str = "", more: str = "") -> str:
    """A wheel ``pkg`` with bundled libraries in ``pkg.libs`` (no RPATH of their own) and
    extension modules ``(path, need)`` whose DT_RPATH names ``pkg.libs``; ``also``: more
    distributions, ``more``: more packages to install."""
    lib = "".join(f"[[dist.lib]]\n{body}\n" for body in libs)
    ext = "".join(
        f'[[dist.ext]]\npath = "{path}"\nneeded = [{need}]\nrpath = ["$ORIGIN/../pkg.libs"]\n'
        for path, need in exts
    )
    return f"""
name = "pkg"
description = "bundled libraries of one wheel"

[[dist]]
name = "pkg"
version = "1.0"
files = {{ "pkg/__init__.py" = "from pkg import _ext\\n" }}
{lib}{ext}
{also}
[[steps]]
action = "install"
packages = ["pkg==1.0"{more}]
"""


# Two bundled libraries needing a third: libz, which the extension loads, and liba.
NOTHING_LOADS = _pkg(
    [LIBA, 'path = "pkg.libs/libz-9c0d1e2f.so"\nneeded = ["libb-5e6f7a8b.so"]', LIBB],
    [("pkg/_ext", '"libz-9c0d1e2f.so"')],
)


def test_a_bundled_library_nothing_loads_is_judged_on_its_own(tmp_path: Path) -> None:
    """libz's need resolves through the extension's RPATH; liba, which nothing loads, is
    judged on its own chain, where its search path misses libb: libb is a file of the venv,
    so the need is an edge to it (met once something loads libb by path), and the venv is
    healthy."""
    built = _build(NOTHING_LOADS, tmp_path / "venv")
    assert try_import(built.python, "pkg").returncode == 0
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    assert _unresolved(as_json(proc)) == {}
    assert proc.returncode == 0, proc.stdout


# Two extension modules load liba; libb is built (so the objects link) but never installed.
EVERY_CHAIN_FAILS = _pkg(
    [LIBA],
    [("pkg/_ext", '"liba-1a2b3c4d.so"'), ("pkg/_other", '"liba-1a2b3c4d.so"')],
    '[[dist]]\nname = "not-installed"\nversion = "0"\n'
    'lib = [{ path = "elsewhere/libb-5e6f7a8b.so" }]\n',
)


def test_a_need_failing_on_every_chain_is_still_an_error(tmp_path: Path) -> None:
    built = _build(EVERY_CHAIN_FAILS, tmp_path / "venv")
    assert "libb-5e6f7a8b.so" in try_import(built.python, "pkg").stderr
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    found = _unresolved(as_json(proc))
    assert set(found) == {"liba-1a2b3c4d.so:libb-5e6f7a8b.so"}, found
    [finding] = found.values()
    assert finding["severity"] == "error" and proc.returncode == 1
    [(_, facts)] = with_facts(diagnosed(built.venv).findings, Unresolved)
    assert facts.chains == 2 and "pkg/_" in facts.root  # fails on each of the 2 chains


# The planner judges the same way: libb lives in its own distribution, reached only through
# the extension's RPATH. Removing it breaks `import pkg`; judged on liba's own chain (where
# libb never resolved), nothing would be lost.
SPLIT = _pkg(
    [LIBA],
    [("pkg/_ext", '"liba-1a2b3c4d.so"')],
    f'[[dist]]\nname = "pkg-libb"\nversion = "1.0"\n[[dist.lib]]\n{LIBB}\n',
    ', "pkg-libb==1.0"',
)


def test_a_removal_that_breaks_a_bundled_librarys_chain_is_refused(tmp_path: Path) -> None:
    built = _build(SPLIT, tmp_path / "venv")
    assert try_import(built.python, "pkg").returncode == 0
    assert cudafix("doctor", "--venv", built.venv).returncode == 0
    proc = cudafix("remove", "pkg-libb", "--dry-run", "--json", "--venv", built.venv)
    plan = as_json(proc)
    assert plan["verdict"] == "refused" and proc.returncode == 3
    [lost] = plan["lost"]
    assert lost["consumer"].endswith("pkg.libs/liba-1a2b3c4d.so")
    assert lost["need"] == "libb-5e6f7a8b.so"


# ---- point 3: an extension module is what import loads, whatever its suffix -------------------

UNTAGGED = """
name = "untagged"
description = "an extension module named without the ABI tag, as jaxlib/_jax.so"

[[dist]]
name = "jaxlib"
version = "0.10.2"
files = { "jaxlib/__init__.py" = "from jaxlib import _jax\\n" }
[[dist.lib]]
path = "jaxlib/lib/libxla.so"
needed = ["libcudafix_nowhere.so.7"]
[[dist.lib]]
path = "jaxlib/lib/libnot_an_extension.so"
[[dist.ext]]
path = "jaxlib/_jax"
suffix = ".so"
needed = ["libxla.so"]
rpath = ["$ORIGIN/lib"]

[[dist]]
name = "not-installed"
version = "0"
lib = [{ path = "elsewhere/libcudafix_nowhere.so.7" }]

[[steps]]
action = "install"
packages = ["jaxlib==0.10.2"]
"""


def test_an_extension_without_the_abi_tag_is_imported(tmp_path: Path) -> None:
    """``jaxlib/_jax.so`` is a root; a ``.so`` without ``PyInit_`` is not. What it loads
    is what import loads: its broken need is an error, as the import shows."""
    built = _build(UNTAGGED, tmp_path / "venv")
    site = site_dir(built.venv).relative_to(built.venv)
    assert "libcudafix_nowhere.so.7" in try_import(built.python, "jaxlib").stderr
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    assert report["roots"] == {"extension": [f"{site}/jaxlib/_jax.so"]}
    assert report["imported_objects"] == 2
    [finding] = _unresolved(report).values()
    assert finding["consumer"] == f"{site}/jaxlib/lib/libxla.so"
    assert finding["severity"] == "error" and proc.returncode == 1
    text = cudafix("doctor", "--venv", built.venv).stdout
    assert "import loads 2 of them; load chains start at 1 extension module(s)" in text


# ---- point 3: two frameworks, two CUDA majors ------------------------------------------------

TWO_FRAMEWORKS = """
name = "two-frameworks"
description = "a cu13 torch and a cu12 JAX plugin in one venv"

[[dist]]
name = "torch"
version = "2.14.1"
requires = ["nvidia-cublas==13.1.0.3", "nvidia-cuda-runtime-cu13==13.0.96"]
files = { "torch/__init__.py" = "from torch import _C\\n" }
[[dist.ext]]
path = "torch/_C"
needed = ["libcublas.so.13", "libcudart.so.13"]
rpath = ["$ORIGIN/../nvidia/cu13/lib"]

[[dist]]
name = "jax-cuda12-plugin"
version = "0.10.2"
requires = ["nvidia-cublas-cu12==12.9.1.4"]
files = { "jax_cuda12_plugin/__init__.py" = "from jax_cuda12_plugin import _cuda_plugin\\n" }
[[dist.ext]]
path = "jax_cuda12_plugin/_cuda_plugin"
suffix = ".so"
needed = ["libcublas.so.12"]
rpath = ["$ORIGIN/../nvidia/cublas/lib"]

[[dist]]
name = "nvidia-cublas"
version = "13.1.0.3"
lib = [{ path = "nvidia/cu13/lib/libcublas.so.13" }]

[[dist]]
name = "nvidia-cuda-runtime-cu13"
version = "13.0.96"
lib = [{ path = "nvidia/cu13/lib/libcudart.so.13" }]

[[dist]]
name = "nvidia-cublas-cu12"
version = "12.9.1.4"
lib = [{ path = "nvidia/cublas/lib/libcublas.so.12" }]

[[steps]]
action = "install"
packages = ["torch==2.14.1", "nvidia-cublas==13.1.0.3", "nvidia-cuda-runtime-cu13==13.0.96",
            "jax-cuda12-plugin==0.10.2", "nvidia-cublas-cu12==12.9.1.4"]
"""


def _commands(finding: dict[str, Any]) -> list[str]:
    """The commands a finding offers: its own, and each choice's."""
    own = [shlex.join(finding["command"])] if finding["command"] else []
    return own + [c["command"] for c in finding["choices"] if c["command"]]


def _needed_by(built: BuiltScenario) -> dict[int, list[str]]:
    """Per CUDA major, the frameworks doctor found needing it."""
    [(_, majors)] = with_facts(diagnosed(built.venv).findings, MixedMajors)
    return majors.needed_by


def test_two_frameworks_on_two_majors_keep_both_or_remove_one_whole(tmp_path: Path) -> None:
    """Neither major's libraries are offered for removal on their own: each is a framework's.
    The choices are keeping both, or a framework with its own libraries, and each printed
    command plans a removal that passes."""
    built = _build(TWO_FRAMEWORKS, tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    [mixed] = [f for f in report["findings"] if f["kind"] == "mixed-cuda" and f["owners"]]
    assert mixed["severity"] == "info" and proc.returncode == 0, report["findings"]
    assert _needed_by(built) == {12: ["jax-cuda12-plugin"], 13: ["torch"]}
    choices = {(c["action"], tuple(c["majors"])): c for c in mixed["choices"]}
    assert set(choices) == {
        ("keep-all", (12, 13)),
        ("remove-framework", (12,)),
        ("remove-framework", (13,)),
    }
    assert choices[("remove-framework", (12,))]["distributions"] == [
        "jax-cuda12-plugin",
        "nvidia-cublas-cu12",
    ]
    assert choices[("remove-framework", (13,))]["distributions"] == [
        "torch",
        "nvidia-cublas",
        "nvidia-cuda-runtime-cu13",
    ]
    for command in _commands(mixed):
        words = command.split()
        assert "'nvidia-*-cu12'" not in words and "'nvidia-*-cu13'" not in words, command
        assert "jax-cuda12-plugin" in words or "torch" in words, command
        planned = cudafix(*words[1:], "--offline", "--find-links", built.wheelhouse)
        assert planned.returncode == 0, planned.stdout + planned.stderr
    text = cudafix("doctor", "--venv", built.venv).stdout
    assert (
        "keep both (nothing to do)" in text
        and "or remove jax-cuda12-plugin with its cu12 libraries" in text
    )


TWO_FRAMEWORKS_EXTRA = """
name = "two-frameworks-extra"
description = "a cu13 torch and jax[cuda12], whose cu12 wheels sit behind the plugin's extra"

[[dist]]
name = "torch"
version = "2.14.1"
requires = ["nvidia-cublas==13.1.0.3", "nvidia-cuda-runtime-cu13==13.0.96"]
files = { "torch/__init__.py" = "from torch import _C\\n" }
[[dist.ext]]
path = "torch/_C"
needed = ["libcublas.so.13", "libcudart.so.13"]
rpath = ["$ORIGIN/../nvidia/cu13/lib"]

[[dist]]
name = "nvidia-cublas"
version = "13.1.0.3"
lib = [{ path = "nvidia/cu13/lib/libcublas.so.13" }]

[[dist]]
name = "nvidia-cuda-runtime-cu13"
version = "13.0.96"
lib = [{ path = "nvidia/cu13/lib/libcudart.so.13" }]

[[dist]]
name = "jax"
version = "0.10.2"
requires = ['jax-cuda12-plugin[with-cuda]==0.10.2; extra == "cuda12"']
files = { "jax/__init__.py" = "" }

[[dist]]
name = "jax-cuda12-plugin"
version = "0.10.2"
requires = [
    'nvidia-cudnn-cu12<10.0,>=9.1; sys_platform == "linux" and extra == "with-cuda"',
    'nvidia-cuda-runtime-cu12>=12.1.105; sys_platform == "linux" and extra == "with-cuda"',
    'nvidia-cufft-cu12>=11.0.2.54; sys_platform == "linux" and extra == "with-cuda"',
    'nvidia-cuda-cupti-cu12>=12.1.105; sys_platform == "linux" and extra == "with-cuda"',
    'nvidia-cublas-cu12>=12.1.3.1; sys_platform == "linux" and extra == "with-cuda"',
    'nvidia-cusparse-cu12>=12.1.0.106; sys_platform == "linux" and extra == "with-cuda"',
]
files = { "jax_cuda12_plugin/__init__.py" = "" }
[[dist.lib]]
path = "jax_cuda12_plugin/_versions.so"
runpath = [
    "$ORIGIN/../nvidia/cudnn/lib",
    "$ORIGIN/../nvidia/cuda_runtime/lib",
    "$ORIGIN/../nvidia/cufft/lib",
    "$ORIGIN/../nvidia/cuda_cupti/lib",
    "$ORIGIN/../nvidia/cublas/lib",
    "$ORIGIN/../nvidia/cusparse/lib",
]
loader = true

[[dist]]
name = "nvidia-cudnn-cu12"
version = "9.1.0.70"
lib = [
    { path = "nvidia/cudnn/lib/libcudnn.so.9", runpath = ["$ORIGIN"] },
    { path = "nvidia/cudnn/lib/libcudnn_graph.so.9", runpath = ["$ORIGIN"] },
    { path = "nvidia/cudnn/lib/libcudnn_ops.so.9", runpath = ["$ORIGIN"] },
    { path = "nvidia/cudnn/lib/libcudnn_cnn.so.9", runpath = ["$ORIGIN"] },
    { path = "nvidia/cudnn/lib/libcudnn_adv.so.9", runpath = ["$ORIGIN"] },
    { path = "nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9", runpath = ["$ORIGIN"] },
    { path = "nvidia/cudnn/lib/libcudnn_engines_runtime_compiled.so.9", runpath = ["$ORIGIN"] },
    { path = "nvidia/cudnn/lib/libcudnn_heuristic.so.9", runpath = ["$ORIGIN"] },
]

[[dist]]
name = "nvidia-cuda-runtime-cu12"
version = "12.4.127"
lib = [{ path = "nvidia/cuda_runtime/lib/libcudart.so.12" }]

[[dist]]
name = "nvidia-cufft-cu12"
version = "11.2.1.3"
lib = [{ path = "nvidia/cufft/lib/libcufft.so.11" }]

[[dist]]
name = "nvidia-cuda-cupti-cu12"
version = "12.4.127"
lib = [{ path = "nvidia/cuda_cupti/lib/libcupti.so.12" }]

[[dist]]
name = "nvidia-cublas-cu12"
version = "12.4.5.8"
lib = [{ path = "nvidia/cublas/lib/libcublas.so.12" }]

[[dist]]
name = "nvidia-cusparse-cu12"
version = "12.3.1.170"
lib = [{ path = "nvidia/cusparse/lib/libcusparse.so.12" }]

[[steps]]
action = "install"
packages = ["torch==2.14.1", "nvidia-cublas==13.1.0.3", "nvidia-cuda-runtime-cu13==13.0.96",
            "jax==0.10.2", "jax-cuda12-plugin==0.10.2",
            "nvidia-cudnn-cu12==9.1.0.70", "nvidia-cuda-runtime-cu12==12.4.127",
            "nvidia-cufft-cu12==11.2.1.3", "nvidia-cuda-cupti-cu12==12.4.127",
            "nvidia-cublas-cu12==12.4.5.8", "nvidia-cusparse-cu12==12.3.1.170"]
"""


JAX_CU12 = sorted(
    f"nvidia-{lib}-cu12"
    for lib in ("cublas", "cuda-cupti", "cuda-runtime", "cudnn", "cufft", "cusparse")
)


def test_cu12_needs_behind_a_requested_extra_are_a_frameworks_not_leftovers(
    tmp_path: Path,
) -> None:
    """``jax[cuda12]`` asks for ``jax-cuda12-plugin[with-cuda]``, the only place its cu12
    wheels are required: they are the plugin's, so doctor offers the two-framework choices,
    never ``remove 'nvidia-*-cu12'``; the plugin's removal takes jax with it (jax[cuda12]
    asks for the plugin), so each choice's plan passes as printed."""
    built = _build(TWO_FRAMEWORKS_EXTRA, tmp_path / "venv")
    proc = cudafix("doctor", "--json", "--venv", built.venv)
    report = as_json(proc)
    for f in report["findings"]:
        assert "nvidia-*-cu12" not in f["command"], f
        assert all("'nvidia-*-cu12'" not in (c["command"] or "") for c in f["choices"]), f
    [mixed] = [f for f in report["findings"] if f["kind"] == "mixed-cuda" and f["owners"]]
    assert mixed["severity"] == "info" and proc.returncode == 0, report["findings"]
    assert _needed_by(built) == {12: ["jax-cuda12-plugin"], 13: ["torch"]}
    choices = {(c["action"], tuple(c["majors"])): c for c in mixed["choices"]}
    assert set(choices) == {
        ("keep-all", (12, 13)),
        ("remove-framework", (12,)),
        ("remove-framework", (13,)),
    }
    assert choices[("remove-framework", (12,))]["distributions"] == [
        "jax-cuda12-plugin",
        "jax",
        *JAX_CU12,
    ]
    for command in _commands(mixed):
        words = command.split()
        planned = cudafix(*words[1:], "--json", "--offline", "--find-links", built.wheelhouse)
        plan = as_json(planned)
        assert (plan["verdict"], planned.returncode) == ("pass", 0), plan["reasons"]
