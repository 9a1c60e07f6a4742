"""The benchmark harness at toy sizes, so it cannot rot. No timing is ever asserted.

- every scenario runs end to end (in this process) and the report names each one;
- one scenario runs the real way, each case in a spawned process;
- the plain baselines give the same answers as ours on the same work, so the ratios in
  docs/benchmarks.md compare like with like.

PostgreSQL cases use $GPU_CREDITS_TEST_PG when it is set (else they are skipped by the
harness itself); eventsourcing / matplotlib cases are skipped when the bench extra is not
installed.
"""

from __future__ import annotations

import csv
import os
from collections import deque
from pathlib import Path

import pytest

from tools.bench import __main__ as bench
from tools.bench.baselines import PlainScheduler, PlainTracker
from tools.bench.storage import PG_ENV, RUN_ENV
from tools.bench.workload import (
    BALANCE,
    CONSUME,
    GRANT,
    START,
    SUBMIT,
    realistic_mix,
    scheduler_ops,
    tracker_calls,
)

TITLES = ("Journal appends", "Full replay", "A late event", "GPUCreditTracker in memory",
          "Scheduler", "PostgreSQL with 1-8 workers", "The chain check",
          "Imports", "Late arrivals", "Reports from the command line")


@pytest.fixture
def bench_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RUN_ENV, "smoke" + os.urandom(2).hex())
    test_pg = os.environ.get("GPU_CREDITS_TEST_PG")
    if test_pg:
        monkeypatch.setenv(PG_ENV, test_pg)
    elif not os.environ.get(PG_ENV):
        monkeypatch.setenv(PG_ENV, "postgresql+psycopg://nobody@127.0.0.1:1/none")


# Each scenario with the title its report section has; run in three groups, so that the
# suite's workers share them (in one test they were its longest, two minutes under load).
SCENARIOS = {"appends": "Journal appends", "replay": "Full replay", "late": "A late event",
             "tracker": "GPUCreditTracker in memory", "scheduler": "Scheduler",
             "workers": "PostgreSQL with 1-8 workers", "chain": "The chain check",
             "imports": "Imports", "arrivals": "Late arrivals",
             "reports": "Reports from the command line"}
GROUPS = (("workers",), ("appends", "reports"),
          ("replay", "late", "tracker", "scheduler", "chain", "imports", "arrivals"))


def test_the_groups_cover_every_scenario_once() -> None:
    assert sorted(s for group in GROUPS for s in group) == sorted(SCENARIOS)
    assert sorted(SCENARIOS.values()) == sorted(TITLES)
    assert sorted(SCENARIOS) == sorted(bench.NAMES)


@pytest.mark.parametrize("group", GROUPS, ids=["-".join(g) for g in GROUPS])
def test_every_scenario_runs_at_toy_size(tmp_path: Path, bench_env: None,
                                        monkeypatch: pytest.MonkeyPatch,
                                        group: tuple[str, ...]) -> None:
    # The workers scenario's windows are timed, not sized: at 3 s each over 1, 2, 4 and 8
    # workers of three workloads they were most of this test's minute. One and two
    # workers in 0.2 s windows run the same code (spawned workers on each workload, the
    # table, the verdicts); judge() is checked on its own below.
    from tools import bench_workers

    measure = bench_workers.measure
    monkeypatch.setattr(bench_workers, "WORKERS", (1, 2))
    monkeypatch.setattr(bench_workers, "measure",
                        lambda workload, workers, _seconds, base:
                        measure(workload, workers, 0.2, base))
    out = tmp_path / "benchmarks.md"
    code = bench.main(["--toy", "--runs", "1", "--in-process", "--no-profile",
                       "--out", str(out), "--workdir", str(tmp_path / "work"),
                       "--only", *group])
    text = out.read_text()
    assert code == 0, text[text.find("## Errors"):]
    for scenario in group:
        assert f"## {SCENARIOS[scenario]}" in text
    for other in set(SCENARIOS) - set(group):
        assert f"## {SCENARIOS[other]}\n" not in text
    assert "| target | measured | verdict |" in text
    if "arrivals" in group:
        assert "arriving 1-20 events late" in text  # the late-arrivals replay table


