"""Reports across accounts: every account's figures, credits expiring soon, the job list."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from eventstore import JournalLike
from eventstore.hashing import load_json
from projections.checkpoint import CheckpointError, log
from projections.decoding import decode_event
from projections.events import TIMELINE_START, JobSubmitted
from projections.figures import Ending, Figures, ending_credits
from projections.ledger import JOB_STATES, JobState, Ledger
from projections.queries.common import (
    fold_as_known,
    latest_time,
    names_account,
    recorded_position,
    unknown_account,
)
from projections.replay import exact_view, excluded_as_known, rows_of_type, view_at
from projections.validation import MAX_TIME, require_int, require_time

DEFAULT_WITHIN = 7 * 86_400
"""`expiring` looks this far ahead unless told otherwise: seven days, in seconds."""


# -- accounts ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AccountRow:
    """One account's figures, and its job limits."""

    account: str
    figures: Figures
    opened: bool  # False: only usage reports name it (its debt still counts)
    running: int
    max_running: int | None

    # The same keys as `balance --json`, plus the account's job limits.
    json_keys: ClassVar[tuple[str, ...]] = ("account", "*figures", "opened", "running",
                                            "max_running")


@dataclass(frozen=True, slots=True)
class AccountsReport:
    """Every account of the journal at event time `at`, as known at a position."""

    at: int
    as_known_at: int
    rows: list[AccountRow]

    @property
    def pools(self) -> list[str]:
        """Every pool any account holds or owes in, sorted."""
        return sorted({p for r in self.rows for p in r.figures.pools})

    @property
    def totals(self) -> Figures:
        """The sum over every account."""
        pools = {p: sum(r.figures.pools.get(p, 0) for r in self.rows) for p in self.pools}
        return Figures(sum(r.figures.balance for r in self.rows),
                       sum(r.figures.reserved for r in self.rows),
                       sum(r.figures.available for r in self.rows),
                       sum(r.figures.debt for r in self.rows), pools)

    json_keys: ClassVar[tuple[str, ...]] = ("at:time", "as_known_at", "accounts=rows",
                                            "totals")


def account_rows(ledger: Ledger, at: int) -> list[AccountRow]:
    """Every account of a ledger (sorted by name) with its figures at `at`."""
    rows = []
    for name in sorted(ledger.accounts):
        state = ledger.accounts[name]
        rows.append(AccountRow(name, Figures.of(state, at), state.opened, state.running,
                               state.max_running))
    return rows


def accounts(journal: JournalLike, *, at: int | None = None,
             as_known_at: int | str | None = None) -> AccountsReport:
    """Every account's balance, reserved, available, debt and pools at event time `at`
    (default: the latest), from the events recorded up to `as_known_at`."""
    when = latest_time(journal) if at is None else require_time("at", at)
    position = recorded_position(journal, as_known_at)
    view = exact_view(journal, to_position=position, to_time=when)
    if view is not None:
        try:
            if view.last[0] == when:
                # The figures at the checkpoint's own time: in its summary.
                summary = view.summary()
                return AccountsReport(when, position, [
                    AccountRow(name, *summary.accounts[name])
                    for name in sorted(summary.accounts)])
            ledger = Ledger(accounts=view.accounts())  # no job decoded
            return AccountsReport(when, position, account_rows(ledger, when))
        except CheckpointError as exc:
            log.warning("checkpoint at position %s ignored (%s): folding from the "
                        "journal instead", view.position, exc)
    ledger = fold_as_known(journal, to_time=when, to_position=position)
    return AccountsReport(when, position, account_rows(ledger, when))


# -- expiring ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExpiringCredits:
    """Unused credits of one grant that stop counting within the window."""

    account: str
    pool: str
    grant: str
    ends: int  # the grant's expiry, or its void if that comes first
    amount: int  # unused and not held by a job
    held: int  # held by pending or running jobs: lapse if released after `ends`
    voided: bool  # ends by a void, not by expiry

    json_keys: ClassVar[tuple[str, ...]] = ("account", "pool", "grant", "expiry=ends",
                                            "amount", "held", "voided")


