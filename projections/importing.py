"""Events in and out of files: JSON Lines and CSV, validated line by line, ids kept stable.

An import is all or nothing. Every line is checked first (JSON, field names, types and
values, through the event dataclasses of `projections.events`); one bad line and nothing
is appended, and each bad line is reported as `FILE:LINE: what is wrong`. A line without
`id` gets one derived from its own content (the event it describes, so line endings,
spacing and key order do not matter) and how many identical lines came before it in the
file: importing the same file twice appends nothing the second time, and a file that grew
appends only its new lines. Event times after 2200-01-01 are refused as probably
milliseconds, unless the caller allows far times.

A file is read as a stream, twice, never whole: the first pass checks every line and
learns what needs the whole file (the accounts of the jobs submitted in it, which lines
are identical); the second builds the events and appends them, a few thousand at a time,
inside one transaction that commits only if no line had a problem. Memory stays flat in
the file's size: a few bytes per line, and one small entry per job submitted in it.

The stream of an event is its account; a job event (start, complete, cancel) goes to the
stream of the job's account, found from its submits in the file (the first on the
timeline) or, for a job submitted before, in the projection's job index, else to
`job:<id>` (the fold will report the orphan as an anomaly); a job event recorded
before keeps its stream when a file that grew names it again. A void goes to its grant's
account, a reversal to the stream of the event it names; both must name an event in the
journal or in the file: earlier in it, or later by its `id` (an export lists a void or a
reversal timed before the event it names first, as the timeline has them). Lines are
appended in file order either way, so an export imports back to the same timeline.

Export writes the journal in canonical order `(event_time, position)` with the `id` of
every event, in the same JSON Lines format (or CSV), so an export imports back into an
empty database to the same state digest. Asked to, each line also carries what the
journal recorded about the event (`position`, `recorded_at`) for an auditor; import
ignores those.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import hashlib
import io
import itertools
import json
import re
import shlex
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TextIO

from eventstore import PRIVATE_KEY, IdempotencyConflict, JournalLike, NewEvent, RecordedEvent
from eventstore.hashing import canonical_json
from projections import csvcells
from projections.csvcells import unguard
from projections.decoding import decode_record
from projections.events import (
    EVENT_CLASSES,
    EVENT_TYPES,
    FAR_TIME,
    JOB_EVENTS,
    TIMELINE_START,
    CreditsGranted,
    DomainEvent,
    EventReversed,
    GrantVoided,
    JobSubmitted,
    PersonalDataErased,
    from_payload,
    split_personal,
    to_payload,
)
from projections.owners import job_stream
from projections.personal import (
    ERASURE_STREAM,
    erased_ids,
    line_fields,
    same_event,
    same_new_event,
    with_personal,
)
from projections.replay import ledger_at
from projections.session import QUEUE_SHARED
from projections.timefmt import format_micros, parse_offset_time
from projections.validation import (
    loads_strict,
    read_float,
    require_expiry_after,
    require_name,
    require_time,
    show,
    show_keys,
)

Progress = Callable[[int, int], None]
"""progress(done, total): called now and then while a long file is read."""

ENVELOPE = ("type", "id", "time")
"""Fields of every line that are not part of the event's payload."""

RECORDED = ("position", "recorded_at")
"""What the journal recorded about an event, beside it: the arrival position and the
wall-clock recorded-at time (ISO-8601 UTC). `export --recorded` writes both for an auditor
(CSV always has the position); import ignores them, since the journal it appends to
records its own. Without them an export of an import of an export is the same file."""

# Later fields come last, so CSV columns of earlier exports keep their place.
_LATER_FIELDS = ("reason", "grant", "event", "memo", "user", "events")

PAYLOAD_FIELDS = tuple(dict.fromkeys(
    ["account", "job"]
    + [f.name for cls in EVENT_CLASSES for f in dataclasses.fields(cls)
       if f.name not in _LATER_FIELDS]
    + list(_LATER_FIELDS)
))
"""Every payload field of the vocabulary, the names first."""

CSV_COLUMNS = ("id", "type", "time", *PAYLOAD_FIELDS, "position")
"""The columns `export --format csv` writes, in order (`--recorded` adds `recorded_at`);
`RECORDED` ones are ignored on import."""

MAX_LINE_LENGTH = 64 * 1024
"""The longest JSON line or CSV cell an import reads: far above any valid event."""

_INTEGER = re.compile(r"-?[0-9]{1,20}", re.ASCII)
# A JSON number's spelling (what export writes: Python's shortest repr, 1e-05 included),
# and a bare ".5" a spreadsheet may write; the fraction's range is the event's to check.
_DECIMAL = re.compile(r"-?([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})([eE][-+]?[0-9]{1,3})?",
                      re.ASCII)
_TEXT_COLUMNS = frozenset({"id", "type", "account", "job", "pool", *_LATER_FIELDS}
                          - {"events"})
_PROGRESS_EVERY = 1000


@dataclass(frozen=True, slots=True)
class Problem:
    """One bad line of an input file."""

    line: int
    message: str
    #: (the id, the other line that uses it) when this line's id is another line's: a
    #: caller numbering its records otherwise (the HTTP service's batch, from 0) says it
    #: in its own numbers
    used_by: tuple[str, int] | None = None

    def render(self, source: str) -> str:
        """`FILE:LINE: what is wrong`."""
        return f"{source}:{self.line}: {self.message}"


def id_used_twice(line: int, event_id: str, other: int) -> Problem:
    """Line `line` gives id `event_id`, which line `other` uses for another event."""
    return Problem(line, f"id {event_id!r} is used on line {other} for another event",
                   (event_id, other))


@dataclass(frozen=True, slots=True)
class Entry:
    """One valid line: the event, its event time and its idempotency key (if given)."""

    line: int
    id: str | None
    time: int
    event: DomainEvent

    @property
    def content(self) -> str:
        """The event the line describes, canonically: what a line's derived id hashes.

        Without its `user`: an id stays in the chain forever, and a hash of a user name is
        easy to confirm by hashing guesses, which would undo an erasure. (A memo stays in,
        as it always was, so files imported before keep their ids.)
        """
        payload = to_payload(self.event)
        payload.pop("user", None)
        return canonical_json({"type": self.event.type, "time": self.time, **payload})

    @property
    def whole(self) -> str:
        """The event the line describes with every field, its `user` included: what two
        lines under one id must share to be one event."""
        return canonical_json({"type": self.event.type, "time": self.time,
                               **to_payload(self.event)})