def test_the_workers_verdicts_follow_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import bench_workers

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    hot, spread, raw = bench_workers.WORKLOADS
    rates = {(hot, 1): 100.0, (hot, 2): 40.0, (spread, 1): 100.0, (spread, 2): 150.0,
             (spread, 4): 120.0, (raw, 1): 500.0}
    rows = bench_workers.judge([{"workload": w, "workers": n, "per_second": r}
                                for (w, n), r in rates.items()])
    got = {(r["workload"], r["workers"]): (r["vs_1_worker"], r["target"], r["met"])
           for r in rows}
    assert got == {
        (hot, 1): (1.0, ">= 0.5 x 1 worker", "yes"),
        (hot, 2): (0.4, ">= 0.5 x 1 worker", "NO"),
        (spread, 1): (1.0, "baseline", "-"),
        (spread, 2): (1.5, "> previous worker count", "yes"),
        (spread, 4): (1.2, "(beyond 2 cores: no target)", "-"),
        (raw, 1): (1.0, "(baseline)", "-"),
    }


def test_late_arrivals_keep_every_event_and_delay_some() -> None:
    from tools.bench.workload import with_late_arrivals

    events = list(realistic_mix(3000))
    arrived = list(with_late_arrivals(iter(events), 0.05))
    assert sorted(e.id for e in arrived) == sorted(e.id for e in events)
    assert {e.id: e.time for e in arrived} == {e.id: e.time for e in events}
    latest = 0
    late = 0
    for e in arrived:
        late += e.time < latest
        latest = max(latest, e.time)
    assert late > 50  # about 5% of 3,000 arrive after a later event


def test_cases_run_in_their_own_processes(tmp_path: Path, bench_env: None) -> None:
    out = tmp_path / "benchmarks.md"
    code = bench.main(["--toy", "--runs", "1", "--only", "tracker", "--no-profile",
                       "--out", str(out), "--workdir", str(tmp_path / "work")])
    assert code == 0
    text = out.read_text()
    assert "## GPUCreditTracker in memory" in text
    assert "## Scheduler" not in text
    assert " MB |" in text  # peak RSS reported by each case's process


def test_plain_tracker_answers_like_the_facade() -> None:
    from projections import GPUCreditTracker

    ours, plain = GPUCreditTracker(journal=None), PlainTracker()
    for kind, amount, ts, expiry in tracker_calls(400):
        if kind == GRANT:
            ours.grant(amount, ts, expiry)
            plain.grant(amount, ts, expiry)
        elif kind == CONSUME:
            assert ours.consume(amount, ts) == plain.consume(amount, ts)
        else:
            assert kind == BALANCE
            assert ours.get_balance(ts) == plain.get_balance(ts)


def test_plain_scheduler_picks_like_the_fold() -> None:
    from projections import Ledger
    from projections.events import (
        AccountOpened,
        CreditsGranted,
        JobCompleted,
        JobStarted,
        JobSubmitted,
    )

    work = scheduler_ops(300, accounts=7, backlog=50)
    plain, ledger = PlainScheduler(), Ledger()
    pos = 0

    def apply(event: object) -> None:
        nonlocal pos
        pos += 1
        ledger.apply(pos, f"e{pos}", pos, event)  # type: ignore[arg-type]

    for name in work.accounts:
        plain.open_account(name, 10**9)
        apply(AccountOpened(name))
        apply(CreditsGranted(name, 10**9))
    running: deque[str] = deque()
    for op, arg in work.ops:
        if op == SUBMIT:
            job, account, cost, priority = work.jobs[arg]
            plain.submit(job, account, cost, priority)
            apply(JobSubmitted(account, job, cost, priority))
        elif op == START:
            mine, theirs = ledger.next_job(ledger.last[0]), plain.start_next()
            assert mine is not None and theirs is not None and mine.id == theirs.id
            apply(JobStarted(mine.id))
            running.append(mine.id)
        else:
            job_id = running.popleft()
            plain.complete(job_id, arg == 1)
            apply(JobCompleted(job_id, arg == 1))
    assert not ledger.anomalies
    assert {a: plain.accounts[a].balance for a in work.accounts} == {
        a: ledger.accounts[a].balance for a in work.accounts}


def test_realistic_mix_folds_without_anomalies() -> None:
    from projections import Ledger
    from projections.events import from_payload

    ledger = Ledger()
    events = list(realistic_mix(3000))
    assert len({e.type for e in events}) == 7
    for i, e in enumerate(events, 1):
        ledger.apply(i, e.id, e.time, from_payload(e.type, e.fields))
    assert ledger.anomalies == []


