"""Replay parity: one scripted history through both facades gives the same state on a
memory journal, a SQLite file and PostgreSQL, live and replayed.

Event ids are part of the state (lineage names grants by id), so the script pins every
call's id with `decision(facade, event_id=...)`; then the digests of independent runs on
different backends must be equal, and equal to a replay from the journal.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any, TypeVar

from eventstore import JournalLike, MemoryJournal, NewEvent
from eventstore.testing import open_journal
from projections import GPUCreditTracker, Scheduler
from projections.checkpoint import checkpoint_is_valid
from projections.replay import CHECKPOINT, fold_canonical, replay
from projections.session import decision
from tests.projections.invariants import assert_invariants

T = TypeVar("T")


class Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


class Script:
    """Both facades on one journal, every call under a pinned event id."""

    def __init__(self, journal: JournalLike | str, prefix: str = "ev") -> None:
        self.clock = Clock(100)
        self.scheduler = Scheduler(journal, clock=self.clock)
        journal_obj: Any = self.scheduler._session.journal
        self.journal: JournalLike = journal_obj
        self.tracker = GPUCreditTracker(self.journal, account="a")
        self._ids = itertools.count(1)
        self._prefix = prefix

    def call(self, facade: object, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with decision(facade, event_id=f"{self._prefix}-{next(self._ids)}"):
            return fn(*args, **kwargs)

    def run(self) -> list[object]:
        s, t, call = self.scheduler, self.tracker, self.call
        out: list[object] = []
        call(s, s.open_account, "a", 50, max_running=1)
        call(s, s.open_account, "b", 20)
        call(t, t.grant, 30, 100, 200)
        call(t, t.grant, 10, 100, 300, pool="h100")
        out.append(call(s, s.submit, "j1", "a", 40, 2))  # holds 30 (exp 200) + 10 general
        out.append(call(s, s.submit, "j2", "a", 45, 1))  # 40 general left: rejected
        out.append(call(s, s.submit, "j3", "b", 20, 5))
        self.clock.t = 150
        out.append(call(s, s.start_next))
        out.append(call(s, s.start_next))
        out.append(call(s, s.submit, "j4", "a", 5, 9))
        out.append(call(s, s.start_next))  # a at its cap, b has nothing pending
        self.clock.t = 250  # j1's held credits from the 200-batch did not expire
        call(s, s.complete, "j1", False, refund_fraction=0.5)  # charge 20; 10 expire
        call(s, s.complete, "j3", True)
        out.append(call(t, t.consume, 5, 120, pool="h100"))  # late: from h100 (exp 300)
        self.clock.t = 260
        call(s, s.cancel, "j4")
        out.append(call(t, t.consume, 60, 270))  # 50 general, 10 debt
        call(t, t.grant, 15, 280, 400)  # pays the 10
        self.clock.t = 290
        out.append(call(s, s.submit, "j5", "b", 0, 0))
        return [o.id if hasattr(o, "id") else o for o in out]

    def figures(self) -> dict[str, tuple[int, int, int, int]]:
        return {
            name: (v.balance, v.reserved, v.available, v.running)
            for name, v in ((n, self.scheduler.accounts[n]) for n in ("a", "b"))
        }


EXPECTED_RETURNS: list[object] = [True, False, True, "j3", "j1", True, None, 0, 10, True]
EXPECTED_FIGURES = {"a": (10, 0, 10, 0), "b": (0, 0, 0, 0)}
PROBES = [99, 100, 119, 120, 150, 199, 200, 250, 260, 270, 280, 299, 300, 400, 10**6]


def tracker_answers(journal: JournalLike | str) -> list[tuple[int, int]]:
    tracker = GPUCreditTracker(journal, account="a")
    return [(tracker.get_balance(t), tracker.get_balance(t, pool="h100")) for t in PROBES]


def reference() -> tuple[Script, str]:
    ref = Script(MemoryJournal())
    assert ref.run() == EXPECTED_RETURNS
    return ref, ref.scheduler.state_digest()


# By hand (see Script.run): a's balance over time, all pools and h100 alone.
EXPECTED_ANSWERS = [
    (0, 0), (90, 10), (90, 10), (85, 5), (85, 5), (85, 5), (85, 5), (55, 5), (55, 5),
    (-5, 5), (10, 5), (10, 5), (5, 0), (0, 0), (0, 0),
]


def test_the_script_gives_the_figures_computed_by_hand() -> None:
    ref, _ = reference()
    assert ref.figures() == EXPECTED_FIGURES
    assert tracker_answers(ref.journal) == EXPECTED_ANSWERS
    totals = ref.scheduler.ledger().accounts["a"].book.totals
    assert (totals.granted, totals.charged_jobs, totals.expired, totals.debt_paid) == (
        105, 20, 10, 10
    )
    assert_invariants(ref.scheduler.ledger())


def test_same_script_same_digest_on_every_backend(journal_url: str) -> None:
    _, want = reference()
    journal = open_journal(journal_url)
    try:
        live = Script(journal)
        assert live.run() == EXPECTED_RETURNS
        assert live.figures() == EXPECTED_FIGURES
        assert live.scheduler.state_digest() == want
        assert live.tracker.state_digest() == want
        assert_invariants(live.scheduler.ledger())
        # Replayed from the journal: by the replay module, by a fresh fold, by new facades.
        assert replay(journal).digest == want
        assert fold_canonical(journal).digest() == want
        assert Scheduler(journal).state_digest() == want
        assert tracker_answers(journal) == EXPECTED_ANSWERS
    finally:
        journal.close()
    if journal_url != "memory":
        # Reopened by URL: a new Journal, a cold projection.
        reopened = Scheduler(journal_url, clock=Clock(290))
        try:
            assert reopened.state_digest() == want
            assert {n: (v.balance, v.reserved, v.available, v.running)
                    for n, v in reopened.accounts.items()} == EXPECTED_FIGURES
        finally:
            reopened._session.journal.close()
        assert tracker_answers(journal_url) == EXPECTED_ANSWERS


def test_the_same_events_copied_to_any_backend_replay_to_the_same_digest(
    journal_url: str,
) -> None:
    """Without pinned ids: the memory journal's events, appended as they are (same ids,
    streams, times, payloads, same order) to another backend, replay to the same state."""
    source = MemoryJournal()
    s = Scheduler(source, clock=Clock(5))
    t = GPUCreditTracker(source, account="a")
    s.open_account("a", 10, max_running=1)
    t.grant(20, 5, 50, pool="h100")
    assert s.submit("x", "a", 25, 0, pool="h100")
    assert s.start_next() is not None
    t.consume(3, 1)  # late
    s.complete("x", False, refund_fraction=0.25)
    t.grant(7, 60, 70)
    want = s.state_digest()
    target = open_journal(journal_url)
    try:
        for rec in source.read(order="position"):
            target.append([NewEvent(rec.id, rec.stream, rec.type, rec.time, dict(rec.payload))])
        assert target.head() == source.head()
        assert replay(target).digest == want
        assert Scheduler(target).state_digest() == want
        assert GPUCreditTracker(target, account="a").get_balance(60) == t.get_balance(60)
    finally:
        target.close()


def test_resume_from_a_checkpoint_then_a_late_event(journal_url: str) -> None:
    """A checkpoint saved by `replay(checkpoint=True)` is where a facade on a database
    starts; a late event afterwards must still give the same state as a cold fold."""
    ref, _ = reference()
    journal = open_journal(journal_url)
    try:
        assert Script(journal).run() == EXPECTED_RETURNS
        replay(journal, checkpoint=True)
        (saved,) = journal.snapshots(CHECKPOINT)
        assert saved.position == journal.head()
        resumed = Script(journal)
        resumed._ids = itertools.count(1000)
        ref._ids = itertools.count(1000)
        for script in (ref, resumed):
            script.clock.t = 300
            script.call(script.tracker, script.tracker.grant, 40, 110, 10**6)  # late
            script.call(script.scheduler, script.scheduler.submit, "j6", "a", 30, 0)
            script.call(script.scheduler, script.scheduler.start_next)
        if journal_url != "memory":
            # The late grant (time 110) made the checkpoint (time 290) stale for a
            # query; the newest one stays, for a live projection to resume from.
            assert journal.snapshots(CHECKPOINT) == [saved]
            assert not checkpoint_is_valid(journal, saved)
            assert Scheduler(journal)._session.projector._started_at == saved.position
        want = ref.scheduler.state_digest()
        assert resumed.scheduler.state_digest() == want
        assert resumed.tracker.state_digest() == want
        assert fold_canonical(journal).digest() == want
        assert replay(journal).digest == want
        assert Scheduler(journal).state_digest() == want
        assert tracker_answers(journal) == tracker_answers(ref.journal)
        assert resumed.figures() == ref.figures()
    finally:
        journal.close()
