"""PostgreSQL with 1-8 worker processes (many workers): a hook into `tools/bench_workers.py`.

That module is written separately; its `run(quick: bool) -> list[dict]` measures committed
decisions per second with 1, 2, 4 and 8 workers and returns one row per measurement. The
harness calls it in a fresh process when it exists and shows its rows as they come; when it
does not exist yet, the report says so (HOOK below) instead of failing.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from tools.bench.runner import Case, Config, Scenario, Timing

MODULE = "tools.bench_workers"


def available() -> bool:
    try:
        return importlib.util.find_spec(MODULE) is not None
    except (ImportError, ValueError):
        return False


def run_workers(t: Timing, quick: bool) -> None:
    """Call tools.bench_workers.run(quick) and keep its rows for the report."""
    module = importlib.import_module(MODULE)
    with t.measure():
        rows: list[dict[str, Any]] = list(module.run(quick))
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
    if not available():
        # HOOK: once tools/bench_workers.py exists with run(quick: bool) -> list[dict],
        # this scenario runs it; nothing else needs to change here.
        return Scenario(
            name="workers", title="PostgreSQL with 1-8 workers", intro=intro, cases=[],
            tables=[], notes=["**Not measured yet (hook):** `tools/bench_workers.py` does not "
                              "exist in this checkout; the harness calls its "
                              "`run(quick: bool) -> list[dict]` as soon as it does."])
    case = Case("workers", "tools.bench_workers.run", "workers:run_workers",
                {"quick": cfg.quick}, 1, unit="runs", runs=1, needs=frozenset({"pg"}))
    return Scenario(name="workers", title="PostgreSQL with 1-8 workers", intro=intro,
                    cases=[case], tables=[],
                    notes=["Rows as returned by `tools.bench_workers.run`; it measures and "
                           "judges its own targets."])