def test_the_simulator_benchmark_runs_with_and_without_checks(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.bench import sim

    # The ledger alone, for real, in a fresh process: the same ops, nothing checked.
    bare = sim.measure_fresh(3, 150, True, False)
    assert bare.ok and bare.steps == 150 and bare.events > 0
    # The table and the verdict, from runs given (no timing is asserted).
    given = [sim.Run(1000, 2.0, 1.0, 700, True), sim.Run(1000, 4.0, 2.0, 700, True)]
    calls = iter(given * 4)
    monkeypatch.setattr(sim, "measure_fresh", lambda *_: next(calls))
    assert sim.main(["--steps", "1000", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "| one process | off (the ledger alone) | 375 | 750 | 1,000, 500 | 700 |" in out
    assert "MISSED (best median 750)" in out


def test_the_simulator_benchmark_runs_a_baseline_checkout_beside_this_one(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.bench import sim

    root = Path(sim.__file__).resolve().parents[2]
    # A checkout's code in a process of its own (here this one's, for real).
    there = sim.measure_in(root, 3, 150, True, False)
    assert there.ok and there.steps == 150 and there.events > 0
    given = iter([sim.Run(1000, 2.0, 1.0, 700, True)] * 8)
    before = iter([sim.Run(1000, 2.0, 4.0, 700, True)] * 8)
    monkeypatch.setattr(sim, "measure_fresh", lambda *_: next(given))
    monkeypatch.setattr(sim, "measure_in", lambda *_: next(before))
    assert sim.main(["--steps", "1000", "--runs", "1", "--baseline", str(root)]) == 0
    out = capsys.readouterr().out
    assert "| one process | all | 500 | 1,000 | 1,000 | 700 | 250 | 4.00x |" in out
    with pytest.raises(SystemExit):
        sim.main(["--baseline", "/nonexistent"])


def test_the_service_benchmark_clients_count_each_answer_on_either_kind_of_connection(
        ) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from multiprocessing import Event, Pipe

    from tools.bench import service

    peers: list[int] = []  # each request's client port: a new one means a new connection

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps a connection open unless told to close

        def do_POST(self) -> None:
            peers.append(self.client_address[1])
            self.rfile.read(int(self.headers["Content-Length"]))
            status = 201 if self.path == "/ok" else 422
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        plan: list[tuple[str, str, bytes | None, dict[str, str]]] = [
            ("POST", "/ok", b"{}", {"Content-Type": "application/json"}),
            ("POST", "/bad", b"{}", {}), ("POST", "/ok", b"{}", {})]
        for new in (False, True):
            peers.clear()
            recv, send = Pipe(duplex=False)
            go = Event()
            go.set()
            service._client(server.server_address[1], plan, send, go, new)
            latencies, statuses, _cpu = recv.recv()
            assert statuses == {201: 2, 422: 1} and len(latencies) == 3
            assert len(set(peers)) == (3 if new else 1)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.postgres
def test_the_journal_size_case_reads_both_services_in_alternating_rounds(
        pg_database_url: str) -> None:
    import psycopg

    from tools.bench import service
    from tools.bench.storage import libpq_dsn

    out = service.journal_sizes(pg_database_url, (30, 60), rounds=3, reads=12)
    each = out["ratio_balance_p50_large_to_small_each_round"]
    assert len(each) == 3
    assert out["ratio_balance_p50_large_to_small"] == sorted(each)[1]
    for n in (30, 60):
        case = out[f"journal_{n}"]
        assert case["events"] == n and case["ready_seconds"] > 0
        assert case["balance_1"]["statuses"] == {200: 12}
    # Both journals' schemas are gone once the services have stopped.
    with psycopg.connect(libpq_dsn(pg_database_url)) as conn:
        left = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE "
                            "'bench_service_%%_' || %s", (str(os.getpid()),)).fetchone()
    assert left == (0,)


def test_the_service_reads_benchmark_runs_and_times_each_read() -> None:
    from tools.bench.service_reads import run

    result = run(3000, 1)
    assert set(result["cpu_ms"]) == {"job", "job_before", "revisions_after_write",
                                     "revisions_before", "first_pass", "replay"}
    assert all(value > 0 for value in result["cpu_ms"].values())
    assert result["job"].startswith("job-")


@pytest.mark.parametrize(("name", "argv"), [
    ("past", ["--calls", "400", "--questions", "30"]),
    ("late_tracker", ["--calls", "400", "--late", "5"]),
    ("verify", ["--events", "3000"]),
])
def test_the_two_tree_benchmarks_compare_trees_by_their_answers(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str,
        argv: list[str]) -> None:
    import importlib

    from tools.bench.alternating import HERE

    bench = importlib.import_module(f"tools.bench.{name}")
    if name == "verify":
        argv = [*argv, "--journal", str(tmp_path / "verify.db")]
    bench.main(["--other", str(HERE), *argv, "--rounds", "1"])
    out = capsys.readouterr().out
    mine, other = (line for line in out.splitlines() if "; answers " in line)
    # The same code twice: the same answers, by their hash.
    assert mine.rsplit("answers ", 1)[1] == other.rsplit("answers ", 1)[1]
    assert "other / this tree:" in out


def test_the_reports_setup_runs_in_a_workdir_kept_from_a_run_of_another_size(
        tmp_path: Path) -> None:
    from eventstore import Journal
    from projections.queries.reconcile import ledger_charges
    from tools.bench import reports
    from tools.bench.runner import TOY, Config, Timing, run_in_process
    from tools.bench.storage import sqlite_url

    workdir = str(tmp_path)
    reports.build_reports_journal(Timing(), workdir, 60)  # what a smaller run left
    cfg = Config(sizes=TOY, runs=1, workdir=workdir, pg_url=None, have_es=False)
    for call in reports.scenario(cfg).prepare:
        done = run_in_process(call.fn, call.params, 1)
        assert "error" not in done, done["error"]
    with Journal(sqlite_url(reports.reports_path(workdir, TOY.reports))) as journal:
        jobs, events, _ = ledger_charges(journal, journal.head())
    with open(reports.charges_path(workdir, TOY.reconcile_rows), encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    charges = sorted((*jobs.values(), *events.values()), key=lambda c: (c.time, c.position))
    assert [(r["account"], r["job"] or r["id"]) for r in rows] == [
        (c.account, c.ref) for c in charges[:TOY.reconcile_rows]]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("pg", marks=pytest.mark.postgres)])
def test_the_raw_read_baselines_time_the_read_not_the_driver_s_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    # Our side is timed once its journal is open (driver imported, connected); a raw read
    # timed from before its connection would be charged what ours is not.
    import sqlite3
    import time
    from collections.abc import Callable, Iterator
    from contextlib import contextmanager
    from typing import Any

    import psycopg

    from tools.bench import cpu, rawdb, replay
    from tools.bench.runner import Timing
    from tools.bench.storage import create_schema, drop_schema, libpq_dsn, pg_base_url

    workdir, n = str(tmp_path), 40
    path, schema = cpu._paths(workdir, n)
    steps: list[str] = []

    def noted(step: str, then: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            steps.append(step)
            return then(*args, **kwargs)
        return call

    if kind == "sqlite":
        rawdb.sqlite_connect(path, create=True).close()
        monkeypatch.setattr(sqlite3, "connect", noted("connect", sqlite3.connect))
    else:
        pg = pg_base_url()
        create_schema(pg, schema)
        rawdb.pg_connect(libpq_dsn(pg), schema, create=True).close()
        monkeypatch.setattr(psycopg, "connect", noted("connect", psycopg.connect))

    class Watched(Timing):
        @contextmanager
        def measure(self, section: str = "main") -> Iterator[None]:
            steps.append("timed")
            yield

    try:
        if kind == "sqlite":
            replay.raw_sqlite_read(Watched(), path)
        else:
            replay.raw_pg_read(Watched(), pg, schema)
        assert steps == ["connect", "timed"]
        steps.clear()
        monkeypatch.setattr(time, "process_time", noted("timed", time.process_time))
        cpu.one("raw", kind, workdir, n, pg_base_url() if kind == "pg" else None)
        assert steps[:2] == ["connect", "timed"]
    finally:
        if kind == "pg":
            drop_schema(pg_base_url(), schema)


def test_a_case_s_peak_rss_counts_the_processes_it_ran() -> None:
    # The report commands run `gpu-credits` in a process of their own: the peak RSS in
    # their rows must be that command's, not only the case's process that waited for it.
    import subprocess
    import sys

    from tools.bench.runner import peak_rss_mb

    beyond = peak_rss_mb() + 100
    subprocess.run([sys.executable, "-c", f"b = b'x' * {int(beyond * 2**20)}"], check=True)
    assert peak_rss_mb() >= beyond


def test_the_cpu_cases_report_their_own_peak_rss_not_their_parent_s(tmp_path: Path) -> None:
    # Each case runs in a process this one starts: ru_maxrss would carry over the
    # starting process's peak (it survives the fork and exec), whatever the case used.
    import json
    import subprocess
    import sys

    from tools.bench import cpu, rawdb
    from tools.bench.runner import peak_rss_mb

    path, _ = cpu._paths(str(tmp_path), 10)
    rawdb.sqlite_connect(path, create=True).close()
    ballast = b"x" * (300 * 2**20)  # the starting process, larger than any case here
    assert peak_rss_mb() >= 300
    done = subprocess.run(
        [sys.executable, "-m", "tools.bench.cpu", "--events", "10", "--workdir",
         str(tmp_path), "--one", "raw", "sqlite"], capture_output=True, text=True, check=True)
    assert len(ballast) and json.loads(done.stdout.splitlines()[-1])["rss"] < 200
