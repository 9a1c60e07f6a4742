"""Events appended together are one step of knowledge.

A batch (one import, one `POST /v1/events`, one transaction) is placed on the timeline
as a whole: its events in canonical order among themselves, revisions only of what was
known before it. Whatever the arrival order and however the events are split into
batches, the state after every batch is the one a full canonical fold gives.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import projections.replay as replay_module
from eventstore import Journal, MemoryJournal, NewEvent
from projections import GPUCreditTracker, Scheduler
from projections.corrections import Corrections
from projections.ledger import Ledger
from projections.projector import Projector
from projections.replay import (
    CHECKPOINT,
    account_reader,
    excluded_as_known,
    fold_canonical,
    journal_reader,
    lean_records,
    locator,
    replay,
    verify,
)
from projections.revisionlog import RevisionLog
from tests.replay.test_account_refold import Event, counting_account_reader, histories
from tests.replay.test_replay import assert_equals_a_cold_fold


@st.composite
def batched(draw: st.DrawFn) -> list[list[Event]]:
    """A history in some arrival order, cut into batches of one event or more."""
    events = list(draw(histories()))
    draw(st.randoms(use_true_random=False)).shuffle(events)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(events) - 1)), max_size=5)))
    bounds = [0, *[c for c in cuts if c < len(events)], len(events)]
    return [events[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _append(journal: Any, batch: list[Event]) -> list[Any]:
    return journal.append([NewEvent(i, stream, kind, time, payload)
                           for i, stream, kind, time, payload in batch])


def _journal(batches: list[list[Event]]) -> MemoryJournal:
    journal = MemoryJournal()
    for batch in batches:
        _append(journal, batch)
    return journal


def _reported(journal: MemoryJournal, to_position: int) -> dict[int, dict[str, Any]]:
    """What a fold of the journal as known at `to_position` reports of each event."""
    ledger = Ledger(excluded=excluded_as_known(journal, to_position))
    return {rec.position: ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time,
                                                rec.payload).reported()
            for rec in journal.read(to_position=to_position, order="canonical")}


def _by_batch(journal: MemoryJournal) -> list[list[Any]]:
    """The journal's events (as a replay reads them), batch by batch."""
    ends = {b.first: b.last for b in journal.batches()}
    out: list[list[Any]] = []
    end = 0
    for rec in lean_records(journal, order="position"):
        if rec.position > end:
            end = ends.get(rec.position, rec.position)
            out.append([])
        out[-1].append(rec)
    return out


@settings(max_examples=150, deadline=None)
@given(batched(), st.sampled_from([1, 2, 5, 1000]), st.booleans(),
       st.sampled_from([1, 50_000]), st.sampled_from([1, 2, 1000]))
def test_every_batch_leaves_the_state_of_a_full_fold_and_revises_only_what_was_known(
        batches: list[list[Event]], snapshot_every: int, by_account: bool,
        remembered: int, part: int) -> None:
    journal = _journal(batches)
    projector = Projector(journal_reader(journal), min_snapshot_every=snapshot_every,
                          max_snapshots=3, recent_outcomes=remembered,
                          locate=locator(journal),
                          account_reader=account_reader(journal) if by_account else None)
    for batch in _by_batch(journal):
        first = batch[0].position
        # A batch too large to hold is taken `part` events at a time.
        for i in range(0, len(batch), part):
            chunk = batch[i:i + part]
            last = chunk[-1].position
            before = _reported(journal, chunk[0].position - 1)
            seen = len(projector.revisions)
            outcomes = projector.ingest_batch(chunk, known_before=first)
            assert sorted(outcomes) == [rec.position for rec in chunk]
            assert_equals_a_cold_fold(projector.ledger, journal, last)
            after = _reported(journal, last)
            # Brute force: whatever changed for an event known before the batch is a
            # revision of it, and nothing else is.
            expected = sorted((p, repr(before[p]), repr(after[p])) for p in before
                              if p < first and before[p] != after[p])
            new = projector.revisions[seen:]
            assert sorted((r.position, repr(r.before), repr(r.after))
                          for r in new) == expected
            assert all(first <= r.late_position <= last and r.position < first for r in new)


