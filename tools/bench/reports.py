"""The report commands as a user runs them: `gpu-credits` processes on a large journal.

Each case starts `python -m tools.cli` with its arguments (output to a pipe, read and
discarded) and times the whole process, start-up included. The baseline is the same
process answering `--help`: what every command pays before it reads a journal (the
interpreter, the imports). Targets are on the difference, in seconds:

- `accounts`, `expiring`, `jobs`, `statement`, `balance` and `explain --job` on the
  realistic mix of 10^6 events, checkpointed by a replay first (the live projection a
  query starts from), answer within 1 s of the start-up; `balance`, `statement` and
  `explain --job` also after one late event (the newest checkpoint then no longer holds);
- `reconcile` of a 100,000-row charges file (the charges of a journal of the mix that
  holds them: the same journal, a few rows changed so that it finds differences) within 5 s.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

from tools.bench.runner import Call, Case, Config, Scenario, Table, Target, Timing
from tools.bench.storage import remove_sqlite, sqlite_url

REPORT_WITHIN = 1.0
"""Seconds a report may take beyond the start-up (`--help`) on the large journal."""

RECONCILE_WITHIN = 5.0
"""Seconds a reconciliation of the charges file may take, start-up included."""

_ACCOUNT = "acct-00000"
_JOB = "job-0"  # the mix's first job: finished long before the end

# Differences planted in the charges file (every 1,000th row), so that the run compares
# something other than a perfect match.
_CHANGED_EVERY = 1000


def reports_path(workdir: str, n: int) -> str:
    return str(Path(workdir) / f"reports-mix-{n}.db")


def late_path(workdir: str, n: int) -> str:
    return str(Path(workdir) / f"reports-late-{n}.db")


def reconcile_path(workdir: str, n: int) -> str:
    return str(Path(workdir) / f"reconcile-mix-{n}.db")


def charges_path(workdir: str, rows: int) -> str:
    return str(Path(workdir) / f"charges-{rows}.csv")


# -- setup (untimed) ---------------------------------------------------------------------------


def _write_mix(url: str, n: int) -> None:
    from eventstore import Journal
    from tools.bench.workload import append_mix, realistic_mix

    journal = Journal(url)
    try:
        append_mix(journal, realistic_mix(n), 5000)
    finally:
        journal.close()


def build_reports_journal(t: Timing, workdir: str, n: int) -> None:
    """The mix of n events (a copy of the replay scenario's file when it exists), then a
    replay that records checkpoints: what `gpu-credits replay` leaves behind."""
    from eventstore import Journal
    from projections.replay import replay
    from tools.bench.replay import mix_path

    path = reports_path(workdir, n)
    remove_sqlite(path)
    source = Path(mix_path(workdir, n))
    wal = Path(f"{source}-wal")
    if source.exists() and (not wal.exists() or wal.stat().st_size == 0):
        shutil.copyfile(source, path)
    else:
        _write_mix(sqlite_url(path), n)
    journal = Journal(sqlite_url(path))
    try:
        with t.measure():
            replay(journal, checkpoint=True)
        t.note("head", journal.head())
    finally:
        journal.close()


def build_late_journal(t: Timing, workdir: str, n: int) -> None:
    """The checkpointed reports journal, then one usage report of the account the queries
    ask about arriving late: its time that of the event 1,000 before the end. The newest
    checkpoint no longer holds (a later arrival lands before its end): a query starts
    from an older one."""
    from eventstore import Journal, NewEvent

    path = late_path(workdir, n)
    remove_sqlite(path)
    shutil.copyfile(reports_path(workdir, n), path)
    journal = Journal(sqlite_url(path))
    try:
        head = journal.head()
        (rec,) = journal.read(after_position=max(head - 1001, 0), to_position=max(head - 1000, 1),
                              order="position")
        with t.measure():
            journal.append([NewEvent("late-usage", _ACCOUNT, "consume", rec.time,
                                     {"account": _ACCOUNT, "amount": 1})])
        t.note("late at", rec.time)
    finally:
        journal.close()


def build_reconcile_files(t: Timing, workdir: str, n: int, rows: int) -> None:
    """The charges file for the reports journal of n events (built first, in the same
    workdir, which may keep other sizes' from earlier runs): its first `rows` charges in
    canonical order (account, job or id, amount, time), every 1,000th amount off by one."""
    from eventstore import Journal
    from projections.queries.reconcile import ledger_charges

    journal = Journal(sqlite_url(reports_path(workdir, n)), create=False)
    try:
        jobs, events, _ = ledger_charges(journal, journal.head())
    finally:
        journal.close()
    charges = sorted((*jobs.values(), *events.values()), key=lambda c: (c.time, c.position))
    with open(charges_path(workdir, rows), "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["account", "job", "id", "amount", "time"])
        for i, c in enumerate(charges[:rows]):
            amount = c.amount + (1 if i % _CHANGED_EVERY == _CHANGED_EVERY - 1 else 0)
            job, ref = (c.ref, "") if c.kind == "job" else ("", c.ref)
            writer.writerow([c.account, job, ref, amount, c.time])
    t.note("rows", min(rows, len(charges)))
    t.note("charges in the journal", len(charges))


# -- the cases ---------------------------------------------------------------------------------


def cli(t: Timing, args: list[str], ok_codes: tuple[int, ...] = (0,),
        in_process: bool = False) -> None:
    """`python -m tools.cli ARGS` as a process, timed from start to exit; `in_process`:
    the same command in this process, for a profile of where the time goes."""
    if in_process:
        _cli_here(t, args, ok_codes)
        return
    command = [sys.executable, "-m", "tools.cli", *args]
    with t.measure():
        done = subprocess.run(command, capture_output=True, check=False)
    if done.returncode not in ok_codes:
        raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: "
                           f"{done.stderr.decode(errors='replace')[-2000:]}")
    t.note(f"{args[0]} output bytes", len(done.stdout))


def _cli_here(t: Timing, args: list[str], ok_codes: tuple[int, ...]) -> None:
    import contextlib
    import io

    from tools.cli import app

    code: object = 0
    with contextlib.redirect_stdout(io.StringIO()), t.measure():
        try:
            app(args, prog_name="gpu-credits")
        except SystemExit as exc:
            code = exc.code or 0
    if code not in ok_codes:
        raise RuntimeError(f"{' '.join(args)}: exit {code}")


def scenario(cfg: Config) -> Scenario:
    s = cfg.sizes
    n, rows = s.reports, s.reconcile_rows
    wd = cfg.workdir
    db = ["--db", sqlite_url(reports_path(wd, n))]
    account = _ACCOUNT
    late = ["--db", sqlite_url(late_path(wd, n))]

    def case(key: str, label: str, args: list[str], *, ok: tuple[int, ...] = (0,),
             baseline: bool = False) -> Case:
        params = {"args": args, "ok_codes": ok}
        return Case(key, label, "reports:cli", params, 1, unit="commands", baseline=baseline,
                    compare=() if baseline else ("reports.startup",), short="start-up",
                    profile_params={**params, "in_process": True})

    cases = [
        case("reports.startup", "gpu-credits --help (start-up)", ["--help"], baseline=True),
        case("reports.accounts", "gpu-credits accounts", ["accounts", *db]),
        case("reports.expiring", "gpu-credits expiring", ["expiring", *db]),
        case("reports.jobs", "gpu-credits jobs --state running", ["jobs", "--state", "running",
                                                                  *db]),
        case("reports.statement", f"gpu-credits statement {account}",
             ["statement", account, *db]),
        case("reports.balance", f"gpu-credits balance {account}", ["balance", account, *db]),
        case("reports.explain_job", f"gpu-credits explain --job {_JOB}",
             ["explain", "--job", _JOB, *db]),
        case("reports.balance_late", f"gpu-credits balance {account}, after a late event",
             ["balance", account, *late]),
        case("reports.statement_late", f"gpu-credits statement {account}, after a late event",
             ["statement", account, *late]),
        case("reports.explain_job_late", f"gpu-credits explain --job {_JOB}, after a late "
             "event", ["explain", "--job", _JOB, *late]),
        case("reports.reconcile", f"gpu-credits reconcile ({rows:,} rows)",
             ["reconcile", charges_path(wd, rows), *db], ok=(0, 1)),
    ]
    within = [
        Target(f"{name} within {REPORT_WITHIN:g} s of start-up on {n:,} events", "within",
               f"reports.{name}", "reports.startup", REPORT_WITHIN, f"reports.{name}",
               "reports")
        for name in ("accounts", "expiring", "jobs", "statement", "balance", "explain_job",
                     "balance_late", "statement_late", "explain_job_late")
    ]
    return Scenario(
        name="reports",
        title="Reports from the command line",
        intro=(
            f"`gpu-credits` processes, timed from start to exit, output to a pipe. The "
            f"reports read a journal of {n:,} events of the realistic mix on SQLite, after "
            "a replay that recorded its checkpoints; `reconcile` compares a charges file of "
            f"{rows:,} rows (the journal's first charges, every {_CHANGED_EVERY:,}th "
            "amount off by one) with the same journal. The baseline is "
            "`gpu-credits --help`: the start-up every command pays. Every command checks "
            "the journal's hash chain before it answers."
        ),
        cases=cases,
        tables=[Table("One command each", tuple(c.key for c in cases))],
        targets=[
            *within,
            Target(f"reconcile of {rows:,} rows on {n:,} events within {RECONCILE_WITHIN:g} s",
                   "seconds",
                   "reports.reconcile", None, RECONCILE_WITHIN, "reports.reconcile",
                   "reports"),
        ],
        prepare=[
            Call(f"write and checkpoint the {n:,}-event mix for the reports",
                 "reports:build_reports_journal", {"workdir": wd, "n": n}),
            Call(f"a copy of the {n:,}-event mix with one late event",
                 "reports:build_late_journal", {"workdir": wd, "n": n}),
            Call(f"write a journal and a {rows:,}-row charges file for reconcile",
                 "reports:build_reconcile_files", {"workdir": wd, "n": n, "rows": rows}),
        ],
    )
