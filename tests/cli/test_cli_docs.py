"""docs/cli.md runs: its commands are executed in order and their output compared.

- ```jsonl file=NAME blocks (and csv, json) are written to NAME in a scratch folder;
- ```console blocks: each `$ ` line is a command (`export VAR=value`, or `gpu-credits ...`,
  optionally `> FILE` and a trailing `# exit N`); the lines after it are its output
  (stdout and stderr), compared line by line at 120 columns.

To refresh the outputs after a deliberate change: GPU_CREDITS_DOCS_UPDATE=1 pytest this
file, then read the diff of docs/cli.md before committing it.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tools.cli import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
BLOCK = re.compile(r"```(\w+)([^\n]*)\n(.*?)```", re.DOTALL)
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")


@dataclass
class Command:
    line: str
    expected: list[str] = field(default_factory=list)


def _commands(body: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append(Command(line[2:]))
        elif commands:
            commands[-1].expected.append(line.rstrip())
    for c in commands:
        while c.expected and not c.expected[-1]:
            c.expected.pop()
    return commands


def _run(command: Command, env: dict[str, str], cwd: Path) -> tuple[list[str], int]:
    text = command.line
    code = 0
    if match := EXIT.search(text):
        code = int(match.group(1))
        text = text[: match.start()]
    words = shlex.split(text)
    if words[0] == "export":
        name, _, value = words[1].partition("=")
        env[name] = value
        return [], 0
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
    lines = [line.rstrip() for line in output.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines, code


def test_the_walk_through_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPU_CREDITS_DB", raising=False)
    text = DOC.read_text()
    env: dict[str, str] = {}
    updated: list[str] = []
    cursor = 0
    failures: list[str] = []
    for match in BLOCK.finditer(text):
        lang, info, body = match.group(1), match.group(2), match.group(3)
        if lang in ("jsonl", "csv", "json") and "file=" in info:
            name = info.split("file=", 1)[1].split()[0]
            (tmp_path / name).write_text(body)
            continue
        if lang != "console":
            continue
        rebuilt: list[str] = []
        for command in _commands(body):
            actual, _ = _run(command, env, tmp_path)
            rebuilt += [f"$ {command.line}", *actual]
            if actual != command.expected:
                failures.append(f"$ {command.line}\n--- expected\n" + "\n".join(
                    command.expected) + "\n--- got\n" + "\n".join(actual))
        start = match.start(3)
        updated.append(text[cursor:start] + "\n".join(rebuilt) + "\n")
        cursor = match.end(3)
    updated.append(text[cursor:])
    if os.environ.get("GPU_CREDITS_DOCS_UPDATE"):
        DOC.write_text("".join(updated))
        return
    assert not failures, "docs/cli.md is out of date:\n\n" + "\n\n".join(failures)
