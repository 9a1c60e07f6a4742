"""PostgreSQL with 1-8 worker processes (many workers), measured by `tools/bench_workers.py`.

`tools.bench_workers.run(quick: bool) -> list[dict]` measures committed decisions per
second with 1, 2, 4 and 8 workers and returns one row per measurement; the harness calls
it, through `run_workers` here, in a fresh process and shows its rows as they come.
"""

from __future__ import annotations

from typing import Any

from tools.bench.runner import Case, Config, Scenario, Timing


def run_workers(t: Timing, quick: bool) -> None:
    """Call tools.bench_workers.run(quick) and keep its rows for the report."""
    from tools import bench_workers

    with t.measure():
        rows: list[dict[str, Any]] = list(bench_workers.run(quick))
    t.note("table", [dict(r) for r in rows])


def scenario(cfg: Config) -> Scenario:
    intro = (
        "Committed decisions per second on PostgreSQL with 1, 2, 4 and 8 worker processes, "
        "(a) all on one hot account and (b) spread over 100 accounts, beside psycopg's raw "
        "one-transaction-per-insert rate, measured by `tools/bench_workers.py` "
        "(`run(quick) -> list[dict]`). Targets (many workers): spread over accounts, throughput "
        "rises with workers up to the machine's cores; on one hot account it stays at least "
        "half the single-writer rate."
    )
    case = Case("workers", "tools.bench_workers.run", "workers:run_workers",
                {"quick": cfg.quick}, 1, unit="runs", runs=1, needs=frozenset({"pg"}))
    return Scenario(name="workers", title="PostgreSQL with 1-8 workers", intro=intro,
                    cases=[case], tables=[],
                    notes=["Rows as returned by `tools.bench_workers.run`; it measures and "
                           "judges its own targets."])
