"""docs/cli.md runs: its commands are executed in order and their output compared.

- ```jsonl file=NAME blocks (and csv, json) are written to NAME in a scratch folder;
- ```console blocks: each `$ ` line is a command (`export VAR=value`, or `gpu-credits ...`,
  optionally `> FILE` and a trailing `# exit N`); the lines after it are its output
  (stdout and stderr), compared line by line at 120 columns.

To refresh the outputs after a deliberate change: GPU_CREDITS_DOCS_UPDATE=1 pytest this
file, then read the diff of docs/cli.md before committing it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from tests.doc_walkthrough import check_walkthrough, output_lines
from tools.cli import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BLOCK = re.compile(r"```(?P<lang>\w+)(?P<info>[^\n]*)\n(?P<body>.*?)```", re.DOTALL)
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")


def _run(text: str, env: dict[str, str], cwd: Path) -> list[str]:
    code = 0
    if match := EXIT.search(text):
        code = int(match.group(1))
        text = text[: match.start()]
    words = shlex.split(text)
    if words[0] == "export":
        name, _, value = words[1].partition("=")
        env[name] = value
        return []
    assert words[0] == "gpu-credits", f"docs may only run gpu-credits: {text}"
    target = None
    if ">" in words:
        i = words.index(">")
        target, words = cwd / words[i + 1], words[:i]
    result = CliRunner().invoke(app, words[1:], env={**env, "COLUMNS": "120"})
    assert result.exit_code == code, f"{text}: exit {result.exit_code}\n{result.output}"
    if target is not None:
        target.write_text(result.stdout)
        output = result.stderr
    else:
        output = result.output
    return output_lines(output)


def test_the_walk_through_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPU_CREDITS_DB", raising=False)
    env: dict[str, str] = {}

    def runner(block: re.Match[str]) -> Callable[[str], list[str]] | None:
        lang, info, body = block.group("lang"), block.group("info"), block.group("body")
        if lang in ("jsonl", "csv", "json") and "file=" in info:
            name = info.split("file=", 1)[1].split()[0]
            (tmp_path / name).write_text(body)
            return None
        if lang != "console":
            return None
        return lambda line: _run(line, env, tmp_path)

    check_walkthrough(DOC, BLOCK, runner)


SINGLE_EVENT = ("grant", "consume", "adjust", "void", "reverse")


def _commands() -> list[tuple[str, list[str]]]:
    """Every command of the CLI, as typed after `gpu-credits`, with its long options."""
    found: list[tuple[str, list[str]]] = []

    def walk(group: object, prefix: str) -> None:
        for name, command in getattr(group, "commands", {}).items():
            if hasattr(command, "commands"):
                walk(command, f"{prefix}{name} ")
                continue
            options = [o for p in command.params for o in p.opts
                       if o.startswith("--") and o not in ("--help", "--db")]
            found.append((f"{prefix}{name}", options))

    walk(get_command(app), "")
    return found


def test_the_reference_names_every_command_and_its_options() -> None:
    text = DOC.read_text()
    reference = text[text.index("## Reference"):]
    rows = [line for line in reference.splitlines() if line.startswith("| `")]
    # The options every single-event command takes are named once, after the table.
    shared = reference[reference.index("The single-event commands also take"):]
    shared = shared[:shared.index("\n\n")]
    for name, options in _commands():
        row = [r for r in rows if r.startswith((f"| `{name} ", f"| `{name}`"))]
        assert row, f"no row for `{name}` in docs/cli.md's reference"
        named = row[0] + (shared if name in SINGLE_EVENT else "")
        assert [o for o in options if o not in named] == [], name
