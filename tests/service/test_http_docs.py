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
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.doc_walkthrough import check_walkthrough, output_lines
from tests.service import server

DOC = Path(__file__).resolve().parents[2] / "docs" / "http.md"
BLOCK = re.compile(r"```console(?P<info>[^\n]*)\n(?P<body>.*?)```", re.DOTALL)
TOKENS = ("worker:w0rker-secret-token-1\nfinance:f1nance-secret-token-1\n"
          "auditor:aud1tor-secret-token-1\n")

pytestmark = pytest.mark.skipif(shutil.which("curl") is None or shutil.which("jq") is None,
                                reason="the walk-through needs curl and jq")


def _run(line: str, base: str, cwd: Path) -> list[str]:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "BASE": base}, timeout=60, check=False)
    assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stderr}"
    return output_lines(done.stdout + done.stderr)


def test_the_walk_through_runs(tmp_path: Path) -> None:
    (tmp_path / "tokens.txt").write_text(TOKENS)
    with server.running(f"sqlite:///{tmp_path / 'open.db'}", tmp_path / "open.log") as plain, \
            server.running(f"sqlite:///{tmp_path / 'secured.db'}", tmp_path / "secured.log",
                           "--tokens", str(tmp_path / "tokens.txt")) as secured:

        def runner(block: re.Match[str]) -> Callable[[str], list[str]]:
            base = secured.base if "server=secured" in block.group("info") else plain.base
            return lambda line: _run(line, base, tmp_path)

        check_walkthrough(DOC, BLOCK, runner)
