"""Each event checks its fields by their declared types, first to last."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.events import EVENT_CLASSES, GENERAL, DomainEvent, from_payload

VALID: dict[str, dict[str, Any]] = {
    "account": {"account": "a", "max_running": 2, "share": 1, "refill_rate": 5,
                "refill_cap": 10, "memo": "m"},
    "grant": {"account": "a", "amount": 5, "expiry": 9, "pool": "h100", "memo": "m"},
    "consume": {"account": "a", "amount": 5, "pool": "h100", "memo": "m", "user": "u"},
    "submit": {"account": "a", "job": "j", "cost": 1, "priority": 0, "memo": "m", "user": "u"},
    "start": {"job": "j", "memo": "m"},
    "complete": {"job": "j", "success": False, "refund_fraction": 0.5, "memo": "m"},
    "cancel": {"job": "j", "memo": "m"},
    "adjust": {"account": "a", "amount": -3, "reason": "r", "memo": "m"},
    "void": {"grant": "g", "reason": "r", "memo": "m"},
    "reverse": {"event": "e", "reason": "r", "memo": "m"},
    "erase": {"events": ["e"], "reason": "r", "memo": "m"},
}

BAD = b"x"  # bad for every field type: not a name, a text, a number, a boolean or a list


def _fields(event: DomainEvent) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}


def test_every_event_type_has_a_valid_example() -> None:
    assert sorted(VALID) == sorted(cls.type for cls in EVENT_CLASSES)


@given(st.sampled_from(EVENT_CLASSES), st.data())
def test_an_event_with_several_bad_fields_names_the_first_declared(
        cls: type[DomainEvent], data: st.DataObject) -> None:
    kwargs = _fields(from_payload(cls.type, VALID[cls.type]))
    names = list(kwargs)
    bad = data.draw(st.lists(st.sampled_from(names), min_size=1, unique=True), label="bad")
    with pytest.raises(ValueError) as err:
        cls(**{**kwargs, **dict.fromkeys(bad, BAD)})
    first = min(bad, key=names.index)
    assert str(err.value).startswith(f"{first} must"), (first, str(err.value))
    assert "b'x'" in str(err.value) or "erased event id" in str(err.value)


def test_a_rule_about_fields_together_comes_after_the_fields() -> None:
    with pytest.raises(ValueError, match=r"^refill_rate must be a positive integer"):
        from_payload("account", {"account": "a", "refill_rate": 0})
    with pytest.raises(ValueError, match=r"^refill_rate and refill_cap go together"):
        from_payload("account", {"account": "a", "refill_rate": 5})
    with pytest.raises(ValueError, match=r"^reason must"):
        from_payload("adjust", {"account": "a", "amount": 0, "reason": " "})
    with pytest.raises(ValueError, match=r"^amount of an adjustment must not be 0"):
        from_payload("adjust", {"account": "a", "amount": 0, "reason": "r"})


def test_checks_that_normalise_keep_what_they_return() -> None:
    consume = from_payload("consume", {"account": "a", "amount": 1, "pool": None})
    assert consume.pool == GENERAL  # type: ignore[union-attr]
    done = from_payload("complete", {"job": "j", "success": True, "refund_fraction": 1})
    assert type(done.refund_fraction) is float  # type: ignore[union-attr]
    erase = from_payload("erase", {"events": ["e1", "e2"]})
    assert erase.events == ("e1", "e2")  # type: ignore[union-attr]


@pytest.mark.parametrize("priority", [-1, 101])
def test_a_grant_priority_out_of_range_names_both_ends(priority: int) -> None:
    # Said "a non-negative integer" for -1, which 101 is too.
    with pytest.raises(ValueError, match=rf"^priority must be an integer in 0\.\.100, got "
                                         rf"{priority}$"):
        from_payload("grant", {"account": "a", "amount": 5, "priority": priority})