class PoolTotal(NamedTuple):
    """Credits of one account and pool that stop counting within the window."""

    account: str
    pool: str
    amount: int
    held: int


@dataclass(frozen=True, slots=True)
class ExpiringReport:
    """Credits that stop counting in `(at, until]`, soonest first: those ending at `at`
    have stopped already (credits count for `time <= t < end`), and those ending at
    `until` stop within the window."""

    at: int
    within: int
    as_known_at: int
    credits: list[ExpiringCredits]

    @property
    def until(self) -> int:
        """The end of the window (included): `at + within`, or the last valid time if
        that is earlier (no expiry lies beyond it); the start of the timeline, as `at`,
        when no event has a time yet (nothing can expire then)."""
        return self.at if self.at == TIMELINE_START else window_end(self.at, self.within)

    def totals(self) -> list[PoolTotal]:
        """(account, pool, amount, held) per account and pool, sorted."""
        sums: dict[tuple[str, str], list[int]] = {}
        for c in self.credits:
            entry = sums.setdefault((c.account, c.pool), [0, 0])
            entry[0] += c.amount
            entry[1] += c.held
        return [PoolTotal(a, p, v[0], v[1]) for (a, p), v in sorted(sums.items())]

    json_keys: ClassVar[tuple[str, ...]] = ("at:time", "within", "until:time", "as_known_at",
                                            "credits", "totals")


def window_end(at: int, within: int) -> int:
    """`at + within`, or the last valid time when that lies beyond it."""
    return min(at + within, MAX_TIME)


def expiring_credits(ledger: Ledger, at: int, until: int,
                     voids_ahead: Mapping[str, int] | None = None) -> list[ExpiringCredits]:
    """Every batch still counting at `at` whose credits stop in `(at, until]` (by expiry,
    or by a void: folded in, or ahead in `voids_ahead`, grant id -> void time)."""
    return _window({name: ending_credits(ledger.accounts[name], voids_ahead)
                    for name in ledger.accounts}, at, until)


def voids_ahead(journal: JournalLike, at: int, until: int, position: int) -> dict[str, int]:
    """Grant id -> the earliest void of it timed in `(at, until]`, recorded up to
    `position` and not reversed as known then: credits a fold up to `at` still counts
    that stop within the window all the same."""
    voids = list(rows_of_type(journal, "void", from_time=at + 1, to_time=until,
                              to_position=position, order="canonical"))
    if not voids:  # the usual case: one read, nothing decoded
        return {}
    excluded = excluded_as_known(journal, position)
    ahead: dict[str, int] = {}
    for _, event_id, _, time, payload, _ in voids:  # canonical: the earliest first
        decoded = load_json(payload) if isinstance(payload, str) else payload
        grant = decoded.get("grant") if isinstance(decoded, dict) else None
        if event_id not in excluded and isinstance(grant, str) and grant not in excluded:
            ahead.setdefault(grant, time)
    return ahead


def _window(endings: dict[str, list[Ending]], at: int, until: int) -> list[ExpiringCredits]:
    found = [ExpiringCredits(name, pool, grant, end, unused, held, voided)
             for name in sorted(endings)
             for pool, grant, end, unused, held, voided in endings[name]
             if at < end <= until]
    found.sort(key=lambda c: (c.ends, c.account, c.pool, c.grant))
    return found


