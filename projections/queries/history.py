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

import bisect
import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eventstore import RecordedEvent
from projections.owners import Named, named_among
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
    fold = HistoryFold(account, excluded_by(given), named_among(given))
    fold.extend(canonical(rec for rec in given if rec.time <= at))
    return fold.finish(at, as_known_at=as_known_at, private=private, last=True)


class HistoryFold:
    """An account's fold kept open: `extend` it with events that come later in canonical
    order, `finish` it as often as asked.

    Finishing (expiries and refill up to the latest event time, memos, the grants' figures
    at that time) works on copies of what it would change, so the fold goes on from where
    its last event left it and an answer already given never changes afterwards. A page
    that keeps one per account folds only what its stream gained since, instead of the
    whole account again, whenever the head moves.
    """

    def __init__(self, account: str, excluded: frozenset[str],
                 named: Named | None = None) -> None:
        self.account = account
        self.excluded = excluded  # the reversed ids the fold was started with
        # `named`: the events the reversals among those folded name (`named_among`);
        # a fold is extended only with events that hold no reversal.
        self.walk = AccountWalk(account, named)
        self.walk.ledger.excluded = excluded  # a reversal counts at every event time
        self._lines = StatementBuilder(account, self.walk)
        self._lineage = LineageBuilder(self.walk)
        self._points = TimelineBuilder()
        self.position = 0  # the highest position among the events folded
        self.last: tuple[int, int] | None = None  # (time, position) of the last one folded
        self.events = 0  # how many were folded
        self.whole = True  # False: events of the stream were left out (later than `at`)

    def follows(self, rec: RecordedEvent) -> bool:
        """Whether `rec` comes after every event folded so far in canonical order."""
        return self.last is None or (rec.time, rec.position) > self.last

    def extend(self, ordered: Iterable[RecordedEvent]) -> None:
        """Fold `ordered`, in canonical order and each after the last one folded (a
        ValueError otherwise: an earlier one changes what came after it, which only a
        new fold shows)."""
        walk, lines, lineage, points = self.walk, self._lines, self._lineage, self._points
        excluded = walk.ledger.excluded
        for rec in ordered:
            key = (rec.time, rec.position)
            if self.last is not None and key <= self.last:
                raise ValueError(f"event {rec.id!r} at (time, position) {key} does not come "
                                 f"after the last one folded, {self.last}")
            self.last = key
            self.position = max(self.position, rec.position)
            self.events += 1
            points.before(rec.time, walk.state)
            step = walk.apply(rec)
            if step is None:
                continue
            lines.take(step)
            lineage.take(step)
            if rec.id not in excluded and rec.type != "reverse":
                points.after(rec, walk.state)  # a reversed event never moved a credit

    def finish(self, at: int, *, as_known_at: int | None = None,
               private: Private | None = None, last: bool = False) -> AccountHistory:
        """The answers at event time `at` (no earlier than the last event folded), as
        `account_history` gives them. `last=True`: the fold is not extended afterwards,
        so nothing is copied."""
        walk, lines, lineage, points = self.walk, self._lines, self._lineage, self._points
        if last:
            return self._finish(at, as_known_at, private)
        # What finishing changes, kept aside to be put back: the walk's pending expiries
        # and what it reported, the lines and balance, the grants' lineage (mutable) and
        # the lists handed to the answer, the points and the expiries still to pass.
        saved_walk = (list(walk._by_expiry), dict(walk.announced))
        saved_lines = (lines.lines, lines.balance, lines.reserved)
        saved_lineage = (lineage.grants, lineage.spends, lineage.rejections,
                         lineage.anomalies)
        saved_points = (points.points, list(points._expiries))
        lines.lines = list(lines.lines)
        lineage.grants = {key: dataclasses.replace(g, uses=list(g.uses), held=list(g.held),
                                                   released_to_debt=list(g.released_to_debt))
                          for key, g in lineage.grants.items()}
        lineage.spends = list(lineage.spends)
        lineage.rejections = list(lineage.rejections)
        lineage.anomalies = list(lineage.anomalies)
        points.points = list(points.points)
        try:
            return self._finish(at, as_known_at, private)
        finally:
            walk._by_expiry, walk.announced = saved_walk
            lines.lines, lines.balance, lines.reserved = saved_lines
            lineage.grants, lineage.spends, lineage.rejections, lineage.anomalies = \
                saved_lineage
            points.points, points._expiries = saved_points

    def _finish(self, at: int, as_known_at: int | None,
                private: Private | None) -> AccountHistory:
        walk, lines = self.walk, self._lines
        expired = walk.expired_by(at)  # reported once: both builders get the same list
        lines.finish(at, expired)
        if private is not None:
            lines.fill_memos(private)
        explanation = self._lineage.finish(at, expired)
        explanation.as_known_at = as_known_at
        statement = Statement(self.account, None, at, None, lines.lines,
                              explanation.figures.balance, as_known_at)
        return AccountHistory(statement, explanation, self._points.finish(at, walk.state),
                              walk.seen or walk.state is not None)


def extended_history(fold: HistoryFold | None, events: Sequence[RecordedEvent],
                     account: str, *, at: int, as_known_at: int | None = None,
                     private: Private | None = None) -> tuple[HistoryFold, AccountHistory]:
    """`account_history` of `events` (the account's stream as known at a position, in
    position order), and the fold it came from, to keep for the next call.

    `fold`, kept from an earlier call on a prefix of the same stream, is extended with
    only the events recorded since when that gives the same answer: every one of them
    comes later in canonical order than those folded (none arrived late) and none is a
    reversal (which counts at every event time). Otherwise, or when `events` stop short of
    what `fold` holds, the events are folded anew. Events later than `at` (never, when `at`
    is the journal's latest event time) are left out, by a fold of their own.
    """
    if fold is not None and fold.account == account and fold.position <= (
            events[-1].position if events else 0):
        cut = bisect.bisect_right(events, fold.position, key=lambda rec: rec.position)
        # The fold holds exactly the stream's first `cut` events, none left out.
        if fold.whole and cut == fold.events:
            added = canonical(events[cut:])
            if (fold.last is None or fold.last[0] <= at) and all(
                    fold.follows(rec) and rec.type != "reverse" and rec.time <= at
                    for rec in added):
                fold.extend(added)
                return fold, fold.finish(at, as_known_at=as_known_at, private=private)
    kept = [rec for rec in events if rec.time <= at]
    fold = HistoryFold(account, excluded_by(events), named_among(events))
    fold.extend(canonical(kept))
    fold.whole = len(kept) == len(events)  # else what it left out may count later
    return fold, fold.finish(at, as_known_at=as_known_at, private=private)


def event_lines(events: Iterable[RecordedEvent], account: str, position: int, *,
                private: Private | None = None) -> list[StatementLine]:
    """The lines the event at `position` wrote in the statement of `account`: its own line
    and the credits it released after their grant expired or was voided. Folds `events`
    (in any order) only up to that event; empty when it did not touch the account.
    `private` as for `account_history`."""
    given = list(events)
    walk = AccountWalk(account, named_among(given))
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
    grant had expired (expiry lines at its time, with no position of their own), or, for a
    grant voided before it took effect, the line voiding all of it."""
    start = next((i for i, line in enumerate(lines) if line.position == position), None)
    if start is None:
        return []
    own = lines[start]
    end = start + 1
    while (end < len(lines) and lines[end].position is None and lines[end].time == own.time
           and lines[end].type in ("expire", "void", "unexplained")):
        end += 1
    return lines[start:end]