@dataclass(slots=True)
class ImportPlan:
    """What an import would append: events in file order, or the problems that stop it."""

    source: str
    events: list[NewEvent] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # the line of each event
    decoded: list[DomainEvent] = field(default_factory=list)  # the domain event of each
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # worth a look, not a reason to refuse

    @property
    def ok(self) -> bool:
        """True when every line is valid and the plan may be appended."""
        return not self.problems


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What an import did: events newly appended, and lines already in the journal.

    `after`: the journal's head when the import took it; the events it appended are at
    the positions that follow, one after another (another writer's come before or after
    them, never between). `latest_before`: the latest event time recorded then (None: the
    journal was empty), what makes one of its events late."""

    appended: int
    already_present: int
    warnings: tuple[str, ...] = ()
    after: int = 0
    latest_before: int | None = None


class ImportRejected(ValueError):
    """An input file with bad lines: nothing was appended."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.source = source
        self.problems = list(problems)
        first = self.problems[0].render(source) if self.problems else source
        super().__init__(f"{self.bad_lines} invalid line(s) in {source}; first: {first}")

    @property
    def bad_lines(self) -> int:
        """How many lines are bad (a line may have more than one problem)."""
        return len({p.line for p in self.problems})


# -- one record ---------------------------------------------------------------------------


def parse_record(record: Mapping[str, Any]) -> tuple[str | None, int, DomainEvent]:
    """Validate one decoded line; return (id or None, event time, event). ValueError if bad."""
    plain = decode_record(record)
    return plain if plain is not None else parse_record_generic(record)


def parse_record_generic(record: Mapping[str, Any]) -> tuple[str | None, int, DomainEvent]:
    """`parse_record` field by field in Python: the definition, what every record that is
    not plain takes, and what names a bad field."""
    kind = record.get("type")
    if kind is None:
        raise ValueError(f"missing \"type\"; expected one of {', '.join(EVENT_TYPES)}")
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        raise ValueError(f"unknown type {show(kind)}; expected one of {', '.join(EVENT_TYPES)}")
    event_id = record.get("id")
    if event_id is not None:
        require_name("id", event_id)
    if any(isinstance(record.get(name), str) for name in _SPELLED_TIMES):
        record = {**record, **{name: _spelled_time(name, record[name])
                               for name in _SPELLED_TIMES if isinstance(record.get(name), str)}}
    if "time" in record and record["time"] is not None:
        time = require_time("time", record["time"])
    elif kind in _TIMELESS:
        time = TIMELINE_START
    else:
        raise ValueError(f"{kind} event is missing time")
    payload = {k: v for k, v in record.items() if k not in ENVELOPE and k not in RECORDED}
    # `from_payload` also reads stored payloads, and drops the journal's own keys there
    # (a seal; an erasure's ids it maps to `events`). No line carries one (an export never
    # writes them), so here such a key is unknown, not silently dropped.
    own = sorted(k for k in payload if k.startswith("$"))
    if own:
        raise ValueError(f"{kind} event has unknown field(s) {show_keys(own)} (a key "
                         "starting with $ is the journal's own, never a line's)")
    event = from_payload(kind, payload)
    if isinstance(event, CreditsGranted) and event.expiry is not None:
        require_time("expiry", event.expiry)
        require_expiry_after(event.expiry, time)
    return event_id, time, event


_SPELLED_TIMES = ("time", "expiry")
"""The fields a line may give as ISO 8601 text, as a body sent to the service may."""

_DIGITS = re.compile(r"-?[0-9]+")


def _spelled_time(name: str, text: str) -> int:
    """A time a line gives as text: ISO 8601 with its offset, as `POST /v1/events` takes
    it (digits in a string are not a JSON integer, and are refused alike)."""
    if _DIGITS.fullmatch(text.strip()):
        raise ValueError(f"{name} must be a JSON integer or ISO 8601 text with an offset, "
                         f"not digits in a string: {text!r}")
    try:
        return parse_offset_time(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _parse_json_line(text: str) -> tuple[str | None, int, DomainEvent]:
    if len(text) > MAX_LINE_LENGTH:
        raise ValueError(f"line is {len(text)} characters long; at most {MAX_LINE_LENGTH}")
    record = loads_strict(text)
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    return parse_record(record)


def _csv_value(column: str, text: str) -> object:
    if column in _TEXT_COLUMNS:
        return unguard(text)  # export guards text cells against spreadsheet formulas
    if column == "events":  # a list of ids, as a JSON array
        return loads_strict(unguard(text))
    if column == "success":
        lowered = text.strip().lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ValueError(f"success must be true or false, got {text!r}")
    if column == "refund_fraction":
        if not _DECIMAL.fullmatch(text):
            raise ValueError(f"refund_fraction must be a decimal number such as 0.5, "
                             f"got {show(text)}")
        return read_float(text)
    # int() would also take "1_000", "+5", " 5", Arabic-Indic or full-width digits: a
    # ledger reads plain ASCII digits only.
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"{column} must be an integer, got {show(text)}{_why_not(text)}")
    return int(text)


def _why_not(text: str) -> str:
    """Why a spelling Python would read as an integer is still refused."""
    try:
        int(text)
    except ValueError:
        return ""
    return " (only ASCII digits 0-9 after an optional -, at most 20 digits)"


# -- reading files ------------------------------------------------------------------------