def expiring(journal: JournalLike, *, within: int = DEFAULT_WITHIN, at: int | None = None,
             as_known_at: int | str | None = None) -> ExpiringReport:
    """Credits that expire (or stop counting by a void) within `within` seconds of event
    time `at` (default: the journal's latest event time)."""
    if require_int("within", within) <= 0:
        raise ValueError(f"the window must be positive, got {within} seconds")
    when = latest_time(journal) if at is None else require_time("at", at)
    position = recorded_position(journal, as_known_at)
    until = window_end(when, within)
    ahead = voids_ahead(journal, when, until, position)
    view = None if ahead else exact_view(journal, to_position=position, to_time=when)
    if view is not None:
        # Nothing changes the state after the checkpoint, so what ends when is its own:
        # read from its summary, no account decoded. (A void ahead needs the batches a
        # summary leaves out, those without an expiry: then the fold.)
        try:
            endings = view.summary().endings
        except CheckpointError as exc:
            log.warning("checkpoint at position %s ignored (%s): folding from the "
                        "journal instead", view.position, exc)
        else:
            return ExpiringReport(when, within, position, _window(endings, when, until))
    ledger = fold_as_known(journal, to_time=when, to_position=position)
    return ExpiringReport(when, within, position,
                          expiring_credits(ledger, when, until, ahead))


def parse_duration(text: str) -> int:
    """Seconds from `7d`, `24h`, `90m`, `3600s`, `1w`, plain seconds (`3600`), the same
    with a spelled-out unit (`7 days`, `12 hours`) or ISO 8601 (`P7D`, `PT12H`, `P1DT6H`).

    Raises ValueError naming the accepted forms.
    """
    cleaned = text.strip().lower()
    if _CALENDAR.fullmatch(cleaned):
        raise ValueError(f"not a duration: {text!r}: months and years vary in length; give "
                         "days or weeks instead (30d or P30D for 30 days, 52w for 52 weeks)")
    seconds = _iso_duration(cleaned) if cleaned.startswith("p") else _unit_duration(cleaned)
    if seconds is None or seconds <= 0:
        raise ValueError(f"not a duration: {text!r}; expected a positive whole number of "
                         "seconds or a number with a unit: 3600, 3600s, 90m, 24h, 7d, 2w, "
                         "7 days, P7D, PT12H")
    return seconds


# ISO 8601 years or months (before any T: `PT1M` is a minute), or a unit of months or
# years (`1mo`, `3 months`, `1y`, `2 years`); lowercased.
_CALENDAR = re.compile(r"p(?:\d+y)?(?:\d+m)?(?<!p)(?:\d+[wd])*(?:t.*)?"
                       r"|\d+ *(?:mo|mos|month|months|y|yr|yrs|year|years)", re.ASCII)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_UNIT_WORDS = {"sec": "s", "second": "s", "min": "m", "minute": "m", "hour": "h",
               "day": "d", "week": "w"}


def _unit_duration(cleaned: str) -> int | None:
    number = cleaned.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = cleaned[len(number):].strip() or "s"
    unit = _UNIT_WORDS.get(unit.removesuffix("s") if len(unit) > 1 else unit, unit)
    if not (number.isascii() and number.isdigit()) or unit not in _UNITS:
        return None
    return int(number) * _UNITS[unit]


def _iso_duration(cleaned: str) -> int | None:
    """`PnW`, `PnD`, `PTnHnMnS` and `PnDTnHnMnS` (no years or months: their length varies)."""
    match = re.fullmatch(r"p(?:(\d+)w)?(?:(\d+)d)?(?:t(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?)?",
                         cleaned, re.ASCII)
    if match is None or cleaned in ("p", "pt") or cleaned.endswith("t"):
        return None
    weeks, days, hours, minutes, secs = (int(g) if g else 0 for g in match.groups())
    return (((weeks * 7 + days) * 24 + hours) * 60 + minutes) * 60 + secs


# -- jobs --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job as the fold leaves it."""

    job: str
    account: str
    state: str
    cost: int
    charge: int | None  # what it was charged: set once it completed
    priority: int
    pool: str

    # The same keys as the service's job object, where they overlap.
    json_keys: ClassVar[tuple[str, ...]] = ("job", "account", "state", "cost",
                                            "charged=charge", "priority", "pool")


@dataclass(frozen=True, slots=True)
class JobsReport:
    """The jobs of the journal, filtered by account and state, as known at a position."""

    as_known_at: int
    account: str | None
    state: str | None
    rows: list[JobRow]

    json_keys: ClassVar[tuple[str, ...]] = ("as_known_at", "account", "state", "jobs=rows")


