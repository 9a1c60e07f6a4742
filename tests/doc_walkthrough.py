"""A docs page's console walk-through, run and compared with the page (or rewritten).

Shared by the command line's page (docs/cli.md) and the HTTP service's (docs/http.md):
in each block a `$ ` line is a command and the lines after it are its output. With
GPU_CREDITS_DOCS_UPDATE=1 the page is rewritten with the outputs seen instead of
compared; read its diff before committing it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

UPDATE_ENV = "GPU_CREDITS_DOCS_UPDATE"

# Given a block (its match has a group named "body"): how to run one of its command
# lines, returning the output lines; None when the block holds no commands to run.
BlockRunner = Callable[[re.Match[str]], Callable[[str], list[str]] | None]


@dataclass
class Command:
    """One `$ ` line of a block and the output the page shows for it."""

    line: str
    expected: list[str] = field(default_factory=list)


def commands(body: str) -> list[Command]:
    """The commands of a block, each with the lines after it (trailing blanks dropped)."""
    found: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            found.append(Command(line[2:]))
        elif found:
            found[-1].expected.append(line.rstrip())
    for command in found:
        command.expected = output_lines(command.expected)
    return found


def output_lines(lines: list[str] | str) -> list[str]:
    """Lines as the page shows them: no trailing spaces, no blank lines at the end."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    kept = [line.rstrip() for line in lines]
    while kept and not kept[-1]:
        kept.pop()
    return kept


def check_walkthrough(doc: Path, blocks: re.Pattern[str], runner: BlockRunner) -> None:
    """Run every block of `doc` that `blocks` matches, in order; assert each command's
    output is the one shown (or, with GPU_CREDITS_DOCS_UPDATE=1, rewrite the page)."""
    text = doc.read_text(encoding="utf-8")
    pieces: list[str] = []
    cursor = 0
    failures: list[str] = []
    for match in blocks.finditer(text):
        run = runner(match)
        if run is None:
            continue
        rebuilt: list[str] = []
        for command in commands(match.group("body")):
            got = run(command.line)
            rebuilt += [f"$ {command.line}", *got]
            if got != command.expected:
                failures.append(f"$ {command.line}\n--- expected\n" + "\n".join(
                    command.expected) + "\n--- got\n" + "\n".join(got))
        pieces.append(text[cursor:match.start("body")] + "\n".join(rebuilt) + "\n")
        cursor = match.end("body")
    pieces.append(text[cursor:])
    if os.environ.get(UPDATE_ENV):
        doc.write_text("".join(pieces), encoding="utf-8")
        return
    assert not failures, f"{doc.name} is out of date:\n\n" + "\n\n".join(failures)
