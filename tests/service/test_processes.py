"""Real `gpu-credits serve` processes driven over loopback by several client processes.

- one service on SQLite, several clients;
- two services on one SQLite file (a rolling restart's overlap), with the command line
  writing on the same file (an import of late events, finance's grants and usage
  reports, a replay saving checkpoints) while clients pick a service at random;
- two replicas on one PostgreSQL journal, clients picking a replica at random: afterwards
  an independent model (the concurrency tests' `check_linearizable`) re-decides every
  command in canonical order and compares it with the fold and with what each client was
  told: the replicas' group commits must be as if every decision had taken its turn;
- SIGKILL of a replica while clients keep deciding: no acknowledged decision is lost, and
  retrying every key (acknowledged or not) on a fresh replica records each exactly once.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from eventstore import Journal
from tests.service import http_kit, server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "concurrency"))
from concurrency_kit import check_linearizable

# Multi-process, like the journal's and the concurrency tests: `make test` and CI run them,
# the quick landing gate does not. (How the kill test's clients read an answer the kill
# cut short is tested on its own in test_http_kit.py.)
pytestmark = pytest.mark.slow

CLIENTS = 3
OPS = 40


def _run_clients(bases: list[str], tmp_path: Path) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    outs = [tmp_path / f"client-{i}.json" for i in range(CLIENTS)]
    procs = [ctx.Process(target=http_kit.client, args=(bases, i, OPS, 1000 + i, str(out)))
             for i, out in enumerate(outs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        assert p.exitcode == 0, f"client exited with {p.exitcode}"
    results = [json.loads(out.read_text()) for out in outs]
    for result in results:
        assert "crash" not in result, result.get("crash")
        assert result["problems"] == []
        assert not any(s.startswith("5") for s in result["statuses"]), result["statuses"]
    return results


def _check(url: str, results: list[dict[str, Any]]) -> None:
    with Journal(url) as journal:
        problems = check_linearizable(journal, [r["told"] for r in results])
        assert problems == [], "\n".join(problems[:20])
        assert journal.verify() is None


def test_one_service_on_sqlite_many_clients(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    one = server.start(url, tmp_path / "serve.log")
    try:
        http_kit.open_accounts(one.base)
        results = _run_clients([one.base], tmp_path)
        status, ready = http_kit.call(one.base, "GET", "/readyz")
        assert status == 200 and ready["decisions"] >= len(http_kit.ACCOUNTS) * 2
    finally:
        # SIGTERM: a graceful stop (uvicorn then ends by the signal it was sent).
        assert one.stop() in (0, -signal.SIGTERM)
    assert "stopped: " in (tmp_path / "serve.log").read_text()
    _check(url, results)
    log = (tmp_path / "serve.log").read_text()
    assert '"path": "/v1/jobs"' in log  # structured access logs


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([server.GPU_CREDITS, "--db", url, *args], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, env=dict(os.environ),
                          timeout=300)


def _late_file(path: Path, lines: int) -> Path:
    """Grants, then usage reports, on accounts of their own, all timed a month before
    now: each one late, placed before everything the services recorded."""
    start = int(time.time()) - 30 * 86400
    accounts = [f"imported-{i}" for i in range(10)]
    rows = [{"type": "grant", "account": a, "amount": 10**6, "time": start} for a in accounts]
    rows += [{"type": "consume", "account": accounts[k % 10], "amount": 1 + k % 3,
              "time": start + 1 + k} for k in range(lines - len(rows))]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_two_services_and_the_command_line_on_one_sqlite_file(tmp_path: Path) -> None:
    """Two `serve` processes on one SQLite file (a rolling restart's overlap, or two left
    running), the command line writing beside them: every decision is as if each had
    taken its turn, no client is answered 5xx, every command succeeds, and the services,
    caught up, answer what a fresh command reads; `verify` passes, the replay's
    checkpoint among what it checks. (What a command deciding behind another process's
    import holds the lock for, and what it says when it cannot record the verified mark,
    is tested on its own: tests/projections/test_import_ids.py,
    tests/cli/test_cli_import_export.py; here the timing is the processes'.)"""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with server.running(url, tmp_path / "a.log") as a, \
            server.running(url, tmp_path / "b.log") as b:
        http_kit.open_accounts(a.base)
        imported = _cli(url, "import", str(_late_file(tmp_path / "late.jsonl", 3000)))
        assert imported.returncode == 0, imported.stderr
        assert "3,000 late" in imported.stdout
        for i, base in enumerate((a.base, b.base)):  # no read in between: a write first
            status, answer = http_kit.call(base, "POST", "/v1/accounts/acct-a/usage",
                                           {"amount": 1}, key=f"after-import-{i}")
            assert status == 201, answer
        finance: list[subprocess.CompletedProcess[str]] = []

        def finance_at_work() -> None:
            finance.append(_cli(url, "grant", "finance", "500", "--id", "fin-open"))
            for n in range(4):
                finance.append(_cli(url, "consume", "finance", "7", "--id", f"fin-c{n}"))
            finance.append(_cli(url, "replay"))
            finance.append(_cli(url, "grant", "finance", "5", "--id", "fin-more"))

        worker = threading.Thread(target=finance_at_work)
        worker.start()
        results = _run_clients([a.base, b.base], tmp_path)
        worker.join()
        for done in finance:
            assert done.returncode == 0, (done.args, done.stderr)
        listed = _cli(url, "accounts", "--json")
        assert listed.returncode == 0, listed.stderr
        time.sleep(0.2)  # a read looks at the journal again after 50 ms
        for row in json.loads(listed.stdout)["accounts"]:
            path = f"/v1/accounts/{row['account']}/balance"
            for base in (a.base, b.base):
                status, answer = http_kit.call(base, "GET", path)
                assert status == 200, answer
                assert (answer["balance"], answer["reserved"], answer["debt"]) == (
                    row["balance"], row["reserved"], row["debt"]), (base, row)
    _check(url, results)
    verified = _cli(url, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "replay reproduces" in verified.stdout


@pytest.mark.postgres
def test_two_replicas_on_one_postgres_journal(tmp_path: Path, pg_fresh_url: str) -> None:
    with server.running(pg_fresh_url, tmp_path / "a.log") as a, \
            server.running(pg_fresh_url, tmp_path / "b.log") as b:
        http_kit.open_accounts(a.base)
        results = _run_clients([a.base, b.base], tmp_path)
        # Both replicas caught up (a read looks at the journal again after 50 ms): they
        # answer the same balances.
        time.sleep(0.2)
        for account in http_kit.ACCOUNTS:
            path = f"/v1/accounts/{account}/balance"
            assert http_kit.call(a.base, "GET", path) == http_kit.call(b.base, "GET", path)
    _check(pg_fresh_url, results)


@pytest.mark.postgres
def test_sigkill_mid_batch_loses_no_acknowledged_decision(tmp_path: Path,
                                                          pg_fresh_url: str) -> None:
    ctx = mp.get_context("spawn")
    victim = server.start(pg_fresh_url, tmp_path / "victim.log")
    try:
        http_kit.open_accounts(victim.base)
        outs = [tmp_path / f"usage-{i}.json" for i in range(4)]
        procs = [ctx.Process(target=http_kit.usage_client,
                             args=(victim.base, i, 100_000, str(out)))
                 for i, out in enumerate(outs)]
        for p in procs:
            p.start()
        # Let the clients get going, then kill the replica without warning.
        deadline = time.monotonic() + 60
        with Journal(pg_fresh_url) as journal:
            while journal.head() < 60 and time.monotonic() < deadline:
                time.sleep(0.05)
        victim.stop(signal.SIGKILL)
        for p in procs:
            p.join(120)
    finally:
        if victim.process.poll() is None:
            victim.process.kill()
    results = [json.loads(out.read_text()) for out in outs]
    acked = {k: v for r in results for k, v in r["acked"].items()}
    unanswered = [k for r in results for k in r["unanswered"]]
    assert len(acked) > 20
    with Journal(pg_fresh_url) as journal:
        for key in acked:
            assert journal.get(key) is not None, f"acknowledged {key} was lost"
    with server.running(pg_fresh_url, tmp_path / "after.log") as fresh:
        for i, key in enumerate([*acked, *unanswered]):
            worker, number = key.split("-")[1:]
            n = int(number)
            account = http_kit.ACCOUNTS[n % len(http_kit.ACCOUNTS)]
            status, answer = http_kit.call(fresh.base, "POST", f"/v1/accounts/{account}/usage",
                                           {"amount": 1 + n % 5}, key)
            assert status == 201, (key, status, answer)
            if key in acked:
                assert answer["debt"] == acked[key], (i, key)
            assert worker
    with Journal(pg_fresh_url) as journal:
        ids = [r.id for r in journal.read(order="position")]
        assert len(ids) == len(set(ids))
        for key in [*acked, *unanswered]:
            assert ids.count(key) == 1
        assert journal.verify() is None
