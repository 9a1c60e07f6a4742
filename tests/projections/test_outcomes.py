"""`outcome`, the fold's constructor of outcomes, gives exactly `Outcome(...)`; what an
outcome reports to its caller (what a revision compares)."""

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


def test_an_accepted_events_reason_is_not_part_of_what_its_caller_was_told() -> None:
    """Outcomes that are ok may carry a reason ("already cancelled", "voided at 3"): it
    explains, it was never an answer, so only a refusal's reason is reported."""
    assert outcome(*REQUIRED, reason="already cancelled").reported() == {"ok": True}
    assert outcome(*REQUIRED, ok=False, reason="why").reported() == {"ok": False,
                                                                       "reason": "why"}


def test_a_void_placed_before_its_grant_revises_nothing() -> None:
    """The grant's outcome gains the reason "voided at 1" when the void lands before it,
    but a grant has no reported outcome to revise (docs/semantics.md, "Late events")."""
    from projections.corrections import Corrections

    c = Corrections(clock=lambda: 0)
    c.grant("a", 10, at=5, event_id="g")
    c.void("g", at=1, reason="entered by mistake")
    assert c.ledger().accounts["a"].balance == 0
    assert c.revisions == []


def test_what_each_kind_of_outcome_reports() -> None:
    """A consume: its debt and who paid; a completion: its charge and who paid; nothing
    the event did not decide (no charge of a consume, no debt of a completion)."""
    consume = outcome(*REQUIRED, debt_after=4, debt_created=2, paid_by=(("g1", 3),))
    assert consume.reported() == {"ok": True, "debt_after": 4, "paid_by": [["g1", 3]]}
    complete = outcome(4, "e4", "complete", 9, "acct", charge=5, paid_by=(("g1", 5),),
                       released=1)
    assert complete.reported() == {"ok": True, "paid_by": [["g1", 5]], "charge": 5}
