"""Names as types: which strings are distribution names, selectors, module names, EnvPaths,
sonames, and how they normalise (PEP 503) and read for people."""

from __future__ import annotations

import pytest

from cudafix.model.names import (
    cuda_major,
    is_dist_name,
    is_env_path,
    is_module_name,
    is_selector,
    is_so_name,
    normalize_name,
    site_relative,
    split_dist_info_name,
)


@pytest.mark.parametrize(
    "name",
    ["torch", "nvidia-cudnn-cu12", "Nvidia_CUDNN.cu12", "a", "7", "zope.interface", "A-1_b.2"],
)
def test_dist_names_accepted(name: str) -> None:
    assert is_dist_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "-torch",
        "torch-",
        "--target=/elsewhere",
        "../x",
        "/abs/path",
        "torch>=2",
        "torch[cuda]",
        "pkg @ https://x/y.whl",
        "two words",
        "nvidia-*-cu13",
        "tab\tname",
        "name\n",
    ],
)
def test_option_paths_urls_and_requirements_are_not_dist_names(name: str) -> None:
    """A name from a plan file reaches uv's argv: none of these may pass as one."""
    assert not is_dist_name(name)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("torch", True),
        ("nvidia-*-cu13", True),
        ("*", True),
        ("nvidia-cu1[23]", True),
        ("lib?", True),
        ("[!a]*", True),
        ("-x", False),
        ("--venv", False),
        ("", False),
        ("a b", False),
        ("a/b", False),
        ("torch==2", False),
    ],
)
def test_selectors_are_names_or_globs_never_options(text: str, ok: bool) -> None:
    assert is_selector(text) is ok


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("torch", True),
        ("jax.numpy", True),
        ("_private", True),
        ("a.b.c", True),
        ("1torch", False),
        ("torch.", False),
        (".torch", False),
        ("os; import shutil", False),
        ("a-b", False),
        ("", False),
    ],
)
def test_module_names_are_dotted_identifiers(name: str, ok: bool) -> None:
    """Probes import the name as code: only identifiers joined by dots may pass."""
    assert is_module_name(name) is ok


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("lib/python3.11/site-packages/x.py", True),
        ("bin/tool", True),
        ("a", True),
        ("..a/b", True),
        ("", False),
        ("/abs", False),
        ("..", False),
        ("../x", False),
        (".", False),
        ("./x", False),
        ("a/./b", False),
        ("a//b", False),
        ("a/b/", False),
        ("a/../b", False),
        ("a\x00b", False),
    ],
)
def test_env_path_is_relative_normal_and_inside(path: str, ok: bool) -> None:
    assert is_env_path(path) is ok


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("Nvidia_CUDNN.cu12", "nvidia-cudnn-cu12"),
        ("zope.interface", "zope-interface"),
        ("a__b--c..d", "a-b-c-d"),
        ("A-_.-B", "a-b"),
        ("torch", "torch"),
    ],
)
def test_normalize_name_is_pep503(raw: str, normal: str) -> None:
    assert normalize_name(raw) == normal
    assert normalize_name(normal) == normal  # idempotent


@pytest.mark.parametrize(
    ("name", "major"),
    [
        ("nvidia-cudnn-cu12", 12),
        ("nvidia_cudnn_cu13", 13),
        ("NVIDIA.NCCL.CU11", 11),
        ("cupy-cuda12x", None),
        ("nvidia-cu12-tools", None),
        ("torch", None),
        ("nvidia-cudnn-cu", None),
    ],
)
def test_cuda_major_reads_only_a_trailing_cu_suffix(name: str, major: int | None) -> None:
    assert cuda_major(name) == major


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("libcudnn.so", True),
        ("libcudnn.so.9", True),
        ("nvidia/cudnn/lib/libcudnn.so.9.1.0", True),
        ("_C.cpython-311-x86_64-linux-gnu.so", True),
        ("libfoo.so.bak.1", True),
        ("libfoo.sox", False),
        ("lib.so/readme.txt", False),
        ("libfoo.a", False),
        ("so", False),
    ],
)
def test_so_names_by_their_last_component(path: str, ok: bool) -> None:
    assert is_so_name(path) is ok


@pytest.mark.parametrize(
    ("dirname", "split"),
    [
        ("torch-2.5.1.dist-info", ("torch", "2.5.1")),
        ("Nvidia_CUDNN_cu12-9.1.0.70.dist-info", ("Nvidia_CUDNN_cu12", "9.1.0.70")),
        ("pkg-1.0-extra.dist-info", ("pkg", "1.0-extra")),
        ("torch.dist-info", None),
        ("-1.0.dist-info", None),
        ("torch-.dist-info", None),
        ("torch-2.5.1.egg-info", None),
        ("torch-2.5.1", None),
    ],
)
def test_split_dist_info_name_keeps_the_name_as_written(
    dirname: str, split: tuple[str, str] | None
) -> None:
    assert split_dist_info_name(dirname) == split


SITES = ("lib/python3.11/site-packages", "lib64/python3.11/site-packages")


@pytest.mark.parametrize(
    ("path", "prefix", "shown"),
    [
        ("lib/python3.11/site-packages/nvidia/x.so", "", "nvidia/x.so"),
        ("lib64/python3.11/site-packages/a.py", "", "a.py"),
        ("/venv/lib/python3.11/site-packages/a.py", "/venv", "a.py"),
        ("/venv/lib/python3.11/site-packages/a.py", "/venv/", "a.py"),
        ("/venv/bin/tool", "/venv", "bin/tool"),
        ("bin/tool", "", "bin/tool"),
        ("lib/python3.11/site-packagesX/a.py", "", "lib/python3.11/site-packagesX/a.py"),
        (
            "/other/lib/python3.11/site-packages/a.py",
            "/venv",
            "/other/lib/python3.11/site-packages/a.py",
        ),
    ],
)
def test_site_relative_strips_the_prefix_then_the_site_dir(
    path: str, prefix: str, shown: str
) -> None:
    assert site_relative(path, SITES, prefix) == shown
