"""`reconcile`: an external charges file compared with the ledger, row by row.

The file is CSV with a header: `account`, `amount`, and one of `job` (compared with what
the job was charged) or `id` (compared with the usage report or adjustment of that id);
optionally `time` (integer or ISO-8601). Amounts are what the other system charged: a
usage report of 70 is a charge of 70, a manual debit (adjustment of -25) a charge of 25.

Every row is `matched`, `amount_differs`, `missing_from_ledger` or `duplicate` (the same
job or id twice in the file); every charge in the ledger that the file lacks, for the
accounts the file names and the time range it covers, is `missing_from_file`. A reversed
event is no charge (as if it had never happened): a row naming a reversed usage report is
missing from the ledger, and a job whose completion was reversed is not charged.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any

from eventstore import JournalLike
from projections.ledger import Ledger
from projections.projector import apply_recorded
from projections.queries.common import json_time, recorded_position
from projections.reversals import reversed_ids
from projections.timefmt import parse_time

MATCHED = "matched"
AMOUNT_DIFFERS = "amount_differs"
MISSING_FROM_LEDGER = "missing_from_ledger"
MISSING_FROM_FILE = "missing_from_file"
DUPLICATE = "duplicate"
STATUSES = (MATCHED, AMOUNT_DIFFERS, MISSING_FROM_LEDGER, DUPLICATE, MISSING_FROM_FILE)


class ReconcileFileError(ValueError):
    """A reconciliation file that cannot be read: every problem, with its line."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        shown = "; ".join(problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        super().__init__(f"{source}: {len(problems)} problem(s): {shown}{more}")


@dataclass(frozen=True, slots=True)
class FileCharge:
    """One row of the file."""

    line: int  # in the file, the header being line 1
    account: str
    amount: int
    job: str | None
    event_id: str | None
    time: int | None

    @property
    def key(self) -> tuple[str, str]:
        """("job", id) or ("id", id): what the row names in the ledger."""
        return ("job", self.job) if self.job is not None else ("id", self.event_id or "")


@dataclass(frozen=True, slots=True)
class LedgerCharge:
    """One charge the ledger holds: a job's charge, a usage report or an adjustment."""

    kind: str  # "job", "consume" or "adjust"
    ref: str  # the job id, or the event id
    account: str
    amount: int  # charged: a credit adjustment is negative
    time: int
    position: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready charge."""
        return {"kind": self.kind, "ref": self.ref, "account": self.account,
                "amount": self.amount, "time": json_time(self.time),
                "position": self.position}


@dataclass(frozen=True, slots=True)
class Finding:
    """A row of the file, or a ledger charge the file lacks, and the verdict."""

    status: str
    account: str
    job: str | None
    event_id: str | None
    file_amount: int | None
    ledger_amount: int | None
    line: int | None = None  # in the file; None for missing_from_file
    time: int | None = None
    note: str = ""

    @property
    def difference(self) -> int | None:
        """file - ledger, when both have an amount."""
        if self.file_amount is None or self.ledger_amount is None:
            return None
        return self.file_amount - self.ledger_amount

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready finding."""
        return {"status": self.status, "line": self.line, "account": self.account,
                "job": self.job, "id": self.event_id, "time": json_time(self.time),
                "file_amount": self.file_amount, "ledger_amount": self.ledger_amount,
                "difference": self.difference, "note": self.note}


@dataclass(slots=True)
class Reconciliation:
    """Every finding, rows of the file first (in file order), then the ledger's extras."""

    source: str
    as_known_at: int
    findings: list[Finding] = field(default_factory=list)
    time_range: tuple[int, int] | None = None  # of the file's rows, if it has times
    accounts: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """How many findings of each status (every status listed, zeros included)."""
        out = dict.fromkeys(STATUSES, 0)
        for f in self.findings:
            out[f.status] += 1
        return out

    @property
    def ok(self) -> bool:
        """True when every row matched and the ledger has no charge the file lacks."""
        return all(f.status == MATCHED for f in self.findings)

    def as_dict(self) -> dict[str, Any]:
        """The `reconcile --json` object."""
        span = None if self.time_range is None else {
            "from": self.time_range[0], "to": self.time_range[1]}
        return {"file": self.source, "as_known_at": self.as_known_at, "ok": self.ok,
                "counts": self.counts(), "accounts": self.accounts, "time_range": span,
                "findings": [f.as_dict() for f in self.findings]}


