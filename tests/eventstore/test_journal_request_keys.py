"""Request keys: a request's idempotency key bound to the request's digest and the answer
it got, beside the chain. On every backend: bound with the transaction's events (both
or neither), the same request binds again to what is there, another is refused, and the
chain is not touched."""

from __future__ import annotations

import pytest
from journal_testkit import empty_the_journal, ev

from eventstore import IdempotencyConflict, Journal, JournalLike, NewEvent, RequestKey
from eventstore.testing import write_at_revision


def test_a_key_is_bound_with_the_events_of_its_transaction(journal: JournalLike) -> None:
    assert journal.request("batch-1") is None
    with journal.transaction(["s"]):
        journal.append([ev("a", 1), ev("b", 2)])
        bound = journal.bind_request("batch-1", "f1", '{"appended": 2}')
    assert bound == RequestKey("batch-1", "f1", '{"appended": 2}', 2, bound.recorded_at)
    assert journal.request("batch-1") == bound
    anchor = journal.head_anchor()
    assert journal.verify_chain(anchor=anchor).ok and journal.verify() is None


def test_a_failed_transaction_binds_nothing(journal: JournalLike) -> None:
    with pytest.raises(RuntimeError), journal.transaction(["s"]):
        journal.append([ev("a", 1)])
        journal.bind_request("batch-1", "f1", "{}")
        raise RuntimeError("the request failed after its events")
    assert journal.request("batch-1") is None and journal.head() == 0
    # The key is free: the request's retry binds it.
    assert journal.bind_request("batch-1", "f2", "{}").fingerprint == "f2"


def test_the_same_request_again_finds_its_binding_and_another_is_refused(
        journal: JournalLike) -> None:
    first = journal.bind_request("k", "f1", '{"appended": 1}')
    journal.append([ev("later", 5)])
    assert journal.bind_request("k", "f1", '{"appended": 0}') == first  # unchanged
    with pytest.raises(IdempotencyConflict, match="'k' is already bound to another request"):
        journal.bind_request("k", "f2", "{}")
    assert journal.request("k") == first


@pytest.mark.parametrize("args", [("", "f", "{}"), ("k", "", "{}"), ("k", "f", None),
                                  ("k\x00", "f", "{}"), ("k", "f", "a\x00")])
def test_bad_bindings_are_refused_and_bind_nothing(journal: JournalLike,
                                                   args: tuple[object, ...]) -> None:
    with pytest.raises(ValueError):
        journal.bind_request(*args)  # type: ignore[arg-type]
    assert journal.request("k") is None


def test_a_journal_from_before_request_keys_gets_the_table(database_url: str) -> None:
    write_at_revision(database_url, "0004", [ev("a", 1)])
    with Journal(database_url) as journal:  # upgrades to the head
        assert journal.request("k") is None
        journal.bind_request("k", "f", "{}")
        assert journal.request("k") is not None and journal.verify() is None


def test_a_binding_keeps_the_span_of_the_positions_its_request_named(
        journal: JournalLike) -> None:
    journal.append([ev("a", 1), ev("b", 2), ev("c", 3)])
    bound = journal.bind_request("k", "f", "{}", [3, 1])
    assert (bound.first_position, bound.last_position) == (1, 3)
    assert journal.request("k") == bound
    assert journal.bind_request("none", "f", "{}").first_position is None


@pytest.mark.parametrize("positions", ["12", [0], [1, True], [1.0], None])
def test_bad_positions_are_refused(journal: JournalLike, positions: object) -> None:
    with pytest.raises(ValueError, match="positions"):
        journal.bind_request("k", "f", "{}", positions)  # type: ignore[arg-type]
    assert journal.request("k") is None


def test_erasing_a_record_drops_the_bindings_of_the_requests_that_named_it(
        journal: JournalLike) -> None:
    """A binding's digest was made from its request, private fields and all: once a
    record's private part is erased, no binding that named it is left to match a guess."""
    def private(id: str, time: int) -> NewEvent:
        return NewEvent(id, "s", "t", time, {"n": 1}, {"user": "Zebulon Quayle"})

    journal.append([private("p1", 1), ev("plain", 2)])
    journal.append([private("p2", 3)])
    journal.bind_request("first", "f1", "{}", [1, 2])
    journal.bind_request("second", "f2", "{}", [3])
    journal.bind_request("plain-only", "f3", "{}", [2])
    erased = journal.erase(["p1"], NewEvent("erase-1", "$journal", "erase", 9, {}))
    assert erased.erased == ("p1",)
    assert journal.request("first") is None
    assert journal.request("second") is not None and journal.request("plain-only") is not None
    # Nothing left to erase: nothing else goes.
    journal.erase(["p1", "plain"], NewEvent("erase-2", "$journal", "erase", 9, {}))
    assert journal.request("plain-only") is not None and journal.verify() is None


def test_erasing_drops_a_binding_whose_span_starts_or_ends_at_the_record(
        journal: JournalLike) -> None:
    """The span's ends are the request's own positions: a record at either end was named
    by the request, and its binding goes; spans that stop short of it stay."""
    def private(id: str, time: int) -> NewEvent:
        return NewEvent(id, "s", "t", time, {"n": 1}, {"user": "Zebulon Quayle"})

    journal.append([ev("a", 1), ev("b", 2), private("p", 3), ev("c", 4), ev("d", 5)])
    for key, positions in [("ends-at", [2, 3]), ("starts-at", [3, 4]), ("only", [3]),
                           ("before", [1, 2]), ("after", [4, 5])]:
        journal.bind_request(key, "f", "{}", positions)
    journal.erase(["p"], NewEvent("erase-1", "$journal", "erase", 9, {}))
    assert [k for k in ("ends-at", "starts-at", "only", "before", "after")
            if journal.request(k) is not None] == ["before", "after"]
    assert journal.verify() is None


def test_emptying_a_shared_schema_unbinds_its_keys(database_url: str) -> None:
    # A key left bound from an earlier example would answer a request of the next one,
    # whose positions it does not describe.
    with Journal(database_url) as journal:
        with journal.transaction(["s"]):
            journal.append([ev("a", 1)])
            journal.bind_request("batch-1", "f1", '{"appended": 1}')
        empty_the_journal(journal)
        assert journal.head() == 0 and journal.request("batch-1") is None
        assert journal.bind_request("batch-1", "f2", "{}").fingerprint == "f2"
