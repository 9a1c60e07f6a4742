"""`reconcile`: an external charges file compared with the ledger, row by row.

The file is CSV with a header: `account`, `amount`, and one of `job` (compared with what
the job was charged) or `id` (compared with the usage report or adjustment of that id);
optionally `time` (integer or ISO-8601). Amounts are what the other system charged: a
usage report of 70 is a charge of 70, a manual debit (adjustment of -25) a charge of 25.

Every row is `matched`, `amount_differs`, `missing_from_ledger` or `duplicate` (the same
job or id under the same account as an earlier row); every charge in the ledger that the
file lacks, for the accounts the file names and the time range it covers (its earliest
to its latest time, both included; a date alone covers its whole day), is
`missing_from_file`. A reversed event is no charge (as if it had never happened): a row
naming a reversed usage report is missing from the ledger, and a job whose completion was
reversed is not charged.
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import orjson

from eventstore import JournalLike
from projections.csvcells import ESCAPE, unguard
from projections.importing import far_time_problem
from projections.ledger import Ledger
from projections.queries.common import recorded_position
from projections.replay import lean_rows, ledger_at
from projections.reversals import reversed_ids
from projections.timefmt import DAY, is_date_alone, parse_time
from projections.validation import require_time, show

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

    line: int  # in the file, the header being line 1 (a row's last line)
    account: str
    amount: int
    job: str | None
    event_id: str | None
    time: int | None
    # The last second the row's time covers: the end of its day when the time is a date
    # alone (2026-11-16), else the time itself.
    until: int | None = None

    @property
    def covered_until(self) -> int | None:
        """The latest moment the row's time covers (None: the row has no time)."""
        return self.time if self.until is None else self.until

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

    json_keys: ClassVar[tuple[str, ...]] = ("kind", "ref", "account", "amount", "time:time",
                                            "position")


@dataclass(frozen=True, slots=True)
class Note:
    """Why a finding has its verdict: a code and the values behind it.

    Codes: "" (nothing to add: a match, an amount that differs); "duplicate" (`kind`
    "job" or "id" `ref` is on an earlier row under `account`); "no_job",
    "job_not_charged" (`state`), "reversed", "no_event": why the ledger has no charge for
    `ref`; "other_account": the ledger charges `ref` to `account`; "job", "consume",
    "adjust": the kind of a ledger charge missing from the file.
    """

    code: str = ""
    ref: str | None = None
    kind: str | None = None
    account: str | None = None
    state: str | None = None


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
    note: Note = Note()

    @property
    def difference(self) -> int | None:
        """file - ledger, when both have an amount."""
        if self.file_amount is None or self.ledger_amount is None:
            return None
        return self.file_amount - self.ledger_amount

    json_keys: ClassVar[tuple[str, ...]] = (
        "status", "line", "account", "job", "id=event_id", "time:time", "file_amount",
        "ledger_amount", "difference", "note")


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

    @property
    def span(self) -> dict[str, int] | None:
        """The file's time range as {"from", "to"}, None when its rows have no time."""
        return None if self.time_range is None else {
            "from": self.time_range[0], "to": self.time_range[1]}

    json_keys: ClassVar[tuple[str, ...]] = ("file=source", "as_known_at", "ok", "counts",
                                            "accounts", "time_range=span", "findings")


