"""The revision log holds the rows it has read while the journal is small, so a late
batch reads its accounts' stretches back without a query: the revisions must be those
of the same log reading the journal, caught up at the same points."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import replay as replay_module
from projections.replay import replay
from projections.revisionlog import RevisionLog
from tests.replay.test_account_refold import Event, histories


def _log(journal: MemoryJournal, monkeypatch: Any, held_rows: int) -> RevisionLog:
    # The bound is read as the log's fold begins (its first catch-up).
    with monkeypatch.context() as patched:
        patched.setattr(replay_module, "HELD_ROWS", held_rows)
        log = RevisionLog(journal)
        log.revisions()
    return log


@settings(max_examples=100, deadline=None)
@given(histories(), st.randoms(use_true_random=False), st.sampled_from([0, 3, 12, 10**6]))
def test_held_rows_give_the_revisions_read_from_the_journal(
        events: list[Event], rnd: random.Random, held_rows: int) -> None:
    import pytest

    monkeypatch = pytest.MonkeyPatch()
    journal = MemoryJournal()
    # -1: nothing held, every stretch read from the journal (the reference); the others
    # hold every row, or stop holding once the journal outgrows them, mid-way.
    reference = _log(journal, monkeypatch, -1)
    fast = _log(journal, monkeypatch, held_rows)
    i = 0
    while i < len(events):
        size = rnd.choice([1, 1, 2, 3, 5])
        journal.append([NewEvent(event_id, stream, kind, time, payload)
                        for event_id, stream, kind, time, payload in events[i:i + size]])
        i += size
        if rnd.random() < 0.4:
            assert fast.revisions() == reference.revisions()
    assert fast.revisions() == reference.revisions() == replay(journal).revisions
    assert fast.rows() == reference.rows()
