"""Which pools an account's figures list: every pool it was granted, used or owed in.

A pool the account has used stays listed, at 0 once nothing is left in it and nothing is
owed there, whichever way it came to 0: its credits used up, its debt paid by a grant of
its own, by a general grant, by a refill or by credits a job gave back, or a usage in it
that general credits paid. Every answer that lists pools (`balance`, `accounts`, the
service's balance objects, the web view) reads them from `Figures`.
"""

from __future__ import annotations

from typing import Any

import pytest

from eventstore import MemoryJournal, NewEvent
from projections import GPUCreditTracker, Scheduler
from projections.figures import Figures
from projections.queries import balance
from projections.replay import fold_canonical, replay


def _journal(*events: tuple[str, int, dict[str, Any]]) -> MemoryJournal:
    journal = MemoryJournal()
    for n, (kind, time, payload) in enumerate(events):
        payload = dict(payload)
        event_id = payload.pop("id", f"e{n}")
        if kind not in ("void", "cancel", "reverse"):
            payload = {"account": "a", **payload}
        journal.append([NewEvent(event_id, "a", kind, time, payload)])
    return journal


def _pools(journal: MemoryJournal, at: int = 100) -> dict[str, int]:
    """The account's pools, as `balance` answers them; a fold from scratch agrees."""
    pools = balance(journal, "a", at=at).figures.pools
    assert Figures.of(fold_canonical(journal).accounts["a"], at).pools == pools
    assert list(pools) == sorted(pools)
    return pools


CASES: dict[str, tuple[tuple[tuple[str, int, dict[str, Any]], ...], dict[str, int]]] = {
    "used up": (
        (("grant", 1, {"amount": 10, "pool": "h100"}),
         ("consume", 2, {"amount": 10, "pool": "h100"})),
        {"h100": 0}),
    "debt paid by a general grant": (
        (("consume", 1, {"amount": 10, "pool": "h100"}),
         ("grant", 2, {"amount": 20})),
        {"general": 10, "h100": 0}),
    "debt paid by a general grant it swallowed": (
        (("consume", 1, {"amount": 10, "pool": "h100"}),
         ("grant", 2, {"amount": 10})),
        {"general": 0, "h100": 0}),
    "debt paid by a grant of its own it swallowed": (
        (("consume", 1, {"amount": 10, "pool": "h100"}),
         ("grant", 2, {"amount": 10, "pool": "h100"})),
        {"h100": 0}),
    "debt paid by a credit adjustment": (
        (("consume", 1, {"amount": 10, "pool": "h100"}),
         ("adjust", 2, {"amount": 15, "reason": "goodwill"})),
        {"general": 5, "h100": 0}),
    "used from general credits": (
        (("grant", 1, {"amount": 20}),
         ("consume", 2, {"amount": 5, "pool": "h100"})),
        {"general": 15, "h100": 0}),
    "debited from general credits": (
        (("grant", 1, {"amount": 20}),
         ("adjust", 2, {"amount": -5, "pool": "h100", "reason": "double-billed"})),
        {"general": 15, "h100": 0}),
    "granted, voided before": (
        (("void", 1, {"grant": "g", "id": "v"}),
         ("grant", 2, {"amount": 10, "pool": "h100", "id": "g"}),
         ("grant", 3, {"amount": 5})),
        {"general": 5, "h100": 0}),
    "granted, expired": (
        (("grant", 1, {"amount": 10, "pool": "h100", "expiry": 5}),),
        {"h100": 0}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_pool_the_account_used_stays_listed_at_zero(case: str) -> None:
    events, want = CASES[case]
    assert _pools(_journal(*events)) == want


def test_debt_paid_by_credits_a_job_gave_back() -> None:
    journal = _journal(
        ("grant", 0, {"amount": 10}),
        ("submit", 1, {"job": "j1", "cost": 8, "priority": 1}),
        ("consume", 2, {"amount": 5, "pool": "h100"}),  # 2 general, 3 owed in h100
        ("cancel", 3, {"job": "j1"}))                    # 3 of the 8 pay it
    assert _pools(journal) == {"general": 5, "h100": 0}


@pytest.mark.parametrize(("at", "want"), [(1, {"general": 0, "h100": -1}),
                                          (2, {"general": 0, "h100": 0}),
                                          (5, {"general": 3, "h100": 0})])
def test_debt_paid_by_a_refill_between_events_and_at_one(at: int, want: dict[str, int]
                                                         ) -> None:
    """A refill (here one credit a second) pays debt like a general grant; asked between
    events, the pools are those an event at that time would leave."""
    def opened(time: int) -> tuple[str, int, dict[str, Any]]:
        return ("account", time, {"refill_rate": 3600, "refill_cap": 100})

    owing = ("consume", 0, {"amount": 2, "pool": "h100"})
    assert _pools(_journal(opened(0), owing), at=at) == want
    assert _pools(_journal(opened(0), owing, opened(at)), at=at) == want


def test_a_job_in_a_pool_lists_it_while_general_credits_pay() -> None:
    s = Scheduler(clock=lambda: 1)
    s.open_account("a", 20)
    assert s.submit("j1", "a", cost=8, priority=1, pool="h100")
    t = GPUCreditTracker(s.journal, account="a")
    assert t.pool_balances(1) == {"general": 20, "h100": 0}
    assert s.start_next().id == "j1"
    s.complete("j1", success=True)
    assert t.pool_balances(1) == {"general": 12, "h100": 0}


def test_a_rejected_job_lists_nothing() -> None:
    s = Scheduler(clock=lambda: 1)
    s.open_account("a", 5)
    assert not s.submit("j1", "a", cost=8, priority=1, pool="h100")
    assert GPUCreditTracker(s.journal, account="a").pool_balances(1) == {"general": 5}


def test_a_reversed_usage_no_longer_lists_its_pool() -> None:
    journal = _journal(("grant", 1, {"amount": 20}),
                       ("consume", 2, {"amount": 5, "pool": "h100", "id": "u"}))
    assert _pools(journal) == {"general": 15, "h100": 0}
    journal.append([NewEvent("r", "a", "reverse", 2, {"event": "u", "reason": "mistake"})])
    assert _pools(journal) == {"general": 20}


def test_the_tracker_lists_the_pool_before_and_after_a_late_grant_pays_it() -> None:
    t = GPUCreditTracker(account="a")
    assert t.consume(10, 5, pool="h100") == 10
    t.grant(20, 10, 100)
    assert t.pool_balances(10) == {"general": 10, "h100": 0}
    t.grant(4, 3, 100, pool="h100")  # late: pays 4 of the h100 debt at 5
    assert t.pool_balances(5) == {"h100": -6}
    assert t.pool_balances(10) == {"general": 14, "h100": 0}
    assert GPUCreditTracker(t.journal, account="a").pool_balances(10) == t.pool_balances(10)


def test_a_checkpoint_lists_what_the_fold_lists(tmp_path: Any) -> None:
    """`accounts` and `balance` read a checkpoint's state and summary: they list the pool
    as a fold from the journal does."""
    from projections.queries import accounts

    url = f"sqlite:///{tmp_path / 'pools.db'}"
    t = GPUCreditTracker(url, account="a")
    t.consume(10, 1, pool="h100")
    t.grant(20, 2, 100)
    replay(t.journal, checkpoint=True)
    assert balance(t.journal, "a").figures.pools == {"general": 10, "h100": 0}
    (row,) = accounts(t.journal).rows
    assert row.figures.pools == {"general": 10, "h100": 0}
    t.journal.close()  # type: ignore[attr-defined]
