"""Eight worker processes, random decisions on five shared accounts with tight balances.

Afterwards the journal must be as if the workers had taken turns: gapless, chained,
every command re-decided in canonical order by an independent model agrees with the
fold and with what the workers were told, nothing was revised, and every worker's final
view is the replay digest. Size: $GPU_CREDITS_STRESS_OPS operations per worker (default
200: about 40 s on PostgreSQL, 15 s on SQLite on two cores; a full-size run is 2000).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import pytest
from concurrency_kit import check_linearizable, open_accounts, stress_ops, stress_worker

from eventstore import Journal
from projections.replay import fold_canonical, replay, verify

pytestmark = pytest.mark.slow

SPAWN = mp.get_context("spawn")
WORKERS = 8


def run_workers(url: str, tmp_path: Path, workers: int, ops: int,
                seed: int = 20261129) -> list[dict[str, Any]]:
    """Spawn the workers, start them together, wait, and return their reports."""
    go = SPAWN.Event()
    done = SPAWN.Barrier(workers)
    outs = [tmp_path / f"worker-{w}.json" for w in range(workers)]
    procs = [
        SPAWN.Process(target=stress_worker,
                      args=(url, w, ops, seed + w, str(outs[w]), go, done))
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(3600)
    reports = [json.loads(o.read_text()) if o.exists() else {} for o in outs]
    crashes = [r["crash"] for r in reports if "crash" in r]
    assert not crashes, crashes[0]
    assert [p.exitcode for p in procs] == [0] * workers
    return reports


def test_workers_decide_as_if_they_took_turns(database_url: str, tmp_path: Path) -> None:
    open_accounts(database_url)
    ops = stress_ops()
    began = time.monotonic()
    reports = run_workers(database_url, tmp_path, WORKERS, ops)
    elapsed = time.monotonic() - began
    journal = Journal(database_url)
    try:
        head = journal.head()
        positions = [e.position for e in journal.read(order="position")]
        assert positions == list(range(1, head + 1)), "the journal has a hole"
        assert journal.verify() is None, "the hash chain does not verify"
        assert verify(journal).ok

        problems = check_linearizable(journal, [r["told"] for r in reports])
        assert problems == [], "\n".join(problems[:20])

        report = replay(journal)
        assert report.revisions == [], f"live decisions were revised: {report.revisions[:3]}"
        assert report.anomalies == []
        assert fold_canonical(journal).digest() == report.digest
        for r in reports:
            assert r["problems"] == [], r["problems"]
            assert set(r["digests"]) == {report.digest}, f"worker {r['worker']} sees otherwise"
        refused: dict[str, int] = {}
        for r in reports:
            for k, v in r["refused"].items():
                refused[k] = refused.get(k, 0) + v
        rejected = sum(1 for r in reports for ok in r["told"]["submits"].values() if not ok)
        busiest = max(r["seconds"] for r in reports)
        print(f"\n{database_url.split(':')[0]}: {WORKERS} workers x {ops} ops in {elapsed:.1f} s "
              f"(slowest worker {busiest:.1f} s); {head} events; {rejected} submits rejected; "
              f"refused {refused}; {sum(r['retries'] for r in reports)} retries")
    finally:
        journal.close()
