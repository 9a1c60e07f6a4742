"""What a projector's snapshots and remembered outcomes save, counted in work, not time.

A regression in either is no wrong answer, only a slower one (a late event refolding the
whole history, a catch-up holding every outcome), which no other test sees. These count
the events a late event reads to refold, the snapshots kept and the outcomes remembered,
against what the design promises (docs/architecture.md, "Replay, snapshots and memory").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from eventstore import MemoryJournal, NewEvent
from projections.projector import Projector
from projections.replay import fold_canonical, journal_reader, locator

HISTORY = 3_000


def _usage(events: int) -> MemoryJournal:
    """A grant, then usage reports of one account, ten seconds apart, in order."""
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 10**9})])
    for i in range(1, events):
        journal.append([NewEvent(f"u{i}", "a", "consume", 10 * i,
                                 {"account": "a", "amount": 1})])
    return journal


def _counting_reader(journal: MemoryJournal, read: list[int]) -> Callable[..., Iterator[Any]]:
    """`journal_reader(journal)`, noting the position of every event it reads."""
    reader = journal_reader(journal)

    def counting(after: tuple[int, int], to_position: int, limit: int | None) -> Iterator[Any]:
        for rec in reader(after, to_position, limit):
            read.append(rec.position)
            yield rec

    return counting


def _fed(journal: MemoryJournal, read: list[int], **options: Any) -> Projector:
    projector = Projector(_counting_reader(journal, read), locate=locator(journal), **options)
    for rec in journal.read(order="position"):
        projector.ingest(rec)
    return projector


def _late(journal: MemoryJournal, projector: Projector, back: int) -> None:
    """Record and ingest a usage report timed `back` events before the last one."""
    journal.append([NewEvent("late", "a", "consume", 10 * (journal.head() - back) - 5,
                             {"account": "a", "amount": 1})])
    projector.ingest(next(iter(journal.read(after_position=journal.head() - 1))))


def test_the_snapshots_kept_stay_within_the_bound_and_keep_the_oldest() -> None:
    read: list[int] = []
    journal = _usage(HISTORY)
    projector = Projector(_counting_reader(journal, read), min_snapshot_every=1,
                          max_snapshots=16, locate=locator(journal))
    most = 0
    for rec in journal.read(order="position"):
        projector.ingest(rec)
        most = max(most, projector.snapshot_count())
    assert most == 16
    # Hundreds were taken; the oldest is still there for a late event far back: its
    # refold starts there, not from the empty ledger (the grant, position 1, not read).
    read.clear()
    _late(journal, projector, HISTORY - 5)
    assert min(read) > 1
    assert projector.ledger.digest() == fold_canonical(journal).digest()


@pytest.mark.parametrize("back", [3, 20, 50, 200, 500, 1_000, 2_000])
def test_a_late_event_refolds_about_as_many_events_as_it_is_late(back: int) -> None:
    """With snapshots spread thinner into the past, a late event `back` events behind the
    head reads at most about twice that many to refold, however long the history: not
    the whole history once it is further back than the snapshots near the head reach."""
    read: list[int] = []
    journal = _usage(HISTORY)
    projector = _fed(journal, read, min_snapshot_every=1, max_snapshots=16)
    read.clear()
    _late(journal, projector, back)
    assert len(read) <= 2 * back + 10, len(read)
    assert len(read) > back  # it did refold what came after it
    assert projector.ledger.digest() == fold_canonical(journal).digest()


def test_remembered_outcomes_stay_within_twice_the_bound_and_are_the_newest() -> None:
    read: list[int] = []
    journal = _usage(1_000)
    projector = _fed(journal, read, min_snapshot_every=50, recent_outcomes=100)
    remembered = [p for p in range(1, journal.head() + 1)
                  if projector.remembered(p) is not None]
    assert 100 <= len(remembered) <= 200
    assert remembered == list(range(journal.head() - len(remembered) + 1,
                                    journal.head() + 1))


@pytest.mark.parametrize(("remembered", "twice"), [(5_000, False), (1, True)])
def test_a_late_event_among_the_remembered_outcomes_reads_each_event_once(
        remembered: int, twice: bool) -> None:
    """The outcomes to compare a refold against are the ones remembered: nothing is
    folded twice. (Remembering too few, the old timeline is read again: the count
    sees it.)"""
    read: list[int] = []
    journal = _usage(1_000)
    projector = _fed(journal, read, min_snapshot_every=50, recent_outcomes=remembered)
    read.clear()
    _late(journal, projector, 30)
    assert (len(read) > len(set(read))) is twice, sorted(read)
    assert len(set(read)) <= 50 + 31  # from the snapshot before it: at most a spacing more
    assert projector.ledger.digest() == fold_canonical(journal).digest()
