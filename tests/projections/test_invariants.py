"""`projections.invariants` finds each kind of broken state, and `verify` reports it.

A sound ledger has no violations; each test breaks one thing by hand (the fold never
does) and checks the finding names the right rule and the figures.
"""

from __future__ import annotations

import pytest

from eventstore import MemoryJournal
from projections import GPUCreditTracker, Scheduler
from projections.creditbook import CreditBook, Expiry
from projections.events import CreditsConsumed, JobSubmitted
from projections.invariants import (
    CONSERVATION,
    CREDITS,
    DEBT,
    HOLDS,
    JOBS,
    LINEAGE,
    RESERVE,
    outcome_violations,
    violations,
)
from projections.ledger import Ledger
from projections.outcomes import Outcome
from projections.replay import verify


def _scheduler() -> Scheduler:
    clock = iter(range(10, 1000))
    s = Scheduler(clock=lambda: next(clock))
    s.open_account("a", 10, max_running=1)
    s.open_account("b", 5)
    s.submit("j1", "a", 4, 1)
    s.submit("j2", "a", 3, 1)
    s.submit("j3", "b", 9, 1)  # rejected
    s.start_next()
    return s


def _rules(ledger: Ledger, *, strict_reserve: bool = False) -> set[str]:
    return {v.rule for v in violations(ledger, strict_reserve=strict_reserve)}


def test_a_sound_ledger_has_no_violations() -> None:
    s = _scheduler()
    s.complete("j1", False, refund_fraction=0.5)
    s.cancel("j2")
    assert violations(s.ledger(), strict_reserve=True) == []


def test_a_batch_below_zero_is_a_credits_violation() -> None:
    ledger = _scheduler().ledger()
    batch = ledger.accounts["b"].book.heaps["general"][0]
    batch.amount = -1
    found = violations(ledger)
    assert CREDITS in {v.rule for v in found}
    assert any("holds -1 < 0" in v.detail and v.subject == "account 'b'" for v in found)


def test_debt_beside_usable_credits_is_a_debt_violation() -> None:
    ledger = _scheduler().ledger()
    ledger.accounts["b"].book.debt["general"] = 2
    assert DEBT in _rules(ledger)


def test_a_hold_that_does_not_match_held_is_found() -> None:
    ledger = _scheduler().ledger()
    ledger.accounts["a"].book.held += 1
    assert {HOLDS, RESERVE} <= _rules(ledger)


def test_reserved_above_balance_without_debt_is_a_reserve_violation() -> None:
    ledger = _scheduler().ledger()
    book = ledger.accounts["a"].book
    # Take the unreserved credits away without any record: balance < reserved, no debt.
    for batch in book.heaps["general"]:
        book.active["general"] -= batch.amount
        batch.amount = 0
    found = violations(ledger, accounts=["a"])
    assert RESERVE not in {v.rule for v in found}  # 7 held, 0 active: balance == reserved
    book.held += 1
    book.holds["j1"].portions.append((book.heaps["general"][0], 1))
    assert RESERVE in _rules(ledger)


def test_usage_debt_beside_holds_is_allowed_unless_strict() -> None:
    journal = MemoryJournal()
    s = Scheduler(journal, clock=lambda: 10)
    s.open_account("a", 10)
    s.submit("j1", "a", 8, 1)
    GPUCreditTracker(journal, account="a").consume(5, 11)  # 2 active, 3 debt
    ledger = s.ledger()
    assert ledger.accounts["a"].balance < ledger.accounts["a"].reserved
    assert violations(ledger) == []
    assert RESERVE in _rules(ledger, strict_reserve=True)


def test_a_job_in_two_states_is_found() -> None:
    ledger = _scheduler().ledger()
    ledger.jobs["j2"].state = "succeeded"  # still live, still queued, never charged
    found = [v for v in violations(ledger) if v.rule == JOBS]
    assert any(v.subject == "job 'j2'" and "live" in v.detail for v in found)


