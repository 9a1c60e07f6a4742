"""`SqlTransaction.append_and_commit`: the append that ends its transaction, written only
where it was placed."""

from __future__ import annotations

import pytest
from journal_testkit import ev

from eventstore import Journal, VersionConflict


def test_it_commits_the_events_at_the_positions_given(database_url: str) -> None:
    with Journal(database_url) as journal:
        journal.append([ev("a"), ev("b")])
        with journal.transaction(["k"]) as tx:
            recorded = tx.append_and_commit([ev("c"), ev("d", stream="t")], at=3)
        assert [r.position for r in recorded] == [3, 4]
        assert [e.id for e in journal.read(order="position")] == ["a", "b", "c", "d"]
        assert [(b.first, b.last) for b in journal.batches()][-1] == (3, 4)
        assert journal.verify() is None


@pytest.mark.parametrize("at", [2, 4])
def test_a_head_elsewhere_writes_nothing(database_url: str, at: int) -> None:
    with Journal(database_url) as journal:
        journal.append([ev("a"), ev("b")])
        with pytest.raises(VersionConflict, match=f"start at position {at}.*head.*at 2"), \
                journal.transaction(["k"]) as tx:
            tx.append_and_commit([ev("c")], at=at)
        assert journal.head() == 2
        assert journal.get("c") is None


def test_an_event_recorded_already_writes_nothing(database_url: str) -> None:
    with Journal(database_url) as journal:
        journal.append([ev("a")])
        with pytest.raises(VersionConflict, match="1 of its 2 events are recorded"), \
                journal.transaction() as tx:
            tx.append_and_commit([ev("a"), ev("b")], at=2)
        assert journal.head() == 1
        assert journal.get("b") is None


def test_nothing_runs_in_the_transaction_after_it(database_url: str) -> None:
    with Journal(database_url) as journal, journal.transaction() as tx:
        tx.append_and_commit([ev("a")], at=1)
        with pytest.raises(Exception, match="transaction has ended"):
            tx.append([ev("b")])
    with Journal(database_url) as journal:
        assert [e.id for e in journal.read(order="position")] == ["a"]