def _logical_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The lines of a binary stream without their ends, split as `bytes.splitlines` splits
    (on \\n, \\r\\n and \\r), one physical line in memory at a time."""
    for physical in stream:
        yield from physical.splitlines()


def not_utf8_at(exc: UnicodeDecodeError) -> tuple[int, int, str]:
    """Where a UTF-8 decode stopped, as an editor finds it: (line, column, what), the line
    and column from 1, the column in characters as JSON's errors count it, and what names
    the byte's value and why it is not UTF-8 (a byte offset alone leaves a reader counting
    from 0 or from 1)."""
    data = bytes(exc.object)
    start = exc.start
    line_start = data.rfind(b"\n", 0, start) + 1
    line = data.count(b"\n", 0, start) + 1
    # Every byte before the bad one decoded, so this counts characters, not bytes.
    column = len(data[line_start:start].decode("utf-8", errors="replace")) + 1
    return line, column, f"byte 0x{data[start]:02x} ({exc.reason})"


def _jsonl_items(stream: IO[bytes]) -> Iterator[Entry | Problem]:
    """Each line of a JSON Lines stream as an Entry, or the Problem that stops it; blank
    lines are skipped."""
    for number, raw in enumerate(_logical_lines(stream), start=1):
        if number == 1 and raw.startswith(_BOM):
            # A byte-order mark, as some Windows tools begin a UTF-8 file with: not part of
            # the first line (and the ids derived from the lines are the same without it).
            raw = raw[len(_BOM):]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            _, column, what = not_utf8_at(exc)
            yield Problem(number, f"not UTF-8: {what} at column {column}")
            continue
        if not text.strip():
            continue
        try:
            event_id, time, event = _parse_json_line(text)
        except (ValueError, TypeError) as exc:
            yield Problem(number, str(exc))
            continue
        yield Entry(number, event_id, time, event)


_BOM = codecs.BOM_UTF8
_CHUNK_BYTES = 1 << 20


def _csv_items(stream: IO[bytes]) -> Iterator[Entry | Problem]:
    """Each row of the CSV `export --format csv` writes as an Entry or a Problem: a
    header row, an empty cell = an absent field."""
    # A byte that is not UTF-8 is read as a lone surrogate, so the row holding it is
    # named (and every other bad row too) instead of the file stopping at its first.
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="surrogateescape",
                            newline="")
    try:
        yield from _csv_rows(csv.reader(text))
    finally:
        text.detach()  # the caller's stream stays open


def _csv_rows(reader: Any) -> Iterator[Entry | Problem]:
    header = next(reader, None)
    if header is None:
        return
    bad = _not_utf8(header)
    if bad is not None:
        yield Problem(reader.line_num, bad)
        return
    columns = [c.strip() for c in header]
    unknown = [c for c in columns if c not in CSV_COLUMNS and c not in RECORDED]
    if unknown or "type" not in columns:
        why = (f"unknown column(s) {', '.join(map(repr, unknown))}" if unknown
               else "no \"type\" column")
        yield Problem(1, f"{why}; expected a header of {', '.join(CSV_COLUMNS)}")
        return
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        yield Problem(1, f"column(s) {', '.join(map(repr, repeated))} appear more than once")
        return
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            # A malformed or oversized cell: the reader cannot resynchronise, so this is
            # the last line read (the import is refused anyway).
            yield Problem(reader.line_num, f"not valid CSV: {exc}")
            break
        number = reader.line_num
        bad = _not_utf8(row, columns)
        if bad is not None:
            yield Problem(number, bad)
            continue
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(columns):
            yield Problem(number, f"{len(row)} cells, the header has {len(columns)}")
            continue
        longest = max(row, key=len)
        if len(longest) > MAX_LINE_LENGTH:
            yield Problem(number, f"a cell is {len(longest)} characters long; "
                                  f"at most {MAX_LINE_LENGTH}")
            continue
        try:
            record = {
                column: _csv_value(column, cell)
                for column, cell in zip(columns, row, strict=True)
                if cell != "" and column not in RECORDED
            }
            event_id, time, event = parse_record(record)
        except (ValueError, TypeError) as exc:
            yield Problem(number, str(exc))
            continue
        yield Entry(number, event_id, time, event)


_ESCAPED = re.compile("[\udc80-\udcff]")
"""A byte that is not UTF-8, as `surrogateescape` reads it."""


def _not_utf8(row: list[str], columns: list[str] | None = None) -> str | None:
    """What is wrong with a row read with `surrogateescape` holding a byte that is not
    UTF-8 (its value and cell), None when every byte was."""
    for index, cell in enumerate(row):
        found = _ESCAPED.search(cell)
        if found is not None:
            byte = ord(found.group()) - 0xDC00
            where = (f"column {columns[index]!r}" if columns is not None and index < len(columns)
                     else f"cell {index + 1}")
            return f"not UTF-8: byte 0x{byte:02x} in {where}"
    return None


def _items(stream: IO[bytes], fmt: str) -> Iterator[Entry | Problem]:
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"unknown import format {fmt!r}; expected jsonl or csv")
    return _csv_items(stream) if fmt == "csv" else _jsonl_items(stream)


def _collect(items: Iterable[Entry | Problem],
             progress: Progress | None = None,
             total: int = 0) -> tuple[list[Entry], list[Problem]]:
    entries: list[Entry] = []
    problems: list[Problem] = []
    for item in items:
        if isinstance(item, Problem):
            problems.append(item)
        else:
            entries.append(item)
        if progress is not None and item.line % _PROGRESS_EVERY == 0:
            progress(item.line, total)
    if progress is not None:
        progress(total, total)
    problems.sort(key=lambda p: p.line)
    return entries, problems


def read_jsonl(data: bytes, progress: Progress | None = None) -> tuple[list[Entry], list[Problem]]:
    """Parse JSON Lines; blank lines are skipped. Returns (valid entries, problems)."""
    return _collect(_jsonl_items(io.BytesIO(data)), progress, len(data.splitlines()))


def read_csv(data: bytes, progress: Progress | None = None) -> tuple[list[Entry], list[Problem]]:
    """Parse the CSV `export --format csv` writes: a header row, empty cell = absent field."""
    return _collect(_csv_items(io.BytesIO(data)), progress, max(data.count(b"\n"), 1))


# -- ids and streams ----------------------------------------------------------------------


def content_id(content: str, occurrence: int) -> str:
    """The id of a line that has none, from the event it describes (`Entry.content`) and
    how many identical lines came before it in the file (0 for the first)."""
    digest = hashlib.sha256(f"{occurrence}\n{content}".encode()).hexdigest()
    return f"import-{digest[:15]}"


def _job_accounts_in_journal(journal: JournalLike, jobs: set[str]) -> dict[str, str]:
    """Accounts of the given jobs as the projection holds them (only if needed): the
    account whose submit the fold took, the first on the timeline, even where another
    account's submit of the same id was recorded first. Read by `ledger_at`: the newest
    valid checkpoint and the events after it (or a fold of the journal, when there is
    none)."""
    if not jobs:
        return {}
    index = ledger_at(journal).jobs
    return {job: index[job].account for job in jobs if job in index}


def _stream(event: DomainEvent, job_accounts: Mapping[str, str]) -> str:
    if isinstance(event, PersonalDataErased):
        return ERASURE_STREAM
    account = getattr(event, "account", None)
    if isinstance(account, str):
        return account
    job: str = getattr(event, "job")  # noqa: B009 - every other event names a job
    return job_accounts.get(job, job_stream(job))


_JOB_EVENT_TYPES = frozenset(kind.type for kind in JOB_EVENTS)


def _note_submit(event: JobSubmitted, time: int, job_accounts: dict[str, str],
                 submitted_at: dict[str, int],
                 accounts: dict[str, str] | None = None) -> None:
    """Learn a job's account from a submit of the file: that of its first submit on the
    timeline (the earliest time, then the earlier line), the one the fold takes when two
    accounts submitted one id. `accounts` (optional) interns the account names."""
    first = submitted_at.get(event.job)
    if first is not None and first <= time:
        return
    submitted_at[event.job] = time
    account = event.account
    job_accounts[event.job] = (account if accounts is None
                               else accounts.setdefault(account, account))


def _in_recorded_stream(old: RecordedEvent, event: NewEvent) -> NewEvent:
    """`event` in the stream `old` was recorded in, when both are the same kind of job
    event under one id. A job event's stream is not in its line: the import derives it
    from where the job's submit is, which a file that grew (another account's submit of
    the same job) may change; the line recorded before is still that one event."""
    if (event.type in _JOB_EVENT_TYPES and old.type == event.type
            and old.stream != event.stream):
        return dataclasses.replace(event, stream=old.stream)
    return event


def _in_recorded_streams(journal: JournalLike, events: Sequence[NewEvent]) -> list[NewEvent]:
    """`events` with each job event recorded before under its id in the stream it was
    recorded in (see `_in_recorded_stream`): one lookup for the job events, none when
    there are none."""
    ids = [e.id for e in events if e.type in _JOB_EVENT_TYPES]
    if not ids:
        return list(events)
    recorded = journal.get_many(ids)
    return [_in_recorded_stream(old, e) if (old := recorded.get(e.id)) is not None else e
            for e in events]


def far_time_problem(name: str, time: int) -> str | None:
    """Why an event time is refused as probably milliseconds, or None if it is fine."""
    if time <= FAR_TIME:
        return None
    return (f"{name} {time} is after 2200-01-01 ({FAR_TIME} in epoch seconds): probably "
            "milliseconds; give seconds, or allow far times (--allow-far-times) if meant")


def plan_import(data: bytes, source: str, journal: JournalLike, *, fmt: str = "jsonl",
                progress: Progress | None = None,
                allow_far_times: bool = False) -> ImportPlan:
    """Validate a whole file and build the events an import appends (or its problems)."""
    if fmt not in ("jsonl", "csv"):
        raise ValueError(f"unknown import format {fmt!r}; expected jsonl or csv")
    reader = read_csv if fmt == "csv" else read_jsonl
    entries, problems = reader(data, progress)
    return plan_entries(entries, source, journal, problems=problems,
                        allow_far_times=allow_far_times)


def plan_entries(entries: Sequence[Entry], source: str, journal: JournalLike, *,
                 problems: Iterable[Problem] = (),
                 allow_far_times: bool = False) -> ImportPlan:
    """`plan_import` for lines already parsed (each `Entry` as `parse_record` made it, in
    file order; `problems`: the lines that did not parse), so a caller that validated
    each record itself (the HTTP service) does not have them serialised and read again.
    The plan's `decoded` holds the domain event of each planned event."""
    plan = ImportPlan(source, problems=list(problems))
    if not allow_far_times:
        for entry in entries:
            why = far_time_problem("time", entry.time)
            if why is not None:
                plan.problems.append(Problem(entry.line, why))
    job_accounts: dict[str, str] = {}
    submitted_at: dict[str, int] = {}
    for e in entries:
        if isinstance(e.event, JobSubmitted):
            _note_submit(e.event, e.time, job_accounts, submitted_at)
    orphans = {e.event.job for e in entries
               if isinstance(e.event, JOB_EVENTS)
               } - set(job_accounts)
    if not plan.problems:
        job_accounts.update(_job_accounts_in_journal(journal, orphans))
    # id -> the first entry under it; two entries under one id must be one event (their
    # `whole`, computed only then: most ids come once).
    seen: dict[str, Entry] = {}
    occurrences: dict[str, int] = {}
    streams: dict[str, tuple[str, str]] = {}  # id -> (type, stream) of the file's events
    derived: list[NewEvent] = []
    # Events a void or a reversal may name before their line: those with an `id`.
    ahead: dict[str, DomainEvent] = {}
    for entry in entries:
        if entry.id is not None:
            ahead.setdefault(entry.id, entry.event)

    def so_far(target: str) -> tuple[str, str] | None:
        found = streams.get(target)
        if found is None:
            rec = journal.get(target)
            found = None if rec is None else (rec.type, rec.stream)
        return found

    find = _looking_ahead(so_far, ahead, job_accounts)

    for entry in entries:
        event_id = entry.id
        if event_id is None:
            content = entry.content
            occurrence = occurrences.get(content, 0)
            occurrences[content] = occurrence + 1
            event_id = content_id(content, occurrence)
        first = seen.get(event_id)
        if first is not None and first.whole != entry.whole:
            plan.problems.append(id_used_twice(entry.line, event_id, first.line))
            continue
        seen.setdefault(event_id, entry)
        try:
            stream = _correction_stream(entry.event, find)
        except ValueError as exc:
            plan.problems.append(Problem(entry.line, str(exc)))
            continue
        if stream is None:
            stream = _stream(entry.event, job_accounts)
        streams.setdefault(event_id, (entry.event.type, stream))
        public, personal = split_personal(to_payload(entry.event))
        new = NewEvent(event_id, stream, entry.event.type, entry.time, public, personal)
        plan.events.append(new)
        plan.lines.append(entry.line)
        plan.decoded.append(entry.event)
        if entry.id is None:
            derived.append(new)
    plan.problems.sort(key=lambda p: p.line)
    if not plan.problems:
        # A job event recorded before keeps its stream (see `_in_recorded_stream`).
        plan.events = _in_recorded_streams(journal, plan.events)
        if derived:
            plan.warnings.extend(_redelivery_warnings(journal, derived, source))
    return plan