def check_state(state: str | None) -> str | None:
    """`state` if it is a job state (or None); ValueError naming the valid ones."""
    if state is not None and state not in JOB_STATES:
        raise ValueError(f"unknown job state {state!r}; expected one of "
                         f"{', '.join(JOB_STATES)}")
    return state


def jobs(journal: JournalLike, *, account: str | None = None, state: str | None = None,
         as_known_at: int | str | None = None) -> JobsReport:
    """Every job (in submit order), or those of `account` and/or in `state`."""
    check_state(state)
    position = recorded_position(journal, as_known_at)
    view = exact_view(journal, to_position=position)
    if view is not None:
        try:
            columns, _ = view.job_columns()
        except CheckpointError as exc:
            log.warning("checkpoint at position %s ignored (%s): folding from the "
                        "journal instead", view.position, exc)
        else:
            # Rows straight from the columns: no job object is built.
            if account is not None and account not in view.names and (
                    account not in columns["account"]):
                _check_named(journal, account, view.names)
            rows = _column_rows(columns, account, state)
            return JobsReport(position, account, state,
                              _in_submit_order(journal, rows, position))
    ledger = fold_as_known(journal, to_position=position)
    if account is not None and account not in ledger.accounts and not any(
            j.account == account for j in ledger.jobs.values()):
        _check_named(journal, account, ledger.accounts)
    rows = job_rows(ledger.jobs.values(), account, state)
    if view_at(journal, to_position=position) is not None:
        rows = _in_submit_order(journal, rows, position)
    return JobsReport(position, account, state, rows)


def _in_submit_order(journal: JournalLike, rows: list[JobRow],
                     position: int) -> list[JobRow]:
    """`rows` of jobs read from a checkpoint (or folded on from one) in submit order: a
    fold's index holds its jobs in the order their submits lie on the timeline, but a
    projection re-projecting a late batch for one account puts a job it submits after
    the jobs it already held, and its checkpoints keep that order. The submits tell
    (the first of each job id the fold applies, as known at `position`), at one read of
    the submits, only when the jobs came from a checkpoint."""
    if len(rows) < 2:
        return rows
    excluded = excluded_as_known(journal, position)
    places: dict[str, int] = {}
    for _, event_id, kind, _, payload, _ in rows_of_type(journal, "submit",
                                                          to_position=position,
                                                          order="canonical"):
        if event_id in excluded:
            continue
        try:
            event = decode_event(kind, payload)
        except (ValueError, TypeError):
            continue  # an anomaly of the fold: it submits no job
        if isinstance(event, JobSubmitted):
            places.setdefault(event.job, len(places))
    return sorted(rows, key=lambda row: places.get(row.job, len(places)))


def _check_named(journal: JournalLike, account: str, known: Iterable[str]) -> None:
    """UnknownAccount unless the journal names `account` at some position: one it records
    only after the position asked had no jobs yet, as `balance` has no credits yet."""
    if not names_account(journal, account):
        raise unknown_account(account, known)


def _column_rows(columns: dict[str, list[Any]], account: str | None,
                 state: str | None) -> list[JobRow]:
    """`job_rows` from a checkpoint's job columns."""
    ids, owners, states = columns["id"], columns["account"], columns["state"]
    costs, charges = columns["cost"], columns["charge"]
    priorities, pools = columns["priority"], columns["pool"]
    return [JobRow(ids[i], owners[i], states[i], costs[i], charges[i], priorities[i], pools[i])
            for i in range(len(ids))
            if (account is None or owners[i] == account) and (state is None or states[i] == state)]


def job_rows(all_jobs: Iterable[JobState], account: str | None,
             state: str | None) -> list[JobRow]:
    """Rows for the jobs that match (None matches everything), in submit order."""
    return [JobRow(j.id, j.account, j.state, j.cost, j.charge, j.priority, j.pool)
            for j in all_jobs
            if (account is None or j.account == account) and (state is None or j.state == state)]