def parse_charges(text: str, source: str, *,
                  allow_far_times: bool = False) -> list[FileCharge]:
    """The rows of a reconciliation file; `ReconcileFileError` listing every problem.

    A time after 2200-01-01 is refused as probably milliseconds unless `allow_far_times`,
    as `import` refuses one."""
    # newline="": the csv module splits the lines itself (a CR alone ends one too, as
    # `import` reads a CSV), and a quoted cell keeps its line break.
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise ReconcileFileError(source, [f"line {reader.line_num}: not valid CSV: {exc}"]) \
            from None
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
            f"line 1: unknown column(s) {', '.join(map(repr, unknown))}; expected account, "
            "amount, job or id, and optionally time"])
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        # Which of two `amount` columns is the charge? Neither is guessed (as `import`).
        raise ReconcileFileError(source, [
            f"line 1: column(s) {', '.join(map(repr, repeated))} appear more than once"])
    rows: list[FileCharge] = []
    width = len(columns)
    at_account, at_amount = index["account"], index["amount"]
    at_job, at_id, at_time = index.get("job"), index.get("id"), index.get("time")
    for number, cells in _numbered(reader, problems):
        if len(cells) != width:
            if cells and any(c.strip() for c in cells):
                problems.append(f"line {number}: {len(cells)} cells, the header has {width}")
            continue
        # Names as written (names are exact: " pad" is another account than "pad");
        # `reconcile` forgives a stray space only where the exact name is unknown.
        account = cells[at_account]
        job = cells[at_job] if at_job is not None else ""
        event_id = cells[at_id] if at_id is not None else ""
        amount_text = cells[at_amount].strip()
        time_text = cells[at_time].strip() if at_time is not None else ""
        if not "".join((account, job, event_id, amount_text, time_text)).strip():
            continue  # a blank line
        if not account.strip():
            problems.append(f"line {number}: no account")
        job, event_id = (job if job.strip() else ""), (event_id if event_id.strip() else "")
        if bool(job) == bool(event_id):
            problems.append(f"line {number}: give a job or an id (exactly one)")
        if not _AMOUNT.fullmatch(amount_text):
            # Read as `import` reads a CSV integer (once the cell is trimmed): `int()`
            # would also take 1_000, +5 and digits of other scripts.
            problems.append(f"line {number}: amount {amount_text!r} is not a whole "
                            "number of credits (ASCII digits, optionally after a -)")
            continue
        amount = int(amount_text)
        time: int | None = None
        if time_text:
            try:
                time = require_time("time", parse_time(time_text))
            except ValueError as exc:
                problems.append(f"line {number}: {exc}")
                continue
            # Milliseconds read as seconds would put the file's range past every charge:
            # nothing would be missing from the file, an all-clear for a file that lacks
            # charges.
            far = None if allow_far_times else far_time_problem("time", time)
            if far is not None:
                problems.append(f"line {number}: {far}")
                continue
        # A date alone names a day, not its first second: a billing export dated by day
        # covers the charges of its last day too.
        until = None if time is None or not is_date_alone(time_text) else time + DAY - 1
        rows.append(FileCharge(number, account, amount, job or None, event_id or None, time,
                               until))
    if problems:
        raise ReconcileFileError(source, problems)
    return rows




def _numbered(reader: Any, problems: list[str]) -> Iterator[tuple[int, list[str]]]:
    """(line, cells) of each row after the header, the line being the file's (a quoted
    cell may hold a line break: the last line of the row, as `import` counts); a row the
    csv module cannot read (an oversized cell) is the last one read, added to
    `problems`: the reader cannot resynchronise, and the file is refused anyway."""
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            problems.append(f"line {reader.line_num}: not valid CSV: {exc}")
            return
        yield reader.line_num, cells