@settings(max_examples=100, deadline=None)
@given(batched(), st.sampled_from([1, 2, 5, 1000]))
def test_both_refold_paths_revise_the_same_events_and_name_the_documented_cause(
        batches: list[list[Event]], snapshot_every: int) -> None:
    """Re-projected by account or on the whole timeline, a batch revises the same events
    (job steps included) the same way. The cause differs only as docs/semantics.md says:
    by account, the batch's earliest event in the revised event's account; on the whole
    timeline (also where a batch reaches across accounts), the batch's earliest event."""
    journal = _journal(batches)
    paths = []
    for by_account in (True, False):
        projector = Projector(journal_reader(journal), min_snapshot_every=snapshot_every,
                              max_snapshots=3, locate=locator(journal),
                              account_reader=account_reader(journal) if by_account
                              else None)
        for batch in _by_batch(journal):
            projector.ingest_batch(batch, known_before=batch[0].position)
        paths.append(projector.revisions)
    alone, whole = paths
    batch_of = {rec.position: batch for batch in _by_batch(journal) for rec in batch}

    def by_batch(revisions: list[Any]) -> dict[tuple[int, int], Any]:
        """Each revision by (the first position of the batch that made it, the revised
        event's position): one per revised event per batch."""
        keyed = {(batch_of[r.late_position][0].position, r.position): r for r in revisions}
        assert len(keyed) == len(revisions)
        return keyed

    mine, theirs = by_batch(alone), by_batch(whole)
    assert {k: (repr(r.before), repr(r.after)) for k, r in mine.items()} == {
        k: (repr(r.before), repr(r.after)) for k, r in theirs.items()}
    streams = {rec.position: rec.stream for rec in journal.read(order="position")}
    for (first, position), r in mine.items():
        cause = theirs[(first, position)].late_position
        if r.late_position == cause:
            continue
        on_timeline = sorted(batch_of[first], key=lambda e: (e.time, e.position))
        assert cause == on_timeline[0].position
        own = [e.position for e in on_timeline if e.stream == streams[position]]
        assert own and own[0] == r.late_position


@settings(max_examples=50, deadline=None)
@given(batched())
def test_replay_of_a_journal_appended_in_batches_equals_a_full_fold(
        batches: list[list[Event]]) -> None:
    journal = _journal(batches)
    report = replay(journal)
    assert report.digest == fold_canonical(journal).digest()
    first_of = {rec.position: batch[0].position for batch in _by_batch(journal)
                for rec in batch}
    assert all(r.position < first_of[r.late_position] for r in report.revisions)


def _mix(n: int, accounts: int = 6) -> list[Event]:
    events: list[Event] = []
    for i in range(n):
        account = f"acct-{i % accounts}"
        if i % 3 == 0:
            events.append((f"g{i}", account, "grant", i,
                           {"account": account, "amount": 10, "expiry": i + 40}))
        elif i % 3 == 1:
            events.append((f"s{i}", account, "submit", i,
                           {"account": account, "job": f"j{i}", "cost": 7, "priority": 1}))
        else:
            events.append((f"c{i}", account, "consume", i, {"account": account, "amount": 4}))
    return events


def test_a_shuffled_import_is_placed_on_the_timeline_without_a_single_revision() -> None:
    events = _mix(300)
    random.Random(3).shuffle(events)
    journal = _journal([events])
    report = replay(journal)
    assert report.revisions == []
    assert report.digest == fold_canonical(journal).digest()


def test_a_second_file_interleaving_the_first_refolds_only_its_own_accounts() -> None:
    events = _mix(300)
    first = [e for e in events if int(e[1][-1]) % 2 == 0]
    second = [e for e in events if int(e[1][-1]) % 2 == 1]
    journal = _journal([first, second])
    counting, read = counting_account_reader(journal)
    projector = Projector(journal_reader(journal), account_reader=counting)
    for batch in _by_batch(journal):
        projector.ingest_batch(batch)
    assert projector.refolded_by_account == 1  # one refold for the whole second file
    assert set(read) == {"acct-1", "acct-3", "acct-5"}
    assert len(read) == len(second)  # each of its accounts read once
    # The second file's accounts had no event before it: nothing known was revised.
    assert projector.revisions == []
    assert projector.ledger.digest() == fold_canonical(journal).digest()


def test_a_late_batch_revises_what_was_known_and_names_its_earliest_event() -> None:
    journal = MemoryJournal()
    _append(journal, [("g", "a", "grant", 0, {"account": "a", "amount": 10}),
                      ("u", "a", "consume", 10, {"account": "a", "amount": 8})])
    # Two usage reports of one batch: the later one (on the timeline) first in the file.
    _append(journal, [("u2", "a", "consume", 6, {"account": "a", "amount": 1}),
                      ("u1", "a", "consume", 5, {"account": "a", "amount": 4})])
    report = replay(journal)
    assert [(r.late_event_id, r.event_id, r.before, r.after) for r in report.revisions] == [
        ("u1", "u", {"ok": True, "debt_after": 0, "paid_by": [["g", 8]]},
         {"ok": True, "debt_after": 3, "paid_by": [["g", 5]]})]
    assert report.digest == fold_canonical(journal).digest()


def test_a_checkpoint_due_inside_a_batch_is_saved_at_its_end(tmp_path: Any) -> None:
    journal = Journal(f"sqlite:///{tmp_path / 'j.db'}")
    try:
        events = _mix(60)
        _append(journal, events[:25])
        _append(journal, events[25:])
        replay(journal, checkpoint=True, checkpoint_every=20)
        assert sorted(s.position for s in journal.snapshots(CHECKPOINT)) == [25, 60]
        assert verify(journal).ok
    finally:
        journal.close()


