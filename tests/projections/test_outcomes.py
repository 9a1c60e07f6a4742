"""`outcome`, the fold's constructor of outcomes, gives exactly `Outcome(...)`."""

from __future__ import annotations

from typing import Any

from projections.creditbook import Expiry
from projections.outcomes import Outcome, outcome

REQUIRED = (3, "e3", "consume", 7, "acct")

# A value other than the default for every optional field.
OTHERS: dict[str, Any] = {
    "ok": False, "reason": "why", "debt_after": 4, "debt_created": 2,
    "paid_by": (("g1", 3),), "paid_debt": (("general", 1),),
    "debt_paid_by": (("g2", 1),), "charge": 5, "released": 6,
    "expired": (Expiry("g0", "general", 7, 8),), "anomaly": True,
}


def test_it_fills_in_the_defaults_of_the_named_tuple() -> None:
    made = outcome(*REQUIRED)
    assert type(made) is Outcome
    assert made == Outcome(*REQUIRED)
    assert made._asdict() == Outcome(*REQUIRED)._asdict()


def test_every_field_lands_where_the_named_tuple_puts_it() -> None:
    assert set(OTHERS) == set(Outcome._fields[len(REQUIRED):])
    for name, value in OTHERS.items():
        assert outcome(*REQUIRED, **{name: value}) == Outcome(*REQUIRED, **{name: value})
    assert outcome(*REQUIRED, **OTHERS) == Outcome(*REQUIRED, **OTHERS)