def parse_charges(text: str, source: str) -> list[FileCharge]:
    """The rows of a reconciliation file; `ReconcileFileError` listing every problem."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise ReconcileFileError(source, ["the file is empty; expected a header such as "
                                          "account,job,amount,time"])
    columns = [c.strip().lower() for c in header]
    index = {c: i for i, c in enumerate(columns)}
    problems: list[str] = []
    required = [c for c in ("account", "amount") if c not in index]
    if required or ("job" not in index and "id" not in index):
        missing = [*required, *([] if "job" in index or "id" in index else ["job or id"])]
        raise ReconcileFileError(source, [
            f"line 1: the header {','.join(columns)!r} lacks {', '.join(missing)}; expected "
            "account, amount, and job or id (time optional)"])
    unknown = [c for c in columns if c not in ("account", "amount", "job", "id", "time")]
    if unknown:
        raise ReconcileFileError(source, [
            f"line 1: unknown column(s) {', '.join(unknown)}; expected account, amount, "
            "job or id, and optionally time"])
    rows: list[FileCharge] = []
    for number, cells in enumerate(reader, start=2):
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(columns):
            problems.append(f"line {number}: {len(cells)} cells, the header has "
                            f"{len(columns)}")
            continue

        def cell(name: str, cells: list[str] = cells) -> str:
            return cells[index[name]].strip() if name in index else ""

        account, job, event_id = cell("account"), cell("job"), cell("id")
        if not account:
            problems.append(f"line {number}: no account")
        if bool(job) == bool(event_id):
            problems.append(f"line {number}: give a job or an id (exactly one)")
        try:
            amount = int(cell("amount"))
        except ValueError:
            problems.append(f"line {number}: amount {cell('amount')!r} is not a whole "
                            "number of credits")
            continue
        time: int | None = None
        if cell("time"):
            try:
                time = parse_time(cell("time"))
            except ValueError as exc:
                problems.append(f"line {number}: {exc}")
                continue
        rows.append(FileCharge(number, account, amount, job or None, event_id or None, time))
    if problems:
        raise ReconcileFileError(source, problems)
    return rows


def ledger_charges(journal: JournalLike, position: int) -> tuple[
        dict[str, LedgerCharge], dict[str, LedgerCharge], Ledger]:
    """(job id -> its charge, event id -> usage report or adjustment, the ledger), from a
    fold of the events recorded up to `position`. A reversed event is no charge: it takes
    no part in the fold (nor does a job charge whose completion was reversed)."""
    found = _charges(journal, position, frozenset())
    # The fold saw every reversal recorded up to `position`; only when one names an event
    # (rare: a reversal is a correction) is a second fold needed, skipping what it names.
    excluded = reversed_ids(found[2].reversals)
    if excluded:
        found = _charges(journal, position, excluded)
    return found


def _charges(journal: JournalLike, position: int, excluded: frozenset[str]) -> tuple[
        dict[str, LedgerCharge], dict[str, LedgerCharge], Ledger]:
    ledger = Ledger(excluded=excluded)
    jobs: dict[str, LedgerCharge] = {}
    events: dict[str, LedgerCharge] = {}
    for rec in journal.read(to_position=position, order="canonical"):
        outcome = apply_recorded(ledger, rec)
        if outcome.anomaly or outcome.account is None:
            continue
        if rec.type == "complete" and outcome.charge is not None:
            job = str(rec.payload["job"])
            jobs[job] = LedgerCharge("job", job, outcome.account, outcome.charge, rec.time,
                                     rec.position)
        elif rec.type in ("consume", "adjust"):
            amount = int(rec.payload["amount"])
            charged = amount if rec.type == "consume" else -amount
            events[rec.id] = LedgerCharge(rec.type, rec.id, outcome.account, charged,
                                          rec.time, rec.position)
    return jobs, events, ledger


def reconcile(journal: JournalLike, rows: list[FileCharge], *, source: str = "<file>",
              as_known_at: int | str | None = None) -> Reconciliation:
    """Compare the file's rows with the ledger; list the ledger's charges the file lacks
    (for the accounts the file names, between its earliest and latest time if it has
    times)."""
    position = recorded_position(journal, as_known_at)
    jobs, events, ledger = ledger_charges(journal, position)
    out = Reconciliation(source, position)
    seen: set[tuple[str, str]] = set()
    for row in rows:
        ref = row.job if row.job is not None else row.event_id
        charge = jobs.get(ref or "") if row.job is not None else events.get(ref or "")
        def finding(status: str, ledger_amount: int | None, note: str = "",
                    row: FileCharge = row) -> Finding:
            return Finding(status, row.account, row.job, row.event_id, row.amount,
                           ledger_amount, row.line, row.time, note)

        if row.key in seen:
            out.findings.append(finding(DUPLICATE, None,
                                        f"{row.key[0]} {ref} appears earlier in the file"))
            continue
        seen.add(row.key)
        if charge is None:
            out.findings.append(finding(MISSING_FROM_LEDGER, None, _why_missing(ledger, row)))
        elif charge.account != row.account:
            out.findings.append(finding(
                MISSING_FROM_LEDGER, None,
                f"the ledger charges {ref} to account {charge.account!r}"))
        elif charge.amount != row.amount:
            out.findings.append(finding(AMOUNT_DIFFERS, charge.amount))
        else:
            out.findings.append(finding(MATCHED, charge.amount))
    accounts = sorted({r.account for r in rows})
    times = [r.time for r in rows if r.time is not None]
    out.accounts = accounts
    out.time_range = (min(times), max(times)) if times else None
    wanted = set(accounts)
    extras = [c for c in (*jobs.values(), *events.values())
              if c.account in wanted and c.amount != 0
              and (("job" if c.kind == "job" else "id"), c.ref) not in seen
              and (out.time_range is None
                   or out.time_range[0] <= c.time <= out.time_range[1])]
    extras.sort(key=lambda c: (c.time, c.position))
    for c in extras:
        out.findings.append(Finding(
            MISSING_FROM_FILE, c.account, c.ref if c.kind == "job" else None,
            None if c.kind == "job" else c.ref, None, c.amount, time=c.time,
            note={"job": "job charge", "consume": "usage report",
                  "adjust": "adjustment"}[c.kind]))
    return out


def _why_missing(ledger: Ledger, row: FileCharge) -> str:
    if row.job is not None:
        job = ledger.jobs.get(row.job)
        if job is None:
            return f"no job {row.job!r} in the ledger"
        return f"job {row.job!r} is {job.state}: not charged"
    if row.event_id is not None and row.event_id in ledger.excluded:
        return f"event {row.event_id!r} was reversed: not a charge"
    return f"no usage report or adjustment with id {row.event_id!r}"
