"""Replay's CPU time beside the raw drivers', the fold compiled and from its source.

On a shared machine wall time measures the neighbours; the CPU time of a case's own
process (`time.process_time`) much less so. Each case runs in a fresh process, the cases
alternate round after round, and the table gives medians:

    python -m tools.bench.cpu --events 1000000 --rounds 2 --workdir /tmp/bench
    python -m tools.bench.cpu ... --kind sqlite --case replay   # one journal, one case

The journals (the realistic mix, on SQLite and on a PostgreSQL schema from
$GPU_CREDITS_BENCH_PG, else the local test database) are written first when missing.
The "pure" cases run with GPU_CREDITS_PURE_PYTHON=1 (`projections.native`). The database
server's time is in neither side of a PostgreSQL ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.bench.storage import (
    create_schema,
    drop_schema,
    libpq_dsn,
    pg_base_url,
    pg_version,
    remove_sqlite,
    schema_url,
    sqlite_url,
)

CASES = ("raw", "fold", "fold pure", "replay", "replay pure")
KINDS = ("sqlite", "pg")


def _paths(workdir: str, n: int) -> tuple[str, str]:
    return str(Path(workdir) / f"cpu-mix-{n}.db"), f"bench_cpu_mix{n}"


def build(workdir: str, n: int, pg: str | None) -> None:
    """Write the mix of n events on SQLite (and PostgreSQL) where it is not there yet."""
    from eventstore import Journal
    from tools.bench.workload import append_mix, realistic_mix

    path, schema = _paths(workdir, n)
    targets = [("sqlite", sqlite_url(path))] + ([("pg", schema_url(pg, schema))] if pg else [])
    for kind, url in targets:
        if kind == "sqlite" and Path(path).exists():
            journal = Journal(url)
            if journal.head() == n:
                journal.close()
                continue
            journal.close()
            remove_sqlite(path)
        if kind == "pg":
            assert pg is not None
            try:
                journal = Journal(url)
                done = journal.head() == n
                journal.close()
                if done:
                    continue
            except Exception:  # no such schema yet
                pass
            drop_schema(pg, schema)
            create_schema(pg, schema)
        print(f"writing the {n:,}-event mix on {kind} ...", file=sys.stderr, flush=True)
        journal = Journal(url)
        append_mix(journal, realistic_mix(n), 1000)
        journal.close()


def one(case: str, kind: str, workdir: str, n: int, pg: str | None) -> dict[str, Any]:
    """Run one case in this process: its CPU and wall time, peak RSS and digest. Each
    side is timed once open: the raw read once connected (its driver imported), ours
    once the journal is."""
    path, schema = _paths(workdir, n)
    if case == "raw":
        import sqlite3

        from tools.bench import rawdb

        if kind == "sqlite":
            conn: Any = sqlite3.connect(path)
            read: Any = rawdb.sqlite_read_decode
        else:
            assert pg is not None
            conn = rawdb.pg_connect(libpq_dsn(pg), schema, create=False)
            read = rawdb.pg_read_decode
        cpu, wall = time.process_time(), time.perf_counter()
        read(conn)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        conn.close()
        return {"cpu": cpu, "wall": wall, "digest": "", "rss": _rss()}
    from eventstore import Journal
    from projections.replay import fold_canonical, replay

    if kind == "sqlite":
        journal = Journal(sqlite_url(path))
    else:
        assert pg is not None
        journal = Journal(schema_url(pg, schema))
    journal.head()
    cpu, wall = time.process_time(), time.perf_counter()
    ledger = fold_canonical(journal) if case.startswith("fold") else replay(journal).ledger
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    digest = ledger.digest()[:16]
    journal.close()
    return {"cpu": cpu, "wall": wall, "digest": digest, "rss": _rss()}


def _rss() -> float:
    # VmHWM, not ru_maxrss: that one carries over the peak of the process that started
    # this one (main's, which wrote the journals), whatever the case itself used.
    from tools.bench.runner import peak_rss_mb

    return peak_rss_mb()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/bench")
    parser.add_argument("--kind", action="append", choices=KINDS,
                        help="only this journal (repeatable; default: both)")
    parser.add_argument("--case", action="append", choices=CASES[1:],
                        help="only this case beside raw (repeatable; default: all)")
    parser.add_argument("--one", nargs=2, metavar=("CASE", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:  # a case's own process: the parent checked the database answers
        print(json.dumps(one(args.one[0], args.one[1], args.workdir, args.events,
                             pg_base_url())))
        return 0
    pg = pg_base_url() if pg_version(pg_base_url()) is not None else None
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    build(args.workdir, args.events, pg)
    kinds = [k for k in KINDS if (k == "sqlite" or pg is not None)
             and (args.kind is None or k in args.kind)]
    cases = [c for c in CASES if c == "raw" or args.case is None or c in args.case]
    results: dict[tuple[str, str], list[dict[str, Any]]] = {
        (k, c): [] for k in kinds for c in cases}
    loads = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for kind, case in results:
            env = {k: v for k, v in os.environ.items() if k != "GPU_CREDITS_PURE_PYTHON"}
            if case.endswith("pure"):
                env["GPU_CREDITS_PURE_PYTHON"] = "1"
            done = subprocess.run(
                [sys.executable, "-m", "tools.bench.cpu", "--events", str(args.events),
                 "--workdir", args.workdir, "--one", case, kind],
                env=env, capture_output=True, text=True, check=True)
            results[kind, case].append(json.loads(done.stdout.splitlines()[-1]))
            loads.append(os.getloadavg()[0])
    print(f"{args.events:,} events, {args.rounds} rounds, load average "
          f"{min(loads):.1f} to {max(loads):.1f}\n")
    print("| case | CPU (median) | wall | peak RSS | against raw (CPU) | digest |")
    print("|---|---:|---:|---:|---:|---|")
    for (kind, case), runs in results.items():
        cpu = statistics.median(r["cpu"] for r in runs)
        raw = statistics.median(r["cpu"] for r in results[kind, "raw"])
        ratio = "" if case == "raw" else f"{raw / cpu:.3f}x"
        digests = ", ".join(sorted({r["digest"] for r in runs if r["digest"]}))
        print(f"| {kind} {case} | {cpu:.2f} s | {statistics.median(r['wall'] for r in runs):.2f}"
              f" s | {max(r['rss'] for r in runs):.0f} MB | {ratio} | {digests} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