class LedgerCharges:
    """The ledger's charges as known at a position, from the live projection (the newest
    valid checkpoint and the events after it: `ledger_at`), never a refold of the journal.

    The projection knows each job's account and charge, which events were anomalies and
    which were reversed. What it does not keep per event (a usage report's amount, a
    completion's time) comes from reading the journal: the events between two times (an
    index), decoding only completions, usage reports and adjustments; an event named
    outside them is fetched by its id.
    """

    def __init__(self, journal: JournalLike, position: int) -> None:
        self.journal = journal
        self.position = position
        self.ledger = ledger_at(journal, to_position=position)
        # The ledger folded every reversal (a reversed one too), so this is every event
        # reversed as known at `position`, whatever `excluded` it was folded with.
        self._skipped = reversed_ids(self.ledger.reversals) | {
            event_id for _, event_id, _ in self.ledger.anomalies}

    def job(self, job_id: str) -> tuple[str, int] | None:
        """(account, charge) of a job the ledger charged, else None."""
        job = self.ledger.jobs.get(job_id)
        return None if job is None or job.charge is None else (job.account, job.charge)

    def between(self, from_time: int | None = None, to_time: int | None = None) -> tuple[
            dict[str, LedgerCharge], dict[str, LedgerCharge]]:
        """(job id -> its charge, event id -> usage report or adjustment) of the charges
        with an event time between the two (inclusive; None: no bound)."""
        jobs: dict[str, LedgerCharge] = {}
        events: dict[str, LedgerCharge] = {}
        skipped, job = self._skipped, self.job
        # In arrival order, the times filtered by the database: a scan of the table
        # costs less than walking the (event time, position) index to each row, even
        # for a part of the journal, and the order of charges does not matter here.
        for at, event_id, kind, time, payload, _ in lean_rows(
                self.journal, to_position=self.position, from_time=from_time,
                to_time=to_time, order="position"):
            if kind not in _CHARGES or event_id in skipped:
                continue
            fields = _fields(payload)
            if kind == "complete":
                # The one completion of a job that is no anomaly is the one that charged it.
                job_id = fields.get("job")
                charged = job(job_id) if isinstance(job_id, str) else None
                if charged is not None:
                    jobs[job_id] = LedgerCharge("job", job_id, charged[0], charged[1], time, at)
            else:
                events[event_id] = self._event_charge(kind, event_id, fields, time, at)
        return jobs, events

    def events(self, event_ids: Iterable[str]) -> dict[str, LedgerCharge]:
        """The usage reports and adjustments among these ids, fetched by id."""
        found: dict[str, LedgerCharge] = {}
        for event_id, rec in self.journal.get_many(event_ids).items():
            if (rec.position <= self.position and rec.type in _CHARGES
                    and rec.type != "complete" and event_id not in self._skipped):
                found[event_id] = self._event_charge(rec.type, event_id, rec.payload,
                                                     rec.time, rec.position)
        return found

    @staticmethod
    def _event_charge(kind: str, event_id: str, fields: Any, time: int,
                      position: int) -> LedgerCharge:
        amount = int(fields["amount"])
        return LedgerCharge(kind, event_id, str(fields["account"]),
                            amount if kind == "consume" else -amount, time, position)


def ledger_charges(journal: JournalLike, position: int) -> tuple[
        dict[str, LedgerCharge], dict[str, LedgerCharge], Ledger]:
    """(job id -> its charge, event id -> usage report or adjustment, the ledger), every
    charge as known at `position`. A reversed event is no charge (nor is a job charge
    whose completion was reversed); neither is an anomaly."""
    charges = LedgerCharges(journal, position)
    jobs, events = charges.between()
    return jobs, events, charges.ledger


_CHARGES = frozenset({"complete", "consume", "adjust"})
_AMOUNT = re.compile(r"-?[0-9]{1,20}", re.ASCII)
"""The event types that charge an account: a job's completion, a usage report, an
adjustment (a manual credit being a negative charge)."""


def _fields(payload: Any) -> Any:
    """A payload as `lean_rows` gives it (the stored JSON text, or already decoded)."""
    return orjson.loads(payload) if isinstance(payload, str | bytes) else payload


