"""docs/http.md runs: its curl commands are sent to a real `gpu-credits serve` process and
their output compared with the page.

- ```console blocks: each `$ ` line is a shell command (run with `$BASE` set to the
  service's address, in a scratch folder); the lines after it are its output.
- ```console server=secured blocks go to a second service started with tokens.

To refresh the outputs after a deliberate change: GPU_CREDITS_DOCS_UPDATE=1 pytest this
file, then read the diff of docs/http.md before committing it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.service import server

DOC = Path(__file__).resolve().parents[2] / "docs" / "http.md"
BLOCK = re.compile(r"```console([^\n]*)\n(.*?)```", re.DOTALL)
TOKENS = ("worker:w0rker-secret-token-1\nfinance:f1nance-secret-token-1\n"
          "auditor:aud1tor-secret-token-1\n")

pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("jq") is None,
                                reason="the walk-through needs curl and jq")


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


def _run(line: str, base: str, cwd: Path) -> list[str]:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "BASE": base}, timeout=60, check=False)
    assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stderr}"
    lines = [x.rstrip() for x in (done.stdout + done.stderr).splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def test_the_walk_through_runs(tmp_path: Path) -> None:
    text = DOC.read_text(encoding="utf-8")
    (tmp_path / "tokens.txt").write_text(TOKENS)
    update = bool(os.environ.get("GPU_CREDITS_DOCS_UPDATE"))
    pieces: list[str] = []
    last = 0
    mismatches: list[str] = []
    with server.running(f"sqlite:///{tmp_path / 'open.db'}", tmp_path / "open.log") as plain, \
            server.running(f"sqlite:///{tmp_path / 'secured.db'}", tmp_path / "secured.log",
                           "--tokens", str(tmp_path / "tokens.txt")) as secured:
        for match in BLOCK.finditer(text):
            base = secured.base if "server=secured" in match.group(1) else plain.base
            out: list[str] = []
            for command in _commands(match.group(2)):
                got = _run(command.line, base, tmp_path)
                if got != command.expected:
                    mismatches.append(f"$ {command.line}\n  expected: {command.expected}\n"
                                      f"  got:      {got}")
                out.append(f"$ {command.line}")
                out.extend(got)
            pieces.append(text[last:match.start(2)])
            pieces.append("\n".join(out) + "\n")
            last = match.end(2)
    pieces.append(text[last:])
    if update:
        DOC.write_text("".join(pieces), encoding="utf-8")
        return
    assert not mismatches, "docs/http.md differs from the service:\n" + "\n".join(mismatches)
