"""A `gpu-credits serve` and the command line on one SQLite file, as a small team runs
them: finance's commands decide beside the service, and the service's next decision
takes them into account; an import killed in the middle leaves none of its file."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.service import http_kit, server

pytestmark = pytest.mark.slow


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([server.GPU_CREDITS, "--db", url, *args], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, env=dict(os.environ),
                          timeout=120, check=False)


def test_the_services_next_decision_sees_what_a_command_just_recorded(
        tmp_path: Path) -> None:
    """No pause between the command and the request: a write of the service catches up
    under the write lock before it decides."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with server.running(url, tmp_path / "serve.log") as one:
        status, _ = http_kit.call(one.base, "POST", "/v1/accounts", {"account": "team"})
        assert status == 201
        for n in range(3):
            granted = _cli(url, "grant", "team", "10", "--id", f"g{n}")
            assert granted.returncode == 0, granted.stderr
            status, answer = http_kit.call(one.base, "POST", "/v1/jobs", {
                "job": f"paid-{n}", "account": "team", "cost": 10, "priority": 1})
            assert (status, answer["accepted"]) == (201, True), answer
            taken = _cli(url, "grant", "team", "10", "--id", f"taken-back-{n}")
            assert taken.returncode == 0, taken.stderr
            reversed_ = _cli(url, "reverse", f"taken-back-{n}", "--reason", "sent twice")
            assert reversed_.returncode == 0, reversed_.stderr
            status, answer = http_kit.call(one.base, "POST", "/v1/jobs", {
                "job": f"unpaid-{n}", "account": "team", "cost": 10, "priority": 1})
            assert (status, answer["accepted"]) == (201, False), answer
        status, balance = http_kit.call(one.base, "GET", "/v1/accounts/team/balance")
        assert (balance["balance"], balance["reserved"], balance["available"]) == (30, 30, 0)
    verified = _cli(url, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def _holds_write_lock(path: Path) -> bool:
    """Whether another process holds the SQLite file's write lock now."""
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    finally:
        if probe.in_transaction:
            probe.rollback()
        probe.close()
    return False


def test_an_import_killed_while_it_appends_leaves_none_of_its_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    assert _cli(url, "grant", "team", "5", "--id", "before").returncode == 0
    lines = 12_000
    source = tmp_path / "usage.jsonl"
    source.write_text("".join(
        json.dumps({"type": "consume", "account": f"team-{k % 7}", "amount": 1,
                    "time": 1_000 + k}) + "\n" for k in range(lines)))
    importing = subprocess.Popen([server.GPU_CREDITS, "--db", url, "import", str(source)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                 stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _holds_write_lock(path):
            assert importing.poll() is None, "the import ended before it took the lock"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        importing.send_signal(signal.SIGKILL)
    finally:
        importing.wait(30)
    assert importing.returncode == -signal.SIGKILL
    verified = _cli(url, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert _cli(url, "head").stdout.startswith("1:")  # none of the file
    again = _cli(url, "import", str(source))
    assert again.returncode == 0, again.stderr
    assert f"appended {lines:,} events, 0 already present" in again.stdout
    once_more = _cli(url, "import", str(source))
    assert f"appended 0 events, {lines:,} already present" in once_more.stdout
    assert _cli(url, "head").stdout.startswith(f"{lines + 1}:")
    assert _cli(url, "verify").returncode == 0