def _correction_stream(event: DomainEvent,
                       find: Callable[[str], tuple[str, str] | None]) -> str | None:
    """The stream of a void or a reversal: that of the event it names, which must be in
    the journal or in the file (`find` gives its type and stream); None for other
    events."""
    target = _named_by(event)
    if target is None:
        return None
    wanted = "grant" if isinstance(event, GrantVoided) else None
    found = find(target)
    if found is None:
        raise ValueError(f"{event.type} names event {target!r}, which is neither in the "
                         "journal nor in the file")
    if wanted is not None and found[0] != wanted:
        raise ValueError(f"void names event {target!r}, which is a {found[0]}, not a grant")
    return found[1]


_Finder = Callable[[str], "tuple[str, str] | None"]


def _looking_ahead(so_far: _Finder, ahead: Mapping[str, DomainEvent],
                   job_accounts: Mapping[str, str]) -> _Finder:
    """`so_far` (the events recorded or planned before a line), also finding the events
    `ahead` (later in the file, by id) as they will be planned: a void or a reversal
    timed before the event it names comes first in an export."""
    resolving: set[str] = set()

    def find(target: str) -> tuple[str, str] | None:
        found = so_far(target)
        event = ahead.get(target) if found is None else None
        if event is None or target in resolving:
            return found  # (corrections naming each other in a ring name nothing)
        resolving.add(target)
        try:
            stream = _correction_stream(event, find)
        except ValueError:
            return None  # it names nothing itself: its own line says so
        finally:
            resolving.discard(target)
        return event.type, stream if stream is not None else _stream(event, job_accounts)

    return find