def reconcile(journal: JournalLike, rows: list[FileCharge], *, source: str = "<file>",
              as_known_at: int | str | None = None) -> Reconciliation:
    """Compare the file's rows with the ledger; list the ledger's charges the file lacks
    (for the accounts the file names, between its earliest and latest time if it has
    times)."""
    rows = list(rows)
    strays = [row for row in rows if not isinstance(row, FileCharge)]
    if strays:
        raise TypeError(f"reconcile takes the rows parse_charges reads from a charges file "
                        f"(FileCharge), got {type(strays[0]).__name__} {show(strays[0])}")
    position = recorded_position(journal, as_known_at)
    out = Reconciliation(source, position)
    times = [r.time for r in rows if r.time is not None]
    ends = [r.covered_until for r in rows if r.covered_until is not None]
    out.time_range = (min(times), max(ends)) if times else None
    charges = LedgerCharges(journal, position)
    # Only the charges of the file's time range can be missing from it; a row naming an
    # event outside the range finds it by id, a job by the projection's job index.
    span = out.time_range or (None, None)
    jobs, events = charges.between(*span)
    named = {r.event_id for r in rows if r.event_id is not None}
    forms = {form for i in named for form in _forms(i)}
    events.update(charges.events(forms - events.keys()))
    ledger = charges.ledger
    rows = [replace(r, account=_as_known(r.account, ledger.accounts),
                    job=None if r.job is None else _as_known(r.job, ledger.jobs),
                    event_id=None if r.event_id is None else _as_known(r.event_id, events))
            for r in rows]
    out.accounts = sorted({r.account for r in rows})
    # A duplicate repeats an earlier row: the same job or id under the same account. A
    # row under an account the ledger does not charge it to claims no charge, and must
    # not make the row under the right one (before it or after it) a duplicate.
    rows_seen: set[tuple[str, str, str]] = set()
    seen: set[tuple[str, str]] = set()  # named by a row, under whichever account
    job_charge, findings = charges.job, out.findings
    for row in rows:
        ledger_amount: int | None = None
        note = Note()
        key = row.key
        if (row.account, *key) in rows_seen:
            status = DUPLICATE
            note = Note("duplicate", key[1], kind=key[0], account=row.account)
        else:
            rows_seen.add((row.account, *key))
            seen.add(key)
            if row.job is not None:
                charged = job_charge(row.job)
            else:
                event = events.get(key[1])
                charged = None if event is None else (event.account, event.amount)
            if charged is None:
                status, note = MISSING_FROM_LEDGER, _why_missing(charges.ledger, row)
            elif charged[0] != row.account:
                status = MISSING_FROM_LEDGER
                note = Note("other_account", key[1], account=charged[0])
            else:
                ledger_amount = charged[1]
                status = MATCHED if ledger_amount == row.amount else AMOUNT_DIFFERS
        findings.append(Finding(status, row.account, row.job, row.event_id, row.amount,
                                ledger_amount, row.line, row.time, note))
    wanted = set(out.accounts)
    low, high = span
    extras = [c for c in (*jobs.values(), *events.values())
              if c.account in wanted and c.amount != 0
              and (("job" if c.kind == "job" else "id"), c.ref) not in seen
              and (low is None or low <= c.time) and (high is None or c.time <= high)]
    extras.sort(key=lambda c: (c.time, c.position))
    for c in extras:
        out.findings.append(Finding(
            MISSING_FROM_FILE, c.account, c.ref if c.kind == "job" else None,
            None if c.kind == "job" else c.ref, None, c.amount, time=c.time,
            note=Note(c.kind, c.ref)))
    return out


def _as_known(name: str, known: Container[str]) -> str:
    """`name` as the file writes it when the ledger knows it; else the first other form of
    it (`_forms`) the ledger knows; else as written, to be reported as not in the
    ledger."""
    return next((form for form in _forms(name) if form in known), name)


def _forms(name: str) -> list[str]:
    """The names a cell may stand for, the cell as written first: without surrounding
    spaces, and in Unicode's composed form (a spreadsheet's or a hand-written file's
    stray space; a name another system handed over decomposed, `cafe` and a combining
    accent for `caf\u00e9`, which looks the same); and without the apostrophe every CSV
    this project writes puts before a cell a spreadsheet would run as a formula
    (`'=acct` for `=acct`, `''x` for `'x`: `csvcells.unguard`, as `import` reads it), so
    a file made from `statement --csv` or `export --format csv` names what it was
    given."""
    forms = [name, name.strip(), _composed(name)]
    if name.startswith(ESCAPE):
        bare = unguard(name)
        forms += [bare, bare.strip(), _composed(bare)]
    return list(dict.fromkeys(forms))


def _composed(name: str) -> str:
    """`name` without surrounding spaces, in Unicode's composed form (NFC)."""
    return unicodedata.normalize("NFC", name.strip())


def _why_missing(ledger: Ledger, row: FileCharge) -> Note:
    if row.job is not None:
        job = ledger.jobs.get(row.job)
        if job is None:
            return Note("no_job", row.job)
        return Note("job_not_charged", row.job, state=job.state)
    if row.event_id is not None and row.event_id in ledger.excluded:
        return Note("reversed", row.event_id)
    return Note("no_event", row.event_id)
