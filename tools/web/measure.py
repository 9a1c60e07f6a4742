"""`python -m tools.web.measure URL PATH...`: how long the web view takes to answer,
server-side, as medians.

Opens the service's app (`gpu-credits serve`'s) on the journal at URL, waits for the
background search of revisions, then asks each PATH `--runs` times as a first visit
(everything the pages remember let go first: the answers, the accounts' events and
folds), as often after the head moved (only the answers let go, as a write to another
account does: the accounts' events and folds are kept) and as often again (remembered
until the head moves), through FastAPI's TestClient. Prints the
median, fastest and slowest milliseconds of each; the median CPU milliseconds the process
spent (what the page costs, whatever else the machine is doing); and the time the cyclic
garbage collector took per request.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from typing import Any


class GcClock:
    """Seconds spent in the cyclic garbage collector since the last `take()`."""

    def __init__(self) -> None:
        self.spent = 0.0
        self._began = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.spent += time.perf_counter() - self._began

    def take(self) -> float:
        spent, self.spent = self.spent, 0.0
        return spent


def timed(client: Any, path: str) -> tuple[int, float, float]:
    """Status, milliseconds and CPU milliseconds (of the whole process) of one GET."""
    began, cpu = time.perf_counter(), time.process_time()
    status: int = client.get(path).status_code
    return status, (time.perf_counter() - began) * 1000, (time.process_time() - cpu) * 1000


def compare_folds(journal: Any, account: str, runs: int) -> None:
    """The account page's folds the way it did them before (`statement`, `explain_account`
    and `account_timeline`, each reading the account's stream) against `account_history`
    (one read, one fold), in this run: medians of wall and CPU milliseconds, and the
    ratio."""
    from projections.queries import explain_account, latest_time, statement
    from projections.queries.history import account_history
    from projections.timeline import account_timeline
    from tools.web.source import JournalView

    view: Any = JournalView(journal, None, account)

    def three() -> None:
        until = statement(view, account).to_time
        explain_account(view, account)
        account_timeline(view.read(to_time=until, order="canonical"), account, until=until)

    def one() -> None:
        events = list(view.read(order="position"))
        account_history(events, account, at=latest_time(journal), as_known_at=journal.head(),
                        private=journal.private)

    found: dict[str, tuple[float, float]] = {}
    for label, work in (("three folds", three), ("one fold", one)):
        walls, cpus = [], []
        for _ in range(runs):
            began, cpu = time.perf_counter(), time.process_time()
            work()
            walls.append((time.perf_counter() - began) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
        found[label] = statistics.median(walls), statistics.median(cpus)
        print(f"{label:12} {found[label][0]:7.0f} ms  cpu {found[label][1]:7.0f} ms  "
              f"({account}, {runs} runs)", flush=True)
    (old_wall, old_cpu), (new_wall, new_cpu) = found["three folds"], found["one fold"]
    print(f"one fold / three folds: {new_wall / old_wall:.2f} (wall), "
          f"{new_cpu / old_cpu:.2f} (cpu)", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Time each path; print one line per path and kind of visit."""
    from fastapi.testclient import TestClient

    from tools.web.browsing import app_for

    # The docstring's first paragraph whole: its first line alone stopped mid-sentence.
    parser = argparse.ArgumentParser(prog="python -m tools.web.measure",
                                     description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("url", help="the journal's database URL")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="pages to ask for")
    parser.add_argument("--runs", type=int, default=5, help="visits of each kind per path")
    parser.add_argument("--baseline", metavar="ACCOUNT",
                        help="also time ACCOUNT's folds the old way (three) and the new (one)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    began = time.perf_counter()
    app = app_for(args.url)
    with TestClient(app) as client:
        print(f"service ready in {time.perf_counter() - began:.1f} s", flush=True)
        began = time.perf_counter()
        client.get("/journal")
        source = app.state.web_source
        source.wait_for_revisions()
        print(f"revisions found in {time.perf_counter() - began:.1f} s "
              f"(head {source.head():,}); {args.runs} runs each, milliseconds", flush=True)
        print(f"{'status':6} {'visit':5} {'median':>7} {'fastest':>7} {'slowest':>7} "
              f"{'cpu':>6} {'gc':>6}  path", flush=True)
        clock = GcClock()
        for path in args.paths:
            for visit in ("first", "moved", "again"):
                took, cpus, statuses = [], [], set()
                if visit != "first":
                    client.get(path)  # remembered now, whatever ran before
                clock.take()
                for _ in range(args.runs):
                    if visit == "first":
                        source.forget()
                    elif visit == "moved":
                        source.forget(answers_only=True)
                    status, ms, cpu = timed(client, path)
                    statuses.add(status)
                    took.append(ms)
                    cpus.append(cpu)
                gc_ms = clock.take() * 1000 / args.runs
                shown = ",".join(str(s) for s in sorted(statuses))
                print(f"{shown:6} {visit:5} {statistics.median(took):7.0f} {min(took):7.0f} "
                      f"{max(took):7.0f} {statistics.median(cpus):6.0f} {gc_ms:6.0f}  {path}",
                      flush=True)
        if args.baseline:
            compare_folds(source.journal, args.baseline, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
