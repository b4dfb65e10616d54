"""The fleet recipes shipped in ``examples/fleet/``, read as text (no YAML parser is a
dependency): ``make e2e-real`` (``benchmarks/e2e_fleet.py``) runs them on a real ansible-core;
these checks keep them and docs/fleet.md honest where Ansible is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from cudafix.cli.main import cli
from cudafix.model.errors import ExitCode

REPO = Path(__file__).resolve().parents[2]
FLEET = REPO / "examples" / "fleet"
DOC = REPO / "docs" / "fleet.md"
BOOKS = sorted(FLEET.rglob("*.yml"))

MODULE = re.compile(r"^\s*(?:- )?([a-z_]+\.[a-z_]+\.[a-z_]+):", re.M)
CUDAFIX_ARGV = re.compile(r"^\s*argv: .*\+ \[([^\]]*)\]", re.M)
EXIT_TEST = re.compile(r"\.rc (?:not in|in|==|!=) (\[[\d, ]*\]|\d+)")


def cudafix_lines() -> list[tuple[str, list[str]]]:
    """(file, the words after the cudafix command) for every ``argv:`` of the recipes."""
    return [
        (p.name, re.findall(r"'([^']*)'", m[1]))
        for p in BOOKS
        for m in CUDAFIX_ARGV.finditer(p.read_text())
    ]


def test_the_recipes_are_shipped() -> None:
    names = {p.relative_to(FLEET).as_posix() for p in BOOKS}
    assert {
        "site.yml",
        "apply-plan.yml",
        "roles/cudafix/tasks/main.yml",
        "roles/cudafix/defaults/main.yml",
    } <= names


def test_only_ansible_core_builtin_modules() -> None:
    """ansible-core alone runs them: no collection (``community.general``) is needed."""
    used = {m for p in BOOKS for m in MODULE.findall(p.read_text())}
    assert {"ansible.builtin.command", "ansible.builtin.copy", "ansible.builtin.assert"} <= used
    assert all(m.startswith("ansible.builtin.") for m in used), used
    for text in [DOC.read_text(), *(p.read_text() for p in BOOKS)]:
        assert "community." not in text


def test_every_cudafix_command_line_is_one_the_cli_accepts() -> None:
    """A subcommand cudafix has, options it takes, and ``--json``: the play parses stdout."""
    lines = cudafix_lines()
    assert {words[0] for _f, words in lines} == {"doctor", "repair", "apply"}, lines
    for where, words in lines:
        command = cli.commands[words[0]]
        known = {o for param in command.params for o in (*param.opts, *param.secondary_opts)}
        assert isinstance(command, click.Command)
        for word in words[1:]:
            assert not word.startswith("-") or word in known, (where, word)
        assert "--json" in words, (where, words)
        if words[0] != "doctor":
            assert "--yes" in words or "--dry-run" in words, (where, words)


def test_every_exit_code_a_recipe_tests_is_a_documented_one() -> None:
    codes = {
        int(n)
        for p in BOOKS
        for m in EXIT_TEST.finditer(p.read_text())
        for n in re.findall(r"\d+", m[1])
    }
    assert codes == {ExitCode.OK, ExitCode.FAILURE, ExitCode.REFUSED}, codes
    cli_doc = (REPO / "docs" / "cli.md").read_text()
    for code in ExitCode:
        assert f"\n| {int(code)} |" in cli_doc


def test_the_doc_quotes_the_shipped_files_verbatim() -> None:
    """Every YAML block of docs/fleet.md's Ansible section is a run of lines of a recipe."""
    section = DOC.read_text().split("## Ansible\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(blocks) >= 2
    shipped = [p.read_text() for p in BOOKS]
    for block in blocks:
        assert any(block in text for text in shipped), block
    for path in re.findall(r"examples/fleet/[\w./-]+\.yml", section):
        assert (REPO / path).is_file(), path
