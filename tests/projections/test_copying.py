"""A snapshot's deep copy (`StateCodec.copy`, walked by `projections.copying`): the same
state, sharing nothing that can change, shared objects still shared once."""

from __future__ import annotations

import gc
from typing import Any

import pytest
from hypothesis import given, settings

from projections.events import from_payload, to_payload
from projections.ledger import STATE, Ledger
from projections.replay import fold_canonical
from projections.statecopy import StateFormatError
from tests.replay.test_account_refold import Event, _journal, histories

_IMMUTABLE = (type(None), bool, int, float, str, tuple, frozenset, type)


def _mutable_objects(root: Any) -> dict[int, Any]:
    """Every object reachable from `root` that could be changed in place, by id."""
    found: dict[int, Any] = {}
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in found:
            continue
        if not isinstance(obj, _IMMUTABLE):
            found[id(obj)] = obj
        stack.extend(r for r in gc.get_referents(obj) if not isinstance(r, type))
    return found


@settings(max_examples=100, deadline=None)
@given(histories())
def test_a_copy_holds_the_same_state_and_shares_nothing_that_changes(
        events: list[Event]) -> None:
    ledger = fold_canonical(_journal(events))
    copy = STATE.copy(ledger)
    assert STATE.encode(copy) == STATE.encode(ledger)
    assert copy.digest() == ledger.digest()
    assert not _mutable_objects(copy).keys() & _mutable_objects(ledger).keys()


def test_an_object_reached_twice_is_copied_once() -> None:
    ledger = Ledger()
    job = fold_canonical(_journal([
        ("e1", "a", "grant", 1, to_payload(from_payload("grant", {"account": "a",
                                                                   "amount": 10}))),
        ("e2", "a", "submit", 2, to_payload(from_payload("submit", {
            "account": "a", "job": "j", "cost": 4, "priority": 0})))])).jobs["j"]
    ledger.jobs = {"j": job}
    ledger.live = {"j": job}
    copy = STATE.copy(ledger)
    assert copy.jobs["j"] is copy.live["j"] and copy.jobs["j"] is not job


def test_what_is_not_state_is_refused() -> None:
    with pytest.raises(TypeError, match="cannot copy a object: not a state class"):
        STATE.copy([object()])


def test_a_stored_tree_nested_too_deep_is_refused_not_a_crash() -> None:
    # Decoding stays Python: compiled recursion this deep would overflow the C stack.
    tree: list[Any] = [0]
    for _ in range(200_000):
        tree = [0, tree]
    with pytest.raises(StateFormatError, match="nested too deeply"):
        STATE.decode(tree)
