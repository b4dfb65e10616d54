"""Selectors over installed names, and the small readers of files in an environment: RECORD
digests, dist-info metadata and installer files, script shebangs."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

import pytest

from cudafix.env.distinfo import (
    CoreMetadata,
    direct_url,
    in_some_dist_info,
    is_installer_file,
    parse_metadata,
)
from cudafix.env.hashing import HashCache, encode_digest, hash_bytes, hash_path
from cudafix.env.inventory import Unmanaged
from cudafix.env.scripts import Shebang, read_shebangs
from cudafix.model.errors import UsageError
from cudafix.model.names import DistName, EnvPath
from cudafix.plan.select import select

INSTALLED = [
    DistName(n)
    for n in (
        "nvidia-cudnn-cu12",
        "nvidia-cudnn-cu13",
        "nvidia-nccl-cu13",
        "nvidia-cublas-cu12",
        "torch",
        "jax-cuda12-plugin",
    )
]


@pytest.mark.parametrize(
    ("selectors", "exclude", "chosen"),
    [
        (["torch"], [], ("torch",)),
        (["TORCH"], [], ("torch",)),
        (["nvidia_cudnn_cu12"], [], ("nvidia-cudnn-cu12",)),
        (["nvidia.cudnn.cu12"], [], ("nvidia-cudnn-cu12",)),
        (["nvidia-*-cu12"], [], ("nvidia-cublas-cu12", "nvidia-cudnn-cu12")),
        (["*cu13"], [], ("nvidia-cudnn-cu13", "nvidia-nccl-cu13")),
        (["nvidia-cudnn-cu1?"], [], ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13")),
        (["nvidia-cudnn-cu1[3]"], [], ("nvidia-cudnn-cu13",)),
        (["*"], ["nvidia-*", "jax*"], ("torch",)),
        (["torch", "torch", "to*"], [], ("torch",)),
        (["nvidia-*"], ["*"], ()),
        (["nvidia-*-cu13"], ["nomatch-at-all"], ("nvidia-cudnn-cu13", "nvidia-nccl-cu13")),
    ],
)
def test_selectors_match_normalised_names_sorted(
    selectors: list[str], exclude: list[str], chosen: tuple[str, ...]
) -> None:
    assert select(INSTALLED, selectors, exclude) == chosen


def test_nothing_selected_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no distributions selected"):
        select(INSTALLED, [])


@pytest.mark.parametrize(
    ("selector", "context"),
    [
        ("nvidia-cudnn-cu14", "did you mean nvidia-cudnn-cu13"),
        ("torhc", "did you mean torch"),
        ("zzzzzz", "no similar names installed"),
    ],
)
def test_an_unmatched_selector_names_near_misses(selector: str, context: str) -> None:
    with pytest.raises(UsageError) as info:
        select(INSTALLED, ["torch", selector])
    assert repr(selector) in info.value.message
    assert len(info.value.context) == 1 and context in info.value.context[0]


def test_an_unmatched_selector_naming_an_unmanaged_install_says_why() -> None:
    unmanaged = [
        Unmanaged(EnvPath("site/oldpkg-1.0.egg-info"), "OldPkg", "egg-info"),
        Unmanaged(EnvPath("site/bare-2.dist-info"), "bare", "no-record"),
    ]
    with pytest.raises(UsageError) as info:
        select(INSTALLED, ["oldpkg", "bare"], unmanaged=unmanaged)
    assert info.value.context[0].startswith("oldpkg: not managed: site/oldpkg-1.0.egg-info")
    assert "egg-info install" in info.value.context[0]
    assert "has no RECORD" in info.value.context[1]


VERSIONS = {DistName("torch"): "2.5.1", DistName("nvidia-cudnn-cu12"): "9.1.0"}


@pytest.mark.parametrize(
    ("selector", "chosen"),
    [("torch==2.5.1", ("torch",)), ("torch == 2.5.1", ("torch",)), ("TORCH==2.5.1", ("torch",))],
)
def test_name_equals_version_selects_the_installed_version(
    selector: str, chosen: tuple[str, ...]
) -> None:
    assert select(INSTALLED, [selector], versions=VERSIONS) == chosen


def test_name_equals_another_version_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        select(INSTALLED, ["torch==2.4.0"], versions=VERSIONS)
    assert "torch 2.5.1" in info.value.message


# --- hashing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"x", b"\x00" * 65537, os.urandom(1000)])
def test_record_digest_is_urlsafe_unpadded_sha256(data: bytes) -> None:
    expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert hash_bytes(data) == expected == encode_digest(hashlib.sha256(data).digest())
    assert "=" not in expected and "+" not in expected and "/" not in expected


def test_hash_path_never_follows_a_final_symlink(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"abc")
    (tmp_path / "l").symlink_to("f")
    assert hash_path(tmp_path / "f") == hash_bytes(b"abc")
    assert hash_path(tmp_path / "l") is None
    assert hash_path(tmp_path / "absent") is None


def test_hash_cache_skips_directories_and_counts_what_it_read(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "empty").write_bytes(b"")
    (tmp_path / "full").write_bytes(b"123")
    cache = HashCache(tmp_path)
    assert cache(EnvPath("d")) is None
    assert cache(EnvPath("empty")) == hash_bytes(b"")
    assert cache(EnvPath("full")) == hash_bytes(b"123")
    assert cache(EnvPath("full")) == hash_bytes(b"123")  # the memo answers
    assert (cache.hashed, len(cache)) == (1, 2)  # empty files are not counted as reads


def test_hash_cache_reads_again_when_size_changes(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    cache = HashCache(tmp_path)
    assert cache(EnvPath("f")) == hash_bytes(b"one")
    path.write_bytes(b"longer")
    assert cache(EnvPath("f")) == hash_bytes(b"longer")


# --- dist-info -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "meta"),
    [
        (
            "Metadata-Version: 2.1\nName: torch\nVersion: 2.5.1\n"
            "Requires-Dist: filelock\nRequires-Dist: nvidia-cudnn-cu12==9.1.0.70; "
            'platform_system == "Linux"\n\nlong description\n',
            CoreMetadata(
                "torch",
                "2.5.1",
                ("filelock", 'nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux"'),
            ),
        ),
        ("Name: x\n", CoreMetadata("x", "", ())),
        ("", CoreMetadata()),
        ("garbage without headers", CoreMetadata()),
    ],
)
def test_metadata_is_read_leniently(text: str, meta: CoreMetadata) -> None:
    assert parse_metadata(text) == meta


@pytest.mark.parametrize(
    ("path", "installer"),
    [
        ("site/pa-1.dist-info/INSTALLER", True),
        ("site/pa-1.dist-info/RECORD", True),
        ("site/pa-1.dist-info/uv_cache.json", True),
        ("site/pa-1.dist-info/direct_url.json", True),
        ("site/pa-1.dist-info/METADATA", False),
        ("site/pb-1.dist-info/INSTALLER", False),
        ("site/pa-1.dist-info/sub/INSTALLER", False),
    ],
)
def test_installer_files_are_those_of_this_dist_info(path: str, installer: bool) -> None:
    assert is_installer_file(path, "site/pa-1.dist-info") is installer


@pytest.mark.parametrize(
    ("path", "inside"),
    [
        ("site/pa-1.dist-info/METADATA", True),
        ("site/pa-1.dist-info/licenses/LICENSE", True),
        ("site/pa/mod.py", False),
        ("site/pa-1.dist-info", False),
        ("x.dist-info", False),
    ],
)
def test_in_some_dist_info_looks_at_the_directories_only(path: str, inside: bool) -> None:
    assert in_some_dist_info(path) is inside


@pytest.mark.parametrize(
    ("content", "url"),
    [
        ('{"url": "file:///w/pa-1.whl", "archive_info": {}}', "file:///w/pa-1.whl"),
        ('{"url": ""}', None),
        ('{"url": 3}', None),
        ("[1]", None),
        ("{not json", None),
    ],
)
def test_direct_url(tmp_path: Path, content: str, url: str | None) -> None:
    (tmp_path / "pa-1.dist-info").mkdir()
    (tmp_path / "pa-1.dist-info" / "direct_url.json").write_text(content)
    assert direct_url(tmp_path, "pa-1.dist-info") == url
    assert direct_url(tmp_path, "absent.dist-info") is None


def test_direct_url_is_not_read_through_a_symlink_leaving_the_environment(tmp_path: Path) -> None:
    prefix, outside = tmp_path / "env", tmp_path / "outside.json"
    (prefix / "pa-1.dist-info").mkdir(parents=True)
    outside.write_text('{"url": "file:///planted"}')
    (prefix / "pa-1.dist-info" / "direct_url.json").symlink_to(outside)
    assert direct_url(prefix, "pa-1.dist-info") is None


# --- shebangs --------------------------------------------------------------------------------


def test_shebangs_name_the_interpreter_and_whether_it_exists(tmp_path: Path) -> None:
    import sys

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    scripts = {
        "ok": f"#!{sys.executable}\nprint()\n".encode(),
        "args": b"#!/usr/bin/env python3 -u\n",
        "gone": b"#!/old/venv/bin/python\n",
        "plain": b"print()\n",
        "empty": b"#!\n",
        "long": b"#!" + b"/x" * 400 + b"\n",
    }
    for name, data in scripts.items():
        (bin_ / name).write_bytes(data)
    (bin_ / "link").symlink_to("ok")
    paths = [EnvPath(f"bin/{n}") for n in [*scripts, "link", "absent"]]
    assert read_shebangs(tmp_path, paths) == {
        "bin/ok": Shebang(sys.executable, True),
        "bin/args": Shebang("/usr/bin/env", True),
        "bin/gone": Shebang("/old/venv/bin/python", False),
        "bin/long": Shebang(("/x" * 255)[:510], False),
    }
