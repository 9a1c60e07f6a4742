"""Shared constants and helpers of the command-line tests (fixtures are in conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from contract.kit import Run
from typer.testing import Result

from eventstore import Journal

ROOT = Path(__file__).resolve().parents[2]

# A small month by hand: expiring pools, a partial refund, rejections, debt.
SMALL = """\
{"type": "account", "account": "a", "max_running": 1}
{"type": "account", "account": "b"}
{"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 10, "pool": "h100"}
{"type": "grant", "account": "a", "amount": 50, "time": 2, "expiry": 5}
{"type": "consume", "account": "a", "amount": 70, "time": 3, "pool": "h100"}
{"type": "grant", "account": "b", "amount": 30, "time": 1}
{"type": "submit", "account": "a", "job": "j1", "cost": 8, "priority": 1, "time": 4, "pool": "h100"}
{"type": "submit", "account": "a", "job": "j2", "cost": 5, "priority": 1, "time": 4}
{"type": "submit", "account": "b", "job": "j3", "cost": 500, "priority": 1, "time": 4}
{"type": "start", "job": "j1", "time": 5}
{"type": "complete", "job": "j1", "success": false, "time": 9, "refund_fraction": 0.5}
{"type": "consume", "account": "b", "amount": 40, "time": 11}
"""

# Recorded after SMALL, placed before its consume at t=3: a late grant.
LATE = """\
{"type": "grant", "account": "a", "amount": 40, "time": 1, "expiry": 4, "id": "late-grant"}
"""



def imported(run: Run, path: Path, text: str) -> Path:
    """Write `text` to `path` and import it into the test's database; returns `path`."""
    path.write_text(text)
    result = run("import", str(path))
    assert result.exit_code == 0, result.stderr
    return path


def journal_head(url: str) -> int:
    """The last position of the journal at `url`, opened for this one question."""
    journal = Journal(url)
    try:
        return journal.head()
    finally:
        journal.close()


def as_json(result: Result) -> object:
    """The JSON a --json command printed."""
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def error_lines(result: Result) -> list[str]:
    """stderr as lines; every error is one line."""
    return result.stderr.splitlines()


def cli(*args: str, cwd: Path, stdin: bytes | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """gpu-credits as a real process (python -m tools.cli)."""
    full_env = {k: v for k, v in os.environ.items() if k != "GPU_CREDITS_DB"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "tools.cli", *args], cwd=cwd,
        input=None if stdin is None else stdin.decode(), capture_output=True, text=True,
        env=full_env, timeout=120, check=False)


def tamper(path: Path, position: int, old: str, new: str) -> None:
    """Change one payload of the SQLite file behind the journal's back."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        (payload,) = conn.execute("SELECT payload FROM events WHERE position = ?",
                                  (position,)).fetchone()
        assert old in payload, payload
        conn.execute("UPDATE events SET payload = ? WHERE position = ?",
                     (payload.replace(old, new, 1), position))
        conn.commit()
    finally:
        conn.close()


def db_path(url: str) -> Path:
    """The file of a sqlite:/// URL."""
    return Path(url.removeprefix("sqlite:///"))


def lines_of(text: str) -> Sequence[str]:
    """Non-empty lines."""
    return [line for line in text.splitlines() if line.strip()]
