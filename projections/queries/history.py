"""`account_history`: an account's statement, lineage and timeline from one fold.

A page that shows all three (the web view's account page) would otherwise read and fold
the account's events three times. Here one `AccountWalk` goes through the events once and
each step feeds the statement's lines, the grants' lineage and the chart's points.
`event_lines` answers what one event changed by folding only up to it.

Pure functions of the events they are given (no I/O): the caller reads them, typically
the account's own stream as known at a position, which holds every event that decides
the account's figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eventstore import RecordedEvent
from projections.queries.explain import AccountExplanation, LineageBuilder
from projections.queries.statement import Statement, StatementBuilder, StatementLine
from projections.queries.walk import AccountWalk
from projections.reversals import reversed_ids
from projections.timeline import TimelineBuilder, TimelinePoint


@dataclass(frozen=True, slots=True)
class AccountHistory:
    """What `statement`, `explain_account` and the account's timeline answer, together."""

    statement: Statement
    explanation: AccountExplanation
    timeline: list[TimelinePoint]
    seen: bool  # whether any of the events touched the account


def canonical(events: Iterable[RecordedEvent]) -> list[RecordedEvent]:
    """The events in canonical order, (event time, position)."""
    return sorted(events, key=lambda rec: (rec.time, rec.position))


def excluded_by(events: Iterable[RecordedEvent]) -> frozenset[str]:
    """The ids the reversals among `events` take out of the fold."""
    reversals = {}
    for rec in events:
        if rec.type == "reverse" and isinstance(rec.payload, dict):
            target = rec.payload.get("event")
            if isinstance(target, str):
                reversals[rec.id] = target
    return reversed_ids(reversals)


Private = Callable[[list[str]], Mapping[str, Mapping[str, Any]]]
"""A journal's `private`: the personal fields held beside these records."""


def account_history(events: Iterable[RecordedEvent], account: str, *, at: int,
                    as_known_at: int | None = None,
                    private: Private | None = None) -> AccountHistory:
    """The statement of `account` up to event time `at`, its explanation at `at` and its
    timeline up to `at`, from one fold of `events` (in any order; those after `at` are
    left out).

    Given the events of a journal as known at a position and `at` its latest event
    time, the statement and the explanation are those `statement` and `explain_account`
    answer (`as_known_at` is the position, for the statement; `private`, the journal's
    `private`, fills in the memos kept beside their records). The timeline is
    `account_timeline`'s, with a point for each void too (it takes credits away).
    """
    given = list(events)
    walk = AccountWalk(account)
    walk.ledger.excluded = excluded_by(given)  # a reversal counts at every event time
    ordered = canonical(rec for rec in given if rec.time <= at)
    lines = StatementBuilder(account, walk)
    lineage = LineageBuilder(walk)
    points = TimelineBuilder()
    for rec in ordered:
        points.before(rec.time, walk.state)
        step = walk.apply(rec)
        if step is None:
            continue
        lines.take(step)
        lineage.take(step)
        if rec.id not in walk.ledger.excluded and rec.type != "reverse":
            points.after(rec, walk.state)  # a reversed event never moved a credit
    expired = walk.expired_by(at)  # reported once: both builders get the same list
    lines.finish(at, expired)
    if private is not None:
        lines.fill_memos(private)
    explanation = lineage.finish(at, expired)
    statement = Statement(account, None, at, None, lines.lines, explanation.figures.balance,
                          as_known_at)
    return AccountHistory(statement, explanation, points.finish(at, walk.state),
                          walk.seen or walk.state is not None)


def event_lines(events: Iterable[RecordedEvent], account: str, position: int, *,
                private: Private | None = None) -> list[StatementLine]:
    """The lines the event at `position` wrote in the statement of `account`: its own line
    and the credits it released after their grant expired or was voided. Folds `events`
    (in any order) only up to that event; empty when it did not touch the account.
    `private` as for `account_history`."""
    given = list(events)
    walk = AccountWalk(account)
    walk.ledger.excluded = excluded_by(given)
    builder = StatementBuilder(account, walk)
    for rec in canonical(given):
        if rec.position != position:
            builder.apply(rec)
            continue
        before = len(builder.lines)
        builder.apply(rec)
        if private is not None:
            builder.fill_memos(private)
        written = builder.lines[before:]
        own = next((i for i, line in enumerate(written) if line.position == position), None)
        return [] if own is None else written[own:]
    return []


def lines_of(lines: list[StatementLine], position: int) -> list[StatementLine]:
    """Within a statement's lines, those the event at `position` wrote: what `event_lines`
    answers, without a fold. After its own line come the credits it released after their
    grant had expired (expiry lines at its time, with no position of their own)."""
    start = next((i for i, line in enumerate(lines) if line.position == position), None)
    if start is None:
        return []
    own = lines[start]
    end = start + 1
    while (end < len(lines) and lines[end].position is None and lines[end].time == own.time
           and lines[end].type in ("expire", "unexplained")):
        end += 1
    return lines[start:end]