def _chains_ahead(stream: IO[bytes], fmt: str, journal: JournalLike,
                  ahead: dict[str, DomainEvent]) -> None:
    """Add to `ahead` the events that the corrections in it name, and so on down the
    chain: a reversal of a void timed before both comes first in an export, then the
    grant, then the void (and reversals of reversals in any order), so the void's grant
    is needed before its line. The survey keeps only events named by an earlier line;
    the file is read again for the rest, once per link (chains are short)."""
    while True:
        wanted = {target for event in ahead.values()
                  if (target := _named_by(event)) is not None and target not in ahead
                  and journal.get(target) is None}
        if not wanted:
            return
        stream.seek(0)
        before = len(ahead)
        for item in _items(stream, fmt):
            if not isinstance(item, Problem) and item.id in wanted:
                ahead.setdefault(item.id, item.event)
        if len(ahead) == before:
            return  # the rest is nowhere in the file: their own lines say so


def _redelivery_warnings(journal: JournalLike, derived: Sequence[NewEvent],
                         source: str) -> list[str]:
    """A warning when lines without ids match events already recorded under other ids
    (same account, type, amount, pool and time; an event without an amount, the same
    content and time): the file may be a re-delivery of events imported before (under ids given
    then, or derived another way)."""
    new = [e for e in derived if journal.get(e.id) is None]
    if not new:
        return []

    key = _redelivery_key
    low, high = min(e.time for e in new), max(e.time for e in new)
    mine = {e.id for e in new}
    recorded = {key(r.stream, r.type, r.time, r.payload)
                for r in journal.read(from_time=low, to_time=high, order="canonical")
                if r.id not in mine}
    matches = [e for e in new if key(e.stream, e.type, e.time, e.payload) in recorded]
    if not matches:
        return []
    return [_redelivery_text(source, len(matches), len(new), matches[0])]


def _redelivery_key(stream: str, kind: str, time: int,
                    payload: Mapping[str, Any]) -> tuple[Any, ...]:
    account = payload.get("account", stream)
    if "amount" in payload:
        # The pool too: usage of the same amount in the same second in another pool is
        # another report (a re-delivery names the pool its report named).
        return (account, kind, payload["amount"], payload.get("pool"), time)
    # An event without an amount (a job's, an account's settings, a void, a reversal)
    # matches by all it says: keyed on its account, type and time alone, another job
    # submitted, another grant voided or a new cap in the same second passed for a copy.
    # (Keys under "$" are the journal's own: a private part's seal differs per event.)
    said = {key: value for key, value in payload.items() if not key.startswith("$")}
    return (account, kind, canonical_json(said), time)


def _redelivery_text(source: str, matches: int, new: int,
                     first: NewEvent | RecordedEvent) -> str:
    payload = first.payload
    when = ("from the start of the timeline" if first.time == TIMELINE_START
            else f"at {first.time}")
    return (f"{source}: {matches} of {new} new line(s) without an id match events "
            "already in the journal under other ids (same account, type, amount, pool and "
            "time; without an amount, the same content and time; first: "
            f"{first.type}{_what(payload)} for {payload.get('account', first.stream)} "
            f"{when}): is this file a re-delivery? They were appended; reverse them if "
            "they are duplicates")


def _what(payload: Mapping[str, Any]) -> str:
    """What a possibly re-delivered event was about, after its type: its amount, or what
    it names."""
    if "amount" in payload:
        pool = payload.get("pool")
        return f" of {payload['amount']}" + (f" in pool {pool!r}" if pool else "")
    for name in ("job", "grant", "event"):
        if name in payload:
            return f" of {name} {payload[name]!r}"
    return ""


def _conflicts(journal: JournalLike, plan: ImportPlan) -> list[Problem]:
    """Lines whose id is already recorded with other content."""
    problems = []
    for event, line in zip(plan.events, plan.lines, strict=True):
        old = journal.get(event.id)
        if old is None:
            continue
        if not same_event(journal, old, event):
            problems.append(Problem(line, f"id {event.id!r} is already recorded at position "
                                          f"{old.position} as another event"))
    return problems


def append_plan(journal: JournalLike, plan: ImportPlan) -> ImportResult:
    """Append a valid plan in one atomic batch; ImportRejected if any line conflicts."""
    if not plan.ok:
        raise ImportRejected(plan.source, plan.problems)
    try:
        # The queue's key, shared: a start_next deciding meanwhile must not miss a late
        # event of this file that changes which jobs are pending.
        with journal.transaction([QUEUE_SHARED]) as tx:
            before = tx.hold_head()  # what is appended from here on is this plan's
            latest = journal.max_time()
            recorded = tx.append(plan.events) if plan.events else []
    except IdempotencyConflict as exc:
        problems = _conflicts(journal, plan) or [Problem(plan.lines[0], str(exc))]
        raise ImportRejected(plan.source, problems) from None
    appended = len({r.position for r in recorded if r.position > before})
    return ImportResult(appended, len(plan.events) - appended, tuple(plan.warnings),
                        before, latest)


