"""The fleet recipes shipped in ``examples/fleet/``, read as text (no YAML parser is a
dependency): ``make e2e-real`` (``benchmarks/e2e_fleet.py``) runs them on a real ansible-core;
these checks keep them and docs/fleet.md honest where Ansible is not installed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import click
import pytest

from benchmarks.e2e_fleet_hpc import dshbak_groups, fenced, json_lines, swap
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


# The pdsh and Slurm recipes: ``benchmarks/e2e_fleet_hpc.py`` runs them on a real pdsh and
# Slurm; these keep them parseable where neither is installed.

SAMPLE = """# Title

## First

```sh
one
```

### Inside first

```sh
two
three
```

## Second

```sh
four
```
"""


def test_fenced_reads_a_section_and_its_subsections_only() -> None:
    assert fenced(SAMPLE, "## First") == ["one\n", "two\nthree\n"]
    assert fenced(SAMPLE, "### Inside") == ["two\nthree\n"]
    assert fenced(SAMPLE, "## Second") == ["four\n"]


def test_swap_replaces_and_refuses_a_recipe_that_changed() -> None:
    assert swap("pdsh -w 'gpu[001-064]'", {"gpu[001-064]": "gpu[001-003]"}) == (
        "pdsh -w 'gpu[001-003]'"
    )
    with pytest.raises(ValueError, match="not in the recipe"):
        swap("pdsh -w 'gpu[001-064]'", {"/shared/plans/plan.json": "plan.json"})


def test_dshbak_groups_and_json_lines(tmp_path: Path) -> None:
    text = "----------------\ngpu[001,003]\n----------------\nHealthy: no problems found.\n"
    text += "----------------\ngpu002\n----------------\n10 problem(s) found.\nNext: x\n"
    assert dshbak_groups(text) == {
        "gpu[001,003]": "Healthy: no problems found.",
        "gpu002": "10 problem(s) found.\nNext: x",
    }
    lines = tmp_path / "results.jsonl"
    lines.write_text('{"host": "a", "exit": 0}\n{"host": "b", "exit": 3, "result": {\n}}\n')
    assert json_lines(lines) == (
        [{"host": "a", "exit": 0}],
        ['{"host": "b", "exit": 3, "result": {', "}}"],
    )


def words_of(block: str) -> list[str]:
    """A recipe's shell words, its line continuations joined."""
    return shlex.split(block.replace("\\\n", " "))


def node_commands() -> dict[str, str]:
    """What each recipe hands a node's shell: pdsh's last argument, srun's ``bash -c`` body."""
    text = DOC.read_text()
    doctor, apply = (words_of(b) for b in fenced(text, "## pdsh"))
    script = fenced(text, "## Slurm")[0]
    srun = words_of(script.split("\nsrun ", 1)[1])
    return {
        "pdsh doctor": doctor[doctor.index("|") - 1],
        "pdsh apply": apply[apply.index(">") - 1],
        "srun apply": srun[srun.index("-c") + 1],
    }


def test_the_doc_s_shell_recipes_parse() -> None:
    text = DOC.read_text()
    script = fenced(text, "## Slurm")[0]
    assert script.startswith("#!/bin/bash\n#SBATCH ")
    blocks = [script, *fenced(text, "## Slurm")[1:], *fenced(text, "## pdsh")]
    for block in blocks:
        done = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert done.returncode == 0, (block, done.stderr)
    for where, command in node_commands().items():
        done = subprocess.run(["sh", "-n", "-c", command], capture_output=True, text=True)
        assert done.returncode == 0, (where, done.stderr)


def test_pdsh_and_slurm_write_the_same_line_with_one_cudafix_command() -> None:
    """One ``{"host", "exit", "result"}`` line per node from either, so one ``jq`` reads both;
    each cudafix command is one the CLI accepts."""
    commands = node_commands()
    assert commands["pdsh apply"] == commands["srun apply"]
    assert 'tr -d "\\n"' in commands["srun apply"]
    for where, command in commands.items():
        found = re.search(r"cudafix (\w+) ([^<)\n]*)", command)
        assert found, where
        subcommand = cli.commands[found[1]]
        known = {o for param in subcommand.params for o in (*param.opts, *param.secondary_opts)}
        flags = [w for w in found[2].split() if w.startswith("-")]
        assert flags and all(f in known for f in flags), (where, flags)
