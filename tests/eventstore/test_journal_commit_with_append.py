"""`Journal.append_at`: events decided before, written in a transaction of their own only
where they were placed."""

from __future__ import annotations

import pytest
from journal_testkit import ev

from eventstore import IdempotencyConflict, Journal, JournalError, VersionConflict


def test_it_commits_the_events_at_the_positions_given(database_url: str) -> None:
    with Journal(database_url) as journal:
        journal.append([ev("a"), ev("b")])
        recorded = journal.append_at([ev("c"), ev("d", stream="t")], at=3, locks=["k", "j"])
        assert [r.position for r in recorded] == [3, 4]
        assert [e.id for e in journal.read(order="position")] == ["a", "b", "c", "d"]
        assert [(b.first, b.last) for b in journal.batches()][-1] == (3, 4)
        assert journal.verify() is None


@pytest.mark.parametrize("at, why", [
    (2, "the journal's head has moved on to 2:"),
    (4, "the journal's head is at 2: what was to be written before it is not")])
def test_a_head_elsewhere_writes_nothing(database_url: str, at: int, why: str) -> None:
    with Journal(database_url) as journal:
        journal.append([ev("a"), ev("b")])
        with pytest.raises(VersionConflict) as refused:
            journal.append_at([ev("c")], at=at, locks=["k"])
        said = str(refused.value)
        assert said.startswith(f"the append was placed at position {at}, right after a "
                               f"head at {at - 1}; {why}"), said
        assert said.endswith("nothing was appended; decide them again"), said
        assert journal.head() == 2
        assert journal.get("c") is None


def test_an_event_recorded_already_writes_nothing(database_url: str) -> None:
    with Journal(database_url) as journal:
        journal.append([ev("a")])
        with pytest.raises(VersionConflict, match="the head is there, but 1 of its 2 "
                                                  "events are recorded"):
            journal.append_at([ev("a"), ev("b")], at=2)
        assert journal.head() == 1
        assert journal.get("b") is None



def test_a_request_key_bound_since_the_decision_writes_nothing(database_url: str) -> None:
    """A key the writer found free, bound meanwhile by a request that appended nothing:
    the events would be a second answer under it."""
    with Journal(database_url) as journal:
        journal.append([ev("a")])
        journal.bind_request("k1", "digest", "204")
        with pytest.raises(VersionConflict, match="'k1' was bound by another writer"):
            journal.append_at([ev("k1")], at=2, unbound=["k0", "k1"])
        assert (journal.head(), journal.get("k1")) == (1, None)
        assert [r.position for r in journal.append_at([ev("b")], at=2, unbound=["k0"])] == [2]

def test_inside_a_transaction_it_refuses(database_url: str) -> None:
    with Journal(database_url) as journal:
        with pytest.raises(JournalError, match="outside"), journal.transaction():
            journal.append_at([ev("a")], at=1)
        assert journal.head() == 0


def test_a_key_held_elsewhere_is_waited_for(database_url: str) -> None:
    """The keys go first, in their order, and the append waits for one in use."""
    import threading

    with Journal(database_url) as journal, Journal(database_url) as other:
        journal.append([ev("a")])
        started = threading.Event()
        done: list[int] = []

        def append() -> None:
            started.set()
            done.extend(r.position for r in other.append_at([ev("b")], at=2,
                                                             locks=["k", "m"]))

        with journal.transaction(["m"]) as tx:
            thread = threading.Thread(target=append)
            thread.start()
            started.wait()
            thread.join(0.3)
            assert not done  # waiting for "m"
            tx.read()
        thread.join(10)
        assert done == [2]
        assert journal.verify() is None


def test_a_failed_write_leaves_nothing_and_the_connection_usable(database_url: str) -> None:
    with Journal(database_url) as journal:
        journal.append([ev("a")])
        with pytest.raises(IdempotencyConflict):
            journal.append_at([ev("b"), ev("a", stream="other")], at=2, locks=["k"])
        assert journal.head() == 1
        assert [r.position for r in journal.append_at([ev("b")], at=2, locks=["k"])] == [2]
        with journal.transaction(["k"]) as tx:
            tx.append([ev("c")])
        assert journal.head() == 3 and journal.verify() is None


def test_request_keys_are_bound_in_the_same_write(database_url: str) -> None:
    with Journal(database_url) as journal:
        journal.append([ev("a")])
        journal.append_at([ev("b"), ev("c")], at=2,
                          requests=[("batch-1", "f1", '{"appended": 2}', [2, 3])])
        bound = journal.request("batch-1")
        assert bound is not None
        assert (bound.fingerprint, bound.answer, bound.position) == ("f1", '{"appended": 2}', 3)
        assert (bound.first_position, bound.last_position) == (2, 3)
        assert bound.recorded_at == journal.get("c").recorded_at  # type: ignore[union-attr]


def test_a_key_bound_already_fails_the_write_and_writes_nothing(database_url: str) -> None:
    from sqlalchemy.exc import IntegrityError

    with Journal(database_url) as journal:
        journal.bind_request("batch-1", "f1", "{}")
        with pytest.raises(IntegrityError):
            journal.append_at([ev("a")], at=1, requests=[("batch-1", "f2", "{}", [1])])
        assert journal.head() == 0 and journal.request("batch-1").fingerprint == "f1"  # type: ignore[union-attr]
        with pytest.raises(ValueError, match="no event"):
            journal.append_at([], at=1, requests=[("batch-2", "f", "{}", [])])
        with pytest.raises(ValueError, match="positions"):
            journal.append_at([ev("a")], at=1, requests=[("batch-2", "f", "{}", [0])])
        assert journal.head() == 0 and journal.request("batch-2") is None
