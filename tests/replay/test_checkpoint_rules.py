"""When a saved checkpoint may serve, rule by rule (docs: checkpoints are a cache that
must never change an answer)."""

from __future__ import annotations

import pytest

from eventstore import MemoryJournal, NewEvent
from projections.checkpoint import (
    CHECKPOINT,
    CheckpointError,
    checkpoint_before,
    checkpoint_is_valid,
    invalidate_after,
    load_checkpoint,
    save_checkpoint,
)
from projections.replay import fold_canonical, replay


def _grant(event_id: str, amount: int, time: int) -> NewEvent:
    return NewEvent(event_id, "a", "grant", time,
                    {"account": "a", "amount": amount, "pool": None, "expiry": None})


def _checkpointed() -> MemoryJournal:
    """Two grants, the second last on the timeline at (20, 2), and a checkpoint of both."""
    journal = MemoryJournal()
    journal.append([_grant("g1", 10, 10)])
    journal.append([_grant("g2", 5, 20)])
    replay(journal, checkpoint=True)
    (info,) = journal.snapshots(CHECKPOINT)
    assert (info.position, info.event_time) == (2, 20)
    return journal


def test_an_event_recorded_later_at_the_checkpoints_own_time_leaves_it_valid() -> None:
    """It lands after the checkpoint's last event (same time, later position)."""
    journal = _checkpointed()
    journal.append([_grant("same-time", 1, 20)])
    (info,) = journal.snapshots(CHECKPOINT)
    assert checkpoint_is_valid(journal, info)
    journal.append([_grant("earlier", 1, 19)])
    assert not checkpoint_is_valid(journal, info)


def test_a_checkpoint_holding_an_event_reversed_since_is_passed_over() -> None:
    journal = _checkpointed()
    journal.append([NewEvent("undo", "a", "reverse", 30, {"event": "g1", "reason": "undo"})])
    found = checkpoint_before(journal, (30, 3), 3, {})
    assert found is not None and found[0] == (20, 2)  # as known before the reversal
    assert checkpoint_before(journal, (30, 3), 3, {"undo": "g1"}) is None


def test_a_checkpoint_whose_listed_time_is_not_its_states_is_refused() -> None:
    journal = _checkpointed()
    (info,) = journal.snapshots(CHECKPOINT)
    data = journal.load_snapshot(info.id)
    journal.drop_snapshots(CHECKPOINT)
    journal.save_snapshot(CHECKPOINT, info.position, info.event_time + 5, info.digest, data)
    (moved,) = journal.snapshots(CHECKPOINT)
    with pytest.raises(CheckpointError, match="state ends at time 20, saved as 25"):
        load_checkpoint(journal, moved)


def test_a_checkpoint_holding_the_reversed_event_as_its_last_is_passed_over() -> None:
    journal = _checkpointed()
    journal.append([NewEvent("undo", "a", "reverse", 30, {"event": "g2", "reason": "undo"})])
    assert checkpoint_before(journal, (30, 3), 3, {"undo": "g2"}) is None


def _saved_at(journal: MemoryJournal, position: int) -> None:
    assert save_checkpoint(journal, fold_canonical(journal, to_position=position),
                           position) is not None


def test_a_late_event_drops_the_checkpoints_it_lands_before_and_no_other() -> None:
    journal = _checkpointed()  # stale once the late event is recorded
    journal.append([_grant("late", 1, 15)])
    _saved_at(journal, 3)  # holds the late event: stays
    journal.append([_grant("after", 1, 25)])
    _saved_at(journal, 4)  # the newest
    assert invalidate_after(journal, 15) == 1
    assert sorted(info.position for info in journal.snapshots(CHECKPOINT)) == [3, 4]


def test_the_newest_checkpoint_stays_though_a_late_event_lands_before_it() -> None:
    journal = _checkpointed()
    journal.append([_grant("late", 1, 15)])
    assert invalidate_after(journal, 15) == 0
    assert [info.position for info in journal.snapshots(CHECKPOINT)] == [2]


def test_a_replay_saves_no_checkpoint_that_a_later_arrival_lands_before() -> None:
    """Due at positions 1, 2 and 3: the state at 2 ends at time 20, and the event
    recorded at 3 lands at 15, so only 1 and the end (which holds it) are saved."""
    journal = MemoryJournal()
    for event in (_grant("g1", 1, 10), _grant("g2", 1, 20), _grant("late", 1, 15)):
        journal.append([event])
    replay(journal, checkpoint=True, checkpoint_every=1)
    saved = journal.snapshots(CHECKPOINT)
    assert sorted(info.position for info in saved) == [1, 3]
    assert all(checkpoint_is_valid(journal, info) for info in saved)