def test_an_unknown_state_is_found() -> None:
    ledger = _scheduler().ledger()
    ledger.jobs["j3"].state = "lost"
    assert any("unknown state 'lost'" in v.detail for v in violations(ledger))


def test_unbalanced_totals_are_a_conservation_violation() -> None:
    ledger = _scheduler().ledger()
    ledger.accounts["b"].book.totals.granted += 1
    assert CONSERVATION in _rules(ledger)


def test_checks_can_be_limited_to_what_a_step_touched() -> None:
    ledger = _scheduler().ledger()
    ledger.accounts["b"].book.totals.granted += 1
    assert violations(ledger, accounts=["a"], jobs=["j1"]) == []
    assert violations(ledger, accounts=["b", "nobody"], jobs=[]) != []


def test_a_charge_its_grants_do_not_add_up_to_is_a_lineage_violation() -> None:
    outcome = Outcome(5, "c1", "complete", 9, "a", paid_by=(("g1", 3),), charge=4,
                      released=4)
    found = outcome_violations(outcome, cost=8)
    assert [v.rule for v in found] == [LINEAGE]
    assert "charged 4, the grants named paid 3" in found[0].detail
    assert outcome_violations(outcome._replace(paid_by=(("g1", 3), ("g2", 1)))) == []


def test_debt_paid_by_released_credits_must_be_traced_to_grants() -> None:
    cancel = Outcome(6, "x1", "cancel", 9, "a", paid_debt=(("general", 3),),
                     debt_paid_by=(("g1", 3),), released=8)
    assert outcome_violations(cancel) == []
    untraced = outcome_violations(cancel._replace(debt_paid_by=()))
    assert [v.rule for v in untraced] == [LINEAGE]
    assert "the grants named paid 0" in untraced[0].detail
    too_much = cancel._replace(paid_debt=(("general", 9),), debt_paid_by=(("g1", 9),))
    assert [v.rule for v in outcome_violations(too_much)] == [LINEAGE]


def test_consume_and_submit_lineage() -> None:
    consume = Outcome(2, "u1", "consume", 3, "a", debt_after=2, debt_created=2,
                      paid_by=(("g1", 5),))
    assert outcome_violations(consume, CreditsConsumed("a", 7)) == []
    assert [v.rule for v in outcome_violations(consume, CreditsConsumed("a", 8))] == [LINEAGE]
    submit = Outcome(3, "s1", "submit", 4, "a", paid_by=(("g1", 5),))
    assert outcome_violations(submit, JobSubmitted("a", "j", 5, 0)) == []
    assert outcome_violations(submit, JobSubmitted("a", "j", 6, 0)) != []
    expired = consume._replace(expired=(Expiry("g1", "general", 3, 0),))
    assert outcome_violations(expired, CreditsConsumed("a", 7)) != []


def test_every_outcome_of_a_real_history_is_sound() -> None:
    from projections.events import from_payload
    from projections.projector import fold

    s = _scheduler()
    s.complete("j1", True)
    s.start_next()
    s.complete("j2", False, refund_fraction=0.25)
    journal = s._session.journal
    for rec, outcome, ledger in fold(journal.read(order="canonical")):
        event = from_payload(rec.type, rec.payload)
        job = getattr(event, "job", None)
        cost = ledger.jobs[job].cost if job in ledger.jobs else None
        assert outcome_violations(outcome, event, cost) == []


@pytest.mark.pure_python  # a leak planted in CreditBook.settle
def test_verify_reports_a_broken_invariant_as_a_failed_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    s = _scheduler()
    journal = s._session.journal
    assert verify(journal).ok
    settle = CreditBook.settle

    def leaky(self: CreditBook, ref: str, charge: int, time: int) -> object:
        out = settle(self, ref, charge, time)
        self.held += 1  # a settlement that forgets to release one credit
        return out

    monkeypatch.setattr(CreditBook, "settle", leaky)
    s.cancel("j2")
    report = verify(journal)
    assert not report.ok
    assert report.first_bad_position == journal.head()
    assert report.problem is not None and "breaks an invariant" in report.problem
    assert "held = " in report.problem