def import_file(journal: JournalLike, data: bytes, source: str, *, fmt: str = "jsonl",
                progress: Progress | None = None,
                allow_far_times: bool = False) -> ImportResult:
    """Validate then append a whole file: all or nothing (ImportRejected names bad lines)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        # The file's bytes, not text: ids and the UTF-8 check are of what was delivered.
        raise TypeError("data must be bytes (a file's content as open(path, 'rb').read() "
                        f"gives), got {type(data).__name__}"
                        + (": pass text.encode()" if isinstance(data, str) else ""))
    return import_stream(journal, io.BytesIO(data), source, fmt=fmt, checking=progress,
                         allow_far_times=allow_far_times)


APPEND_CHUNK = 5000
"""Events an import appends at a time, all inside its one transaction."""


@dataclass(slots=True)
class Survey:
    """What the first pass over a file learns: its problems, and what the events of the
    second pass need from the whole file. It needs no journal (`survey_stream`), and
    one import uses it once (`import_stream` adds the journal's job accounts to it)."""

    problems: list[Problem] = field(default_factory=list)
    lines: int = 0  # lines holding an event (valid or not)
    job_accounts: dict[str, str] = field(default_factory=dict)  # job -> account, submits
    repeated: set[int] = field(default_factory=set)  # hashes of contents seen twice or more
    # The events a void or a reversal names by id, when they come after it: rare (an
    # export lists a correction timed before its event first), so kept whole.
    ahead: dict[str, DomainEvent] = field(default_factory=dict)
    # Jobs whose events come before any submit of theirs in the file: their accounts are
    # looked up in the journal.
    orphans: set[str] = field(default_factory=set)
    # Lines at far event times (without --allow-far-times): refused by the second pass
    # unless their event is recorded already, since the rule is for new events (a file
    # imported with the flag may be imported again without it, and appends nothing).
    far: list[Problem] = field(default_factory=list)
    # What only the second pass can refuse, against the journal: (id named, by a void?)
    # of every void and reversal, and whether an `id` is given on more than one line.
    targets: set[tuple[str, bool]] = field(default_factory=set)
    ids_repeat: bool = False


def survey_stream(stream: IO[bytes], *, fmt: str = "jsonl",
                  progress: Progress | None = None, allow_far_times: bool = False) -> Survey:
    """The first pass of `import_stream` on its own: every line checked, nothing read from
    a journal nor written (the command line runs it before it creates a database file, so
    a file of bad lines leaves none behind). Its problems are in `problems`, and in `far`
    the lines at far event times (every one new to a new file)."""
    stream.seek(0, io.SEEK_END)
    size = stream.tell()
    stream.seek(0)
    return _survey(stream, fmt, size, progress, allow_far_times)


def _survey(stream: IO[bytes], fmt: str, size: int,
            progress: Progress | None, allow_far_times: bool) -> Survey:
    """Check every line; learn the accounts of jobs and which contents repeat."""
    found = Survey()
    accounts: dict[str, str] = {}  # one string per account, however many jobs name it
    early: set[str] = set()  # jobs named by a job event before any submit of theirs
    submitted_at: dict[str, int] = {}  # job -> time of its first submit on the timeline
    # A hash per line without an id (a few bytes, not the line): the contents whose hash
    # comes back are counted exactly in the second pass, to number identical lines.
    hashes = array("q")
    named: set[str] = set()  # the ids voids and reversals name
    ids = array("q")  # a hash per line with an id: one on two lines may be two events
    for item in _items(stream, fmt):
        found.lines += 1
        if progress is not None and found.lines % _PROGRESS_EVERY == 0:
            progress(stream.tell(), size)
        if isinstance(item, Problem):
            found.problems.append(item)
            continue
        if item.id in named:
            found.ahead.setdefault(item.id, item.event)
        target = _named_by(item.event)
        if target is not None:
            named.add(target)
            found.targets.add((target, isinstance(item.event, GrantVoided)))
        if item.id is not None:
            ids.append(hash(item.id))
        if not allow_far_times:
            why = far_time_problem("time", item.time)
            if why is not None:
                found.far.append(Problem(item.line, why))
        event = item.event
        if isinstance(event, JobSubmitted):
            _note_submit(event, item.time, found.job_accounts, submitted_at, accounts)
        elif (isinstance(event, JOB_EVENTS)
              and event.job not in found.job_accounts):
            early.add(event.job)
        if item.id is None:
            hashes.append(hash(item.content))
    if progress is not None:
        progress(size, size)
    ordered = sorted(hashes)
    del hashes
    found.repeated = {a for a, b in itertools.pairwise(ordered) if a == b}
    del ordered
    found.ids_repeat = any(a == b for a, b in itertools.pairwise(sorted(ids)))
    found.orphans = {job for job in early if job not in found.job_accounts}
    return found


def may_refuse_on_empty(stream: IO[bytes], fmt: str, survey: Survey) -> bool:
    """Whether the second pass of an import into an empty journal may refuse a line of a
    file whose first pass (`survey`) found nothing: a void or a reversal naming no event
    of the file (a void, none that is a grant; reversals naming each other in a ring), or
    an `id` on two lines, which may be two events. The file is read once more when it
    holds corrections, keeping the events they name (one per correction). It errs on the
    side of True (an id the file only derives, a hash that collides): the caller then
    makes the second pass on an empty journal in memory to know."""
    if survey.ids_repeat:
        return True
    if not survey.targets:
        return False
    wanted = {target for target, _ in survey.targets}
    named: dict[str, DomainEvent] = {}  # id -> the event of its first line
    stream.seek(0)
    for item in _items(stream, fmt):
        if not isinstance(item, Problem) and item.id in wanted:
            named.setdefault(item.id, item.event)
    stream.seek(0)

    def resolves(target: str, by_void: bool, seen: frozenset[str]) -> bool:
        event = named.get(target)
        if event is None or target in seen:
            return False
        if by_void:
            return isinstance(event, CreditsGranted)
        inner = _named_by(event)  # a reversal of a correction: that one must resolve too
        return inner is None or resolves(inner, isinstance(event, GrantVoided),
                                         seen | {target})

    return not all(resolves(target, by_void, frozenset())
                   for target, by_void in survey.targets)


def _named_by(event: DomainEvent) -> str | None:
    """The id a void or a reversal names; None for other events."""
    if isinstance(event, GrantVoided):
        return event.grant
    if isinstance(event, EventReversed):
        return event.event
    return None


class _Appender:
    """The second pass's writer: appends a chunk of planned events at a time, and keeps
    per event appended by this import only its line and whether its id was derived."""

    def __init__(self, journal: JournalLike, problems: list[Problem], start: int) -> None:
        self.journal = journal
        self.problems = problems
        self.start = start  # the head, held by the transaction: nobody appends after it
        self.lines = array("I")  # line of the event at position start + 1 + i
        self.derived = bytearray()  # 1 where that event's id was derived from its content
        self.planned = 0
        self.events: list[NewEvent] = []
        self.event_lines: list[int] = []
        self.derived_ids: list[bool] = []
        self.streams: dict[str, tuple[str, str]] = {}  # this chunk's ids -> (type, stream)
        # Lines with personal fields taken for events whose personal fields were erased:
        # (line, id). Nothing can tell a re-delivery from another user's report then.
        self.erased_matches: list[tuple[int, str]] = []
        self._erased_ids: frozenset[str] | None = None  # read once, when first needed

    def add(self, event: NewEvent, line: int, derived: bool) -> None:
        self.events.append(event)
        self.event_lines.append(line)
        self.derived_ids.append(derived)
        self.streams.setdefault(event.id, (event.type, event.stream))
        self.planned += 1
        if len(self.events) >= APPEND_CHUNK:
            self.flush()

    def find(self, event_id: str) -> tuple[str, str] | None:
        """(type, stream) of an event recorded before, or planned earlier in the file.

        The journal is asked first (inside the transaction: earlier chunks too): an id
        that a later chunk uses again for another event is refused, so the first line
        that used it is the one a void or a reversal names, as when the whole file is
        planned at once."""
        rec = self.journal.get(event_id)
        if rec is not None:
            return rec.type, rec.stream
        return self.streams.get(event_id)

    def line_of(self, position: int) -> int:
        return self.lines[position - self.start - 1]

    def flush(self) -> None:
        events, lines, derived = self.events, self.event_lines, self.derived_ids
        self.events, self.event_lines, self.derived_ids, self.streams = [], [], [], {}
        if not events:
            return
        try:
            recorded = self.journal.append(events)
        except IdempotencyConflict:
            # Rare: an id of this chunk names another event, earlier in the file or
            # recorded before. Name each such line, and append the others.
            keep = self._without_conflicts(events, lines, derived)
            events, lines, derived = keep
            recorded = self.journal.append(events) if events else []
        sealed: dict[str, int] = {}
        for rec, line, is_derived, event in zip(recorded, lines, derived, events, strict=True):
            # New events take the next positions in order; an id repeated with the same
            # content comes back with the position it already has.
            if rec.position == self.start + len(self.lines) + 1:
                self.lines.append(line)
                self.derived.append(is_derived)
            elif event.private and PRIVATE_KEY in rec.payload and rec.position <= self.start:
                sealed.setdefault(rec.id, line)
        if sealed:
            held = self.journal.private(sealed)
            self.erased_matches += [(line, i) for i, line in sealed.items() if i not in held]

    def _erased_copy(self, old: RecordedEvent, new: NewEvent) -> bool:
        """Whether `old`, recorded before this import, is an event whose personal fields
        an erasure named before it was copied here (export, then import): recorded
        without them and without their seal, it differs from a line that still has them
        in those fields alone. Where the fields were erased in this journal, the seal
        tells (`same_event`); in a copy only the `erase` event does."""
        if (old.position > self.start or PRIVATE_KEY in old.payload or not new.private
                or not _differs_only_in_person(old, new)):
            return False
        if self._erased_ids is None:
            self._erased_ids = erased_ids(self.journal)
        return old.id in self._erased_ids

    def _without_conflicts(self, events: list[NewEvent], lines: list[int],
                           derived: list[bool]) -> tuple[list[NewEvent], list[int], list[bool]]:
        kept: tuple[list[NewEvent], list[int], list[bool]] = ([], [], [])
        first: dict[str, tuple[NewEvent, int]] = {}
        for event, line, is_derived in zip(events, lines, derived, strict=True):
            old = self.journal.get(event.id)
            if old is not None:
                event = _in_recorded_stream(old, event)
            earlier = first.get(event.id)
            if earlier is not None:
                if not same_new_event(earlier[0], event):
                    self.problems.append(id_used_twice(line, event.id, earlier[1]))
                    continue
            else:
                if old is not None and not same_event(self.journal, old, event):
                    if not self._erased_copy(old, event):
                        self.problems.append(self._conflict(line, old, event,
                                                            is_derived))
                        continue
                    # The copy's record of an event whose fields were erased where it
                    # came from: already present, as in the journal it came from.
                    self.erased_matches.append((line, event.id))
                    event = NewEvent(old.id, old.stream, old.type, old.time, dict(old.payload))
                # A repeat of a line an earlier chunk appended is named by that first line,
                # as the plan of a whole file names it.
                first[event.id] = (event, self.line_of(old.position)
                                   if old is not None and old.position > self.start else line)
            kept[0].append(event)
            kept[1].append(line)
            kept[2].append(is_derived)
        return kept

    def _conflict(self, line: int, old: RecordedEvent, event: NewEvent,
                  derived: bool) -> Problem:
        """Why line `line`, whose id names `old`, is refused."""
        if old.position > self.start:
            return id_used_twice(line, event.id, self.line_of(old.position))
        why = f"id {event.id!r} is already recorded at position {old.position} as another event"
        if PRIVATE_KEY in old.payload and not event.private and _differs_only_in_person(
                old, event):
            # A copy made before an erasure, caught up from an export made after it.
            why += (" (the same event without its user and memo: they were erased where "
                    "the file came from, and this journal still holds them; erase them "
                    f"here too, gpu-credits erase --event {shlex.quote(event.id)}, then "
                    "import the file again)")
        elif derived and _differs_only_in_person(old, event):
            why += (" (the same event for another user: the id a line without one gets "
                    "leaves its user out; give such lines an id)")
        return Problem(line, why)

    def erased_warnings(self, source: str) -> list[str]:
        """A warning for the lines taken as events whose personal fields were erased."""
        if not self.erased_matches:
            return []
        line, event_id = min(self.erased_matches)
        return [f"{source}: {len(self.erased_matches)} line(s) with a user or memo (first: "
                f"line {line}) were taken as already present as events whose personal "
                f"fields were erased (first: {event_id!r}), which nothing can tell apart "
                "from another user's report of the same usage; if one is not a "
                "re-delivery, import it again with an id of its own"]

    def redelivery_warnings(self, source: str) -> list[str]:
        """`_redelivery_warnings` for the events this import appended with derived ids,
        read back from the journal instead of held in memory."""
        new = self.derived.count(1)
        if not new:
            return []
        mine = self.journal.read(after_position=self.start, order="position")
        low = high = None
        for rec, flag in zip(mine, self.derived, strict=False):
            if flag:
                low = rec.time if low is None else min(low, rec.time)
                high = rec.time if high is None else max(high, rec.time)
        # A set: read in canonical order, which walks the time range alone (arrival
        # order would test every event recorded before).
        recorded = {_redelivery_key(r.stream, r.type, r.time, r.payload)
                    for r in self.journal.read(from_time=low, to_time=high,
                                               to_position=self.start, order="canonical")}
        if not recorded:
            return []
        matches, first = 0, None
        mine = self.journal.read(after_position=self.start, order="position")
        for rec, flag in zip(mine, self.derived, strict=False):
            if flag and _redelivery_key(rec.stream, rec.type, rec.time, rec.payload) in recorded:
                matches += 1
                first = first or rec
        if first is None:
            return []
        return [_redelivery_text(source, matches, new, first)]


def _differs_only_in_person(old: RecordedEvent, new: NewEvent) -> bool:
    """Whether a recorded event and a new one differ in their personal fields alone."""
    public = {k: v for k, v in old.payload.items() if k != PRIVATE_KEY}
    return (old.type, old.time, old.stream, public) == (new.type, new.time, new.stream,
                                                        dict(new.payload))


def import_stream(journal: JournalLike, stream: IO[bytes], source: str, *,
                  fmt: str = "jsonl", checking: Progress | None = None,
                  appending: Progress | None = None,
                  allow_far_times: bool = False,
                  survey: Survey | None = None) -> ImportResult:
    """Validate then append a file read from a seekable binary `stream`, all or nothing,
    in memory that does not grow with the file (see the module doc).

    `checking(done, total)` follows the first pass in bytes, `appending(done, total)` the
    second in lines; `survey`: the first pass, already made by `survey_stream` on this
    stream with the same format and far-time rule (it is not made again). ImportRejected
    names every bad line; then nothing was appended.
    """
    if survey is None:
        survey = survey_stream(stream, fmt=fmt, progress=checking,
                               allow_far_times=allow_far_times)
    if not survey.problems:
        survey.job_accounts.update(_job_accounts_in_journal(journal, survey.orphans))
        _chains_ahead(stream, fmt, journal, survey.ahead)
    problems = survey.problems
    occurrences: dict[str, int] = {}
    with journal.transaction([QUEUE_SHARED]) as tx:  # see `append_plan`
        # The head is taken now, not at the first append: events another writer commits
        # meanwhile would otherwise pass for this import's own (in its counts, and in
        # what the command line reports it did).
        writer = _Appender(journal, problems, tx.hold_head())
        latest_before = journal.max_time()
        find = _looking_ahead(writer.find, survey.ahead, survey.job_accounts)
        stream.seek(0)
        done = 0
        for item in _items(stream, fmt):
            done += 1
            if appending is not None and done % _PROGRESS_EVERY == 0:
                appending(done, survey.lines)
            if isinstance(item, Problem):
                continue  # reported by the first pass
            content = item.content
            event_id = item.id
            if event_id is None:
                occurrence = 0
                if hash(content) in survey.repeated:
                    occurrence = occurrences.get(content, 0)
                    occurrences[content] = occurrence + 1
                event_id = content_id(content, occurrence)
            if not allow_far_times and (why := far_time_problem("time", item.time)):
                old = journal.get(event_id)
                if old is None or old.position > writer.start:
                    problems.append(Problem(item.line, why))  # (the rest of it checked on)
            try:
                stream_name = _correction_stream(item.event, find)
            except ValueError as exc:
                problems.append(Problem(item.line, str(exc)))
                continue
            if stream_name is None:
                stream_name = _stream(item.event, survey.job_accounts)
            public, personal = split_personal(to_payload(item.event))
            writer.add(NewEvent(event_id, stream_name, item.event.type, item.time, public,
                                personal), item.line, item.id is None)
        writer.flush()
        if appending is not None:
            appending(survey.lines, survey.lines)
        if problems:
            problems.sort(key=lambda p: p.line)
            # Leaving the block by an exception rolls back every chunk appended.
            raise ImportRejected(source, problems)
        warnings = writer.redelivery_warnings(source) + writer.erased_warnings(source)
    appended = len(writer.lines)
    return ImportResult(appended, writer.planned - appended, tuple(warnings),
                        writer.start, latest_before)


# -- export -------------------------------------------------------------------------------


_TIMELESS = ("account", "reverse")
"""Types whose line may leave out its time: an `account` event then counts from the start
of the timeline, and so does a reversal (of such an account event: the command line
records a reversal at its event's time, and the start is no time a line can write)."""


def export_record(rec: RecordedEvent, personal: dict[str, Any] | None = None
                  ) -> dict[str, Any]:
    """One recorded event as an import line: type, payload, time (if any) and id.

    `personal`: its personal fields still held beside it (`projections.personal`); the
    journal's own keys (a seal) never appear in a line."""
    record: dict[str, Any] = {"type": rec.type, **line_fields(rec, personal)}
    if not (rec.type in _TIMELESS and rec.time == TIMELINE_START):
        record["time"] = rec.time
    record["id"] = rec.id
    return record


def export_records(journal: JournalLike) -> Iterator[tuple[RecordedEvent, dict[str, Any]]]:
    """Every recorded event in canonical order, with its import line (personal fields
    included while they are held: an erased one is simply absent)."""
    for rec, personal in with_personal(journal, journal.read(order="canonical")):
        yield rec, export_record(rec, personal)


def write_jsonl(records: Iterable[tuple[RecordedEvent, dict[str, Any]]], out: TextIO, *,
                recorded: bool = False) -> int:
    """Write JSON Lines (with `recorded`, each line ends with its `RECORDED` fields);
    return the number of lines."""
    count = 0
    for rec, record in records:
        line = record if not recorded else {
            **record, "position": rec.position, "recorded_at": format_micros(rec.recorded_at)}
        out.write(json.dumps(line, ensure_ascii=False))
        out.write("\n")
        count += 1
    return count


def _csv_cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return canonical_json(list(value))
    # Numbers stay numbers: the writer guards text cells only (a negative amount is no
    # formula).
    return value if isinstance(value, int | float | str) else str(value)


def write_csv(records: Iterable[tuple[RecordedEvent, dict[str, Any]]], out: TextIO, *,
              recorded: bool = False) -> int:
    """Write CSV with `CSV_COLUMNS` (and `recorded_at` with `recorded`); return the number
    of rows (header not counted).

    Text cells that a spreadsheet would run as a formula are guarded (`csvcells`)."""
    columns = (*CSV_COLUMNS, "recorded_at") if recorded else CSV_COLUMNS
    writer = csvcells.writer(out)
    writer.writerow(columns)
    count = 0
    for rec, record in records:
        extra = sorted(set(record) - set(CSV_COLUMNS))
        if extra:
            raise ValueError(f"event {rec.id!r} at position {rec.position} has field(s) "
                             f"{', '.join(extra)} that CSV cannot carry; export as jsonl")
        row = {**record, "position": rec.position}
        if recorded:
            row["recorded_at"] = format_micros(rec.recorded_at)
        writer.writerow([_csv_cell(row.get(c)) for c in columns])
        count += 1
    return count
