"""The quick look at a METADATA's Name and Version agrees with the full parse, or declines."""

from __future__ import annotations

import random

import pytest

from cudafix.env.distinfo import name_and_version, parse_metadata

PLAIN = "Metadata-Version: 2.1\nName: torch\nVersion: 2.14.1\nSummary: x\n\nName: not a header\n"


@pytest.mark.parametrize(
    "text",
    [
        PLAIN,
        PLAIN.replace("\n", "\r\n"),
        "Metadata-Version: 2.4\nname:   Foo_Bar  \nVERSION: 1.0.post1\nRequires-Dist: a\n",
        "Name: a\nVersion: 1\nDescription: line one\n  line two folded\n\nbody\n",
        "Name: a\nVersion: 1",  # no blank line, no final newline
    ],
)
def test_what_it_reads_is_what_the_full_parse_reads(text: str) -> None:
    quick = name_and_version(text)
    assert quick is not None
    full = parse_metadata(text)
    assert (quick.name, quick.version) == (full.name, full.version)


@pytest.mark.parametrize(
    "text",
    [
        "Name: a\nName: b\nVersion: 1\n",  # twice
        "Name: a\n",  # no Version
        "Name:\n  folded-name\nVersion: 1\n",  # folded onto the next line
        "Name: =?utf-8?q?a?=\nVersion: 1\n",  # an encoded word
        "Name: a\x0cb\nVersion: 1\n",  # a separator the email parser does not end lines at
        "Name a\nVersion: 1\n",  # not a header line
    ],
)
def test_anything_but_plain_headers_is_left_to_the_full_parse(text: str) -> None:
    assert name_and_version(text) is None


def test_random_headers_read_alike() -> None:
    """Where the quick look answers, over random header blocks, it answers as the full
    parse does (spaces, tabs, case, order, folding, repeats, line endings)."""
    rng = random.Random(37)
    keys = ["Name", "name", "NAME", "Version", "version", "Summary", "Name ", "Requires-Dist"]
    values = ["a", " a", "a ", "\ta", "1.0", " 2.0\t", "x y", "", "é"]
    ends = ["\n", "\r\n", "\r"]
    answered = 0
    for _ in range(3000):
        end = rng.choice(ends)
        lines = []
        for _ in range(rng.randint(1, 6)):
            if lines and rng.random() < 0.15:
                lines.append(" " + rng.choice(values))  # folded
            else:
                lines.append(f"{rng.choice(keys)}:{rng.choice(values)}")
        text = end.join(lines) + end + (end + "Name: body" if rng.random() < 0.3 else "")
        quick = name_and_version(text)
        if quick is None:
            continue
        answered += 1
        full = parse_metadata(text)
        assert (quick.name, quick.version) == (full.name, full.version), repr(text)
    assert answered > 100  # the comparison above was made, often
