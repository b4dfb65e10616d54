"""The ``large`` generator: a venv shaped like a real torch CUDA install, for benchmarks.

Parameters (``[params]`` in ``large.toml``, overridable per build):

- ``files``: about how many installed files (RECORD entries) the venv holds;
- ``elves``: how many ELF objects (at least the ~24 the dependency graph needs);
- ``sparse_mib`` / ``sparse_libs``: the biggest libraries are grown sparsely to this size
  after install (a wheel cannot carry a sparse file), their RECORD rows rewritten to match,
  so disk use stays small while sizes and hashes look like the real GB-scale ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from scenarios.spec import Dist, Extension, Lib, Scenario, Step

TORCH = "torch"
TORCH_VERSION = "2.14.1+scenario"
_NVIDIA = {
    # dist -> (directory under nvidia/, sonames it ships)
    "nvidia-cublas-cu12": ("cublas", ("libcublas.so.12", "libcublasLt.so.12")),
    "nvidia-cuda-runtime-cu12": ("cuda_runtime", ("libcudart.so.12",)),
    "nvidia-cuda-nvrtc-cu12": ("cuda_nvrtc", ("libnvrtc.so.12", "libnvrtc-builtins.so.12.8")),
    "nvidia-cuda-cupti-cu12": ("cuda_cupti", ("libcupti.so.12",)),
    "nvidia-cudnn-cu12": (
        "cudnn",
        (
            "libcudnn.so.9",
            "libcudnn_graph.so.9",
            "libcudnn_ops.so.9",
            "libcudnn_cnn.so.9",
            "libcudnn_adv.so.9",
            "libcudnn_engines_precompiled.so.9",
            "libcudnn_engines_runtime_compiled.so.9",
            "libcudnn_heuristic.so.9",
        ),
    ),
    "nvidia-cufft-cu12": ("cufft", ("libcufft.so.11",)),
    "nvidia-curand-cu12": ("curand", ("libcurand.so.10",)),
    "nvidia-cusolver-cu12": ("cusolver", ("libcusolver.so.11",)),
    "nvidia-cusparse-cu12": ("cusparse", ("libcusparse.so.12",)),
    "nvidia-cusparselt-cu12": ("cusparselt", ("libcusparseLt.so.0",)),
    "nvidia-nccl-cu12": ("nccl", ("libnccl.so.2",)),
    "nvidia-nvjitlink-cu12": ("nvjitlink", ("libnvJitLink.so.12",)),
    "nvidia-nvtx-cu12": ("nvtx", ("libnvToolsExt.so.1",)),
    "nvidia-nvshmem-cu12": ("nvshmem", ("libnvshmem_host.so.3",)),
    "nvidia-cufile-cu12": ("cufile", ("libcufile.so.0",)),
}
_NV_VERSION = "12.8.90"
_PURE = {"sympy": 0.3, "networkx": 0.15, "jinja2": 0.05}
"""Pure-Python distributions and their share of the generated .py files (torch gets the rest)."""
_DIST_INFO_FILES = 7
"""RECORD rows of an installed dist-info (METADATA, WHEEL, RECORD, INSTALLER, ...)."""
_SPARSE_TARGETS = (
    ("torch", "torch/lib/libtorch_cuda.so"),
    ("nvidia-cublas-cu12", "nvidia/cublas/lib/libcublasLt.so.12"),
    ("nvidia-cudnn-cu12", "nvidia/cudnn/lib/libcudnn.so.9"),
)


def _nvidia_dist(name: str) -> Dist:
    subdir, sonames = _NVIDIA[name]
    libs = tuple(Lib(path=f"nvidia/{subdir}/lib/{s}", runpath=("$ORIGIN",)) for s in sonames)
    files = {"nvidia/__init__.py": "", f"nvidia/{subdir}/__init__.py": ""}
    return Dist(name=name, version=_NV_VERSION, files=files, lib=libs)


def _py_files(prefix: str, count: int) -> dict[str, str]:
    """Exactly ``count`` small files, fifty to a package, like a real source tree."""
    files: dict[str, str] = {}
    for i in range(count):
        package = f"{prefix}/_gen/p{i // 50:03d}"
        if i % 50 == 0:
            files[f"{package}/__init__.py"] = ""
        else:
            files[f"{package}/m{i:05d}.py"] = f"# generated module {i}\nVALUE = {i}\n"
    return files


def _torch_libs(extra: int) -> tuple[Lib, ...]:
    rpath = (*(f"$ORIGIN/../../nvidia/{d}/lib" for d, _ in _NVIDIA.values()), "$ORIGIN")
    nv_needed = tuple(sonames[0] for _, sonames in _NVIDIA.values())
    extras = tuple(
        Lib(path=f"torch/lib/libtorch_extra_{i:03d}.so", needed=("libc10.so",), rpath=("$ORIGIN",))
        for i in range(extra)
    )
    return (
        Lib(path="torch/lib/libc10.so"),
        Lib(path="torch/lib/libtorch_cpu.so", needed=("libc10.so",), rpath=("$ORIGIN",)),
        Lib(path="torch/lib/libtorch_cuda.so", needed=("libtorch_cpu.so", *nv_needed), rpath=rpath),
        Lib(path="torch/lib/libtorch.so", needed=("libtorch_cuda.so",), rpath=("$ORIGIN",)),
        *extras,
    )


def _torch(py_count: int, extra_libs: int) -> Dist:
    files = {"torch/__init__.py": "from torch import _C\n", **_py_files("torch", py_count)}
    ext = Extension(path="torch/_C", needed=("libtorch.so",), rpath=("$ORIGIN/lib",))
    requires = tuple(f"{n}=={_NV_VERSION}" for n in _NVIDIA)
    return Dist(
        name=TORCH,
        version=TORCH_VERSION,
        requires=requires,
        files=files,
        lib=_torch_libs(extra_libs),
        ext=(ext,),
    )


def _fixed_elves() -> int:
    return sum(len(s) for _, s in _NVIDIA.values()) + len(_torch_libs(0)) + 1


def _dists(params: Mapping[str, int]) -> tuple[Dist, ...]:
    extra_libs = max(0, params["elves"] - _fixed_elves())
    nvidia = [_nvidia_dist(n) for n in _NVIDIA]
    per_dist = _DIST_INFO_FILES * (len(nvidia) + len(_PURE) + 1)
    fixed = sum(len(d.files) for d in nvidia) + _fixed_elves() + extra_libs + 1 + per_dist
    py_total = max(0, params["files"] - fixed)
    pure = [
        Dist(name=n, version="1.0", files=_py_files(n, int(py_total * share)))
        for n, share in _PURE.items()
    ]
    torch_py = py_total - sum(len(d.files) for d in pure)
    return (_torch(max(0, torch_py), extra_libs), *nvidia, *pure)


def _steps(params: Mapping[str, int]) -> tuple[Step, ...]:
    install = Step(
        action="install", packages=(f"{TORCH}=={TORCH_VERSION}", *(f"{n}==1.0" for n in _PURE))
    )
    size = params["sparse_mib"] * 1024 * 1024
    grow = tuple(
        Step(action="grow", path=f"{{site}}/{path}", size=size, dist=dist)
        for dist, path in _SPARSE_TARGETS[: params["sparse_libs"]]
        if size
    )
    return (install, *grow)


def generate_large(spec: Scenario, params: Mapping[str, int]) -> Scenario:
    """Fill ``spec`` with the distributions and steps for ``params``."""
    return spec.model_copy(update={"dist": _dists(params), "steps": _steps(params)})
