"""Committed decisions per second on PostgreSQL with 1, 2, 4 and 8 worker processes.

`python -m tools.bench_workers [--quick]`, or `run(quick)` from the benchmark harness
(`tools/bench/workers.py`). Three workloads, each with 1, 2, 4 and 8 processes started
together and run for the same window:

- **hot account**: every worker submits jobs to one account through `Scheduler.submit`
  (lock the account, catch up on the others' events, decide, append, commit): the
  decisions take turns on one advisory lock;
- **100 accounts**: the same, each decision on a random one of 100 accounts: decisions
  wait for each other only at the journal head row during their short append;
- **raw psycopg**: one `INSERT` + `COMMIT` per transaction into a plain table with a
  BIGSERIAL key, no decision and no projection: what the driver and server give.

Targets (many workers): spread over accounts, throughput rises with workers up to the
machine's cores; on the hot account it stays at least half the single-writer rate.
Each measurement runs in a fresh schema (`bench_<run>_workers_...`), dropped afterwards.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import sys
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from typing import Any

from tools.bench.storage import (
    create_schema,
    drop_schema,
    libpq_dsn,
    new_schema_name,
    pg_base_url,
    schema_url,
)

WORKERS = (1, 2, 4, 8)
ACCOUNTS = 100
HOT = "hot"
WORKLOADS = ("hot account", f"{ACCOUNTS} accounts", "raw psycopg insert")
SPAWN = mp.get_context("spawn")


def _window(seconds: float, seed: int, ready: Queue[int], go: Event,
            out: Queue[tuple[int, float]], commit: Callable[[int], object]) -> None:
    """Say ready, wait for the common start, then `commit(n)` for n = 0, 1, ... until
    `seconds` have passed; report (commits, seconds taken)."""
    ready.put(seed)
    go.wait()
    began = time.monotonic()
    deadline = began + seconds
    n = 0
    while time.monotonic() < deadline:
        commit(n)
        n += 1
    out.put((n, time.monotonic() - began))


def _decide_worker(url: str, accounts: list[str], seconds: float, seed: int,
                   ready: Queue[int], go: Event, out: Queue[tuple[int, float]]) -> None:
    """Submit jobs on random `accounts` until the window closes; report (commits, secs)."""
    from eventstore import Journal
    from projections import Scheduler

    rng = random.Random(seed)
    scheduler = Scheduler(Journal(url, lock_timeout=60))
    scheduler.ledger()  # opened and caught up before the window starts
    _window(seconds, seed, ready, go, out,
            lambda n: scheduler.submit(f"w{seed}-{n}", rng.choice(accounts), 1, 0))


def _raw_worker(url: str, seconds: float, seed: int, ready: Queue[int], go: Event,
                out: Queue[tuple[int, float]]) -> None:
    """One INSERT and one COMMIT per transaction, until the window closes."""
    import psycopg

    with psycopg.connect(libpq_dsn(url)) as conn:

        def insert(_: int) -> None:
            conn.execute("INSERT INTO raw_events (worker, payload) VALUES (%s, %s)",
                         (seed, '{"account":"a","amount":1}'))
            conn.commit()

        _window(seconds, seed, ready, go, out, insert)


def _prepare(workload: str, url: str, tag: str) -> list[str]:
    """Create what the workload needs in its fresh schema; the accounts it decides on."""
    if workload == WORKLOADS[2]:
        import psycopg

        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            conn.execute("CREATE TABLE raw_events (id BIGSERIAL PRIMARY KEY, "
                         "worker INT NOT NULL, payload TEXT NOT NULL)")
        return []
    from eventstore import Journal
    from projections import Scheduler

    # Advisory lock keys are database-wide, not per schema: names of this measurement's
    # own keep other schemas' decisions (another run, a test) off its locks.
    if workload == WORKLOADS[0]:
        accounts = [f"{HOT}-{tag}"]
    else:
        accounts = [f"acct-{i:03d}-{tag}" for i in range(ACCOUNTS)]
    with Journal(url) as journal:
        scheduler = Scheduler(journal)
        for name in accounts:
            scheduler.open_account(name, 10**12)
    return accounts


def measure(workload: str, workers: int, seconds: float, base: str) -> dict[str, Any]:
    """One measurement: `workers` processes on `workload` for `seconds`, in a new schema."""
    schema = new_schema_name("workers")
    create_schema(base, schema)
    url = schema_url(base, schema)
    try:
        accounts = _prepare(workload, url, schema.rsplit("_", 1)[-1])
        ready: Queue[int] = SPAWN.Queue()
        go = SPAWN.Event()
        out: Queue[tuple[int, float]] = SPAWN.Queue()
        procs = []
        for w in range(workers):
            if accounts:
                args: tuple[Any, ...] = (url, accounts, seconds, w, ready, go, out)
                procs.append(SPAWN.Process(target=_decide_worker, args=args))
            else:
                args = (url, seconds, w, ready, go, out)
                procs.append(SPAWN.Process(target=_raw_worker, args=args))
        for p in procs:
            p.start()
        # Every worker opens its journal and catches up before the window opens.
        for _ in procs:
            ready.get(timeout=300)
        go.set()
        results = [out.get(timeout=seconds + 300) for _ in procs]
        for p in procs:
            p.join(60)
            if p.exitcode != 0:
                raise RuntimeError(f"{workload}: a worker exited with {p.exitcode}")
        commits = sum(n for n, _ in results)
        window = max(s for _, s in results)
        return {"workload": workload, "workers": workers, "commits": commits,
                "seconds": round(window, 2), "per_second": commits / window}
    finally:
        drop_schema(base, schema)


def judge(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add each row's ratio to its single-worker rate, the target, and whether it is met."""
    cores = os.cpu_count() or 1
    one = {r["workload"]: r["per_second"] for r in rows if r["workers"] == 1}
    for r in rows:
        base = one.get(r["workload"])
        ratio = r["per_second"] / base if base else float("nan")
        r["vs_1_worker"] = round(ratio, 2)
        if r["workload"] == WORKLOADS[0]:
            r["target"] = ">= 0.5 x 1 worker"
            r["met"] = "yes" if ratio >= 0.5 else "NO"
        elif r["workload"] == WORKLOADS[1]:
            if r["workers"] == 1:
                r["target"], r["met"] = "baseline", "-"
            elif r["workers"] <= cores:
                r["target"] = "> previous worker count"
                prev = [x for x in rows if x["workload"] == r["workload"]
                        and x["workers"] < r["workers"]]
                r["met"] = "yes" if r["per_second"] > max(x["per_second"] for x in prev) else "NO"
            else:
                r["target"] = f"(beyond {cores} cores: no target)"
                r["met"] = "-"
        else:
            r["target"], r["met"] = "(baseline)", "-"
        r["per_second"] = round(r["per_second"], 1)
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    """Every workload with 1, 2, 4 and 8 workers; one row each, judged against the targets."""
    seconds = 3.0 if quick else 10.0
    base = pg_base_url()
    rows = []
    for workload in WORKLOADS:
        for workers in WORKERS:
            row = measure(workload, workers, seconds, base)
            print(f"{workload:>20}  {workers} workers  {row['per_second']:8.1f} /s",
                  file=sys.stderr, flush=True)
            rows.append(row)
    return judge(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_workers",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 s windows instead of 10 s")
    args = parser.parse_args(argv)
    rows = run(args.quick)
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r[k]) for k in keys) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
