"""What every query shares: the latest time, `--as-known-at` positions, unknown names."""

from __future__ import annotations

import re
from collections.abc import Iterable

from eventstore import JournalLike
from projections.errors import LedgerError, UnknownAccount
from projections.events import TIMELINE_START
from projections.ledger import Ledger
from projections.replay import ledger_at, rows_of_type
from projections.timefmt import format_micros, parse_micros
from projections.validation import require_int, show_name, spelled_like, spelling

_KNOWN_SHOWN = 20


def latest_time(journal: JournalLike) -> int:
    """The latest event time in the journal; TIMELINE_START when it is empty."""
    latest = journal.max_time()
    return TIMELINE_START if latest is None else latest


class NothingRecorded(LedgerError, ValueError):
    """`--as-known-at` before the first event was recorded: there is nothing to answer from."""


_POSITION = re.compile(r"-?[0-9]{1,19}")


def known_positions(head: int) -> str:
    """The positions an as-known-at question may name in a journal whose head is `head`,
    for an error: 1 to the head (0, before the first event, has nothing to answer from),
    or only 0 while the journal is empty."""
    if not head:
        return "the journal is empty: 0 is its only position"
    return f"known positions are 1 to {head}"


def known_position(journal: JournalLike, value: int | str | None, *,
                   shows_head: str = "gpu-credits head") -> int:
    """A journal position from `--as-known-at`: a position, or an ISO-8601 recorded-at time.

    None means the head; 0 means before the first event (a time before the first record
    gives 0 too). ValueError if negative, past the head (never clamped: a script asking
    about position 900 of a 300-event journal has the wrong journal or a typo), or
    neither an integer nor ISO-8601. `shows_head`: what the error names as showing the
    last position (the command, or the API's route).
    """
    head = journal.head()
    if value is None:
        return head
    if isinstance(value, str):
        text = value.strip()
        if _POSITION.fullmatch(text):
            value = int(text)
        elif text.lstrip("+-").isdigit():
            # int() would take "+5", full-width digits and thousands of digits (refused
            # with a message about Python): a position is ASCII digits, as every integer.
            raise ValueError(f"as known at: not a position: {text[:40]!r} (ASCII digits; "
                             f"{known_positions(head)})")
        else:
            try:
                micros = parse_micros(text)
            except ValueError:
                raise ValueError(f"as known at: expected a journal position "
                                 f"({known_positions(head)}) or an ISO-8601 recorded-at "
                                 f"time such as 2026-11-03T12:00Z, got {value!r}") from None
            return journal.position_at(micros)
    # A script's `True` is not position 1, nor 1.0 a position at all: checked as the
    # facades check their `as_known_at`.
    value = require_int("as_known_at", value)
    if value < 0:
        raise ValueError(f"a position is not negative, got {value}; {known_positions(head)}")
    if value > head:
        shows = f" ({shows_head} shows the last one)" if head else ""
        raise ValueError(f"position {value} is past the journal's head {head}; "
                         f"{known_positions(head)}{shows}")
    return value


def recorded_position(journal: JournalLike, value: int | str | None, *,
                      shows_head: str = "gpu-credits head") -> int:
    """`known_position`, for a question that needs something recorded to answer from:
    `NothingRecorded` when the journal holds events but none had been recorded by then
    (position 0, or a time before the first record), rather than an answer of zeros."""
    position = known_position(journal, value, shows_head=shows_head)
    head = journal.head()
    if position == 0 and head > 0:
        shown = str(value).strip()
        if shown.lstrip("+-").isdigit():
            raise NothingRecorded(f"nothing was recorded yet at position 0 (before the "
                                  f"first event); {known_positions(head)}")
        raise NothingRecorded(
            f"nothing was recorded yet at {shown}: the first event was recorded at "
            f"{first_recorded(journal)}; ask about a later time, or a position from 1 "
            f"to {head}")
    return position


def first_recorded(journal: JournalLike) -> str:
    """When the journal's first event was recorded (ISO-8601 UTC), '-' when empty."""
    for rec in journal.read(order="position", batch_size=1):
        return recorded_text(rec.recorded_at)
    return "-"


def recorded_text(micros: int) -> str:
    """A recorded-at time (µs since the epoch) as ISO-8601 UTC with microseconds."""
    return format_micros(micros)


def json_time(value: int | None) -> int | None:
    """An event time for JSON and CSV: None for an event without time (the start of the
    timeline), whose internal placeholder must never reach a spreadsheet."""
    return None if value is None or value == TIMELINE_START else value


def fold_as_known(journal: JournalLike, *, to_time: int | None = None,
                  to_position: int | None = None) -> Ledger:
    """The ledger at event time `to_time`, from the events recorded up to `to_position`.

    From the nearest valid checkpoint plus the events after it: every report reads its
    state through here, so a faster read path changes one place.
    """
    return ledger_at(journal, to_time=to_time, to_position=to_position)


def names_text(names: Iterable[str]) -> str:
    ordered = sorted(names)
    if not ordered:
        return "none"
    shown = ", ".join(show_name(name) for name in ordered[:_KNOWN_SHOWN])
    more = len(ordered) - _KNOWN_SHOWN
    return f"{shown}, and {more} more" if more > 0 else shown


def unknown_account(name: str, known: Ledger | Iterable[str],
                    advice: str | None = None) -> UnknownAccount:
    """The error for an account the journal does not know, naming the ones it does (a
    ledger's accounts, or their names); `advice` is said when no held name looks like it."""
    names = list(known.accounts if isinstance(known, Ledger) else known)
    # Names are compared exactly: say which held names a miss only by letter case, spaces
    # or Unicode form may have meant (one beyond the names listed, or looking the same).
    # Then advice such as "open it first" would make a second account spelled alike.
    like = spelled_like(name, names)
    held = (f"; the journal holds {', '.join(map(spelling, like))}, spelled otherwise only "
            "in letter case, spaces or Unicode form") if like else (
        f"; {advice}" if advice else "")
    return UnknownAccount(f"unknown account {spelling(name)}{held} "
                          f"(known: {names_text(names)})")


_MAKES_AN_ACCOUNT = ("account", "grant", "consume", "adjust")
"""The events after which an account exists (`Ledger`): not a submit, which a journal
records for an account that does not exist too, rejected."""


def names_account(journal: JournalLike, name: str) -> bool:
    """Whether the journal records an event that names the account `name` (one that makes
    it exist, or a submit, which a journal records for an account that does not exist
    too): what a stream of a job's events recorded before its submit, `job:<id>`, never
    is."""
    if not name:
        return False  # no account has an empty name (and the journal has no such stream)
    return exists_later(journal, name) or next(
        rows_of_type(journal, "submit", stream=name), None) is not None


def exists_later(journal: JournalLike, name: str) -> bool:
    """Whether the journal records, at any time, an event that makes the account exist:
    an account named only by rejected submits (and their jobs' events) is unknown."""
    if not name or journal.stream_version(name) == 0:
        return False
    return any(next(rows_of_type(journal, kind, stream=name), None) is not None
               for kind in _MAKES_AN_ACCOUNT)