def test_a_batch_too_large_to_hold_is_taken_in_parts_known_together(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "BATCH_HELD", 7)
    events = _mix(120)
    known, rest = events[:40], events[40:]
    random.Random(5).shuffle(rest)
    journal = _journal([known, rest])
    report = replay(journal)
    assert report.digest == fold_canonical(journal).digest()
    assert all(r.position <= 40 for r in report.revisions)


@st.composite
def mostly_in_order(draw: st.DrawFn) -> list[list[Event]]:
    """A history in time order but for a few swapped events, cut into batches: batches
    that fold straight for a while and then go back in time, within themselves or
    before the batch ahead of them."""
    events = sorted(draw(histories()), key=lambda e: e[3])
    rnd = draw(st.randoms(use_true_random=False))
    for _ in range(draw(st.integers(0, 3)) if events else 0):
        i, j = rnd.randrange(len(events)), rnd.randrange(len(events))
        events[i], events[j] = events[j], events[i]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(events) - 1)), max_size=4)))
    bounds = [0, *[c for c in cuts if c < len(events)], len(events)]
    return [events[a:b] for a, b in itertools.pairwise(bounds) if b > a]


# A refold in a later part (e5, late) met the cancel's anomaly (e4, time 1) after the
# start's (e10, time 2): the report listed them in that order, the whole batch by time.
@example([[("e2", "a", "submit", 1, {"account": "a", "job": "j2", "cost": 0, "priority": 0})],
          [("e3", "b", "submit", 1, {"account": "b", "job": "j3", "cost": 0, "priority": 0}),
           ("e4", "a", "cancel", 1, {"job": "j2"}), ("e6", "a", "account", 2, {"account": "a"}),
           ("e5", "a", "account", 1, {"account": "a"}),
           *[(f"e{n}", "a", "account", 2, {"account": "a"}) for n in (7, 8, 9)],
           ("e10", "b", "start", 2, {"job": "j3"}),
           *[(f"e{n}", "a", "account", 2, {"account": "a"}) for n in (11, 12, 13, 14)]]], 3)
@settings(max_examples=100, deadline=None)
@given(mostly_in_order(), st.sampled_from([1, 2, 3]))
def test_a_batch_handed_over_in_parts_makes_what_the_whole_batch_makes(
        batches: list[list[Event]], streamed: int) -> None:
    journal = _journal(batches)
    whole = replay(journal)  # these batches are smaller than a part: each taken whole
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay_module, "STREAMED", streamed)
        parts = replay(journal)
    assert parts.digest == whole.digest == fold_canonical(journal).digest()
    assert [repr(r) for r in parts.revisions] == [repr(r) for r in whole.revisions]
    assert parts.anomalies == whole.anomalies


def test_a_decision_of_several_events_is_one_step_of_knowledge_for_its_own_facade() -> None:
    # open_account with a balance appends the account and its grant together: the facade
    # that decided it names the revisions it causes as replay and GET /v1/revisions do,
    # after the batch's earliest event on the timeline (the account, not the grant).
    journal = MemoryJournal()
    Corrections(journal, clock=lambda: 0).consume("a", 1, at=5)   # 1 owed
    scheduler = Scheduler(journal, clock=lambda: 0)
    scheduler.open_account("a", 3, at=2)                        # positions 2 and 3, at 2
    assert [(r.late_position, r.position, r.after["debt_after"])
            for r in scheduler.revisions] == [(2, 1, 0)]
    assert [(r.late_position, r.position) for r in replay(journal).revisions] == [(2, 1)]


def test_a_void_recorded_before_its_grant_leaves_replay_naming_the_causes_live_facades_name(
        ) -> None:
    # The void is recorded (on the grant's stream) before its grant, as an import of an
    # export does. A later batch of a grant of a's and a usage report of b's revises a's
    # consume: its cause is the batch's earliest event of a's, g2, for a replay and the
    # revision log as for a live facade (the replay named b's usage report).
    batches = [[NewEvent("v", "a", "void", 0, {"grant": "g"})],
               [NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 1})],
               [NewEvent("u", "a", "consume", 2, {"account": "a", "amount": 2})],
               [NewEvent("g2", "a", "grant", 1, {"account": "a", "amount": 1}),
                NewEvent("ub", "b", "consume", 0, {"account": "b", "amount": 1})]]
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, "a")
    for batch in batches:
        journal.append(batch)
    live = [(r.late_event_id, r.event_id) for r in tracker.revisions]
    assert live == [("g2", "u")]
    assert [(r.late_event_id, r.event_id) for r in replay(journal).revisions] == live
    assert [(r.late_event_id, r.event_id) for r in RevisionLog(journal).revisions()] == live
