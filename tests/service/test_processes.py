"""Real `gpu-credits serve` processes driven over loopback by several client processes.

- one service on SQLite, several clients;
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
import signal
import sys
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
