"""Fair share, rule by rule (docs/semantics.md, "Fair share (off by default)"), each on a
small ledger whose answer is computed by hand: the differential tests reach these only
when their draws happen to."""

from __future__ import annotations

import itertools
import math
from typing import Any

from projections.ledger import Ledger

HOUR = 3600


class _Fold:
    """A ledger fed events in time order, positions counted up."""

    def __init__(self) -> None:
        self.ledger = Ledger()
        self._positions = itertools.count(1)

    def add(self, kind: str, time: int, **payload: Any) -> None:
        position = next(self._positions)
        self.ledger.apply_recorded(position, f"e{position}", kind, time, payload)

    def account(self, name: str, time: int, share: int | None,
                half_life: int = 7 * 24 * HOUR) -> None:
        self.add("account", time, account=name, max_running=None, share=share,
                 half_life=half_life)

    def charged(self, name: str, job: str, cost: int, time: int) -> None:
        """A job of `name` costing `cost`, run and completed at `time`."""
        self.add("submit", time, account=name, job=job, cost=cost, priority=0, pool=None)
        self.add("start", time, job=job)
        self.add("complete", time, job=job, success=True, refund_fraction=0.0)


def _funded(*names: str) -> _Fold:
    fold = _Fold()
    for name in names:
        fold.add("grant", 1, account=name, amount=10**6, pool=None, expiry=None)
    return fold


def test_the_larger_share_goes_first_at_equal_usage() -> None:
    fold = _funded("small", "large")
    fold.account("small", 2, share=1)
    fold.account("large", 2, share=3)
    fold.charged("small", "s0", 30, 3)
    fold.charged("large", "l0", 30, 3)
    # Equal usage: 30 / 1 against 30 / 3. The older submit is the small share's.
    fold.add("submit", 4, account="small", job="s1", cost=1, priority=0, pool=None)
    fold.add("submit", 5, account="large", job="l1", cost=1, priority=0, pool=None)
    job = fold.ledger.next_job(6)
    assert job is not None and job.id == "l1"


def test_a_charge_made_before_the_first_share_does_not_count() -> None:
    fold = _funded("before", "after")
    fold.account("before", 2, share=None)
    fold.charged("before", "b0", 1000, 3)  # no share yet: no usage
    fold.account("before", 4, share=1)
    fold.account("after", 4, share=1)
    fold.charged("after", "a0", 10, 5)
    assert fold.ledger.accounts["before"].decayed_usage(6) == 0
    # The account without usage sorts first though its submit is the younger.
    fold.add("submit", 6, account="after", job="a1", cost=1, priority=0, pool=None)
    fold.add("submit", 7, account="before", job="b1", cost=1, priority=0, pool=None)
    job = fold.ledger.next_job(8)
    assert job is not None and job.id == "b1"


def test_a_new_half_life_keeps_the_usage_as_it_is_at_its_time() -> None:
    fold = _funded("a")
    fold.account("a", 2, share=1, half_life=HOUR)
    fold.charged("a", "j0", 64, 0 + 10)
    # Two half-lives later, 16 is left; from there it halves every day.
    fold.account("a", 10 + 2 * HOUR, share=1, half_life=24 * HOUR)
    account = fold.ledger.accounts["a"]
    assert math.isclose(account.decayed_usage(10 + 2 * HOUR), 16.0, rel_tol=1e-9)
    assert math.isclose(account.decayed_usage(10 + 2 * HOUR + 24 * HOUR), 8.0, rel_tol=1e-9)


def test_equal_usage_per_share_ties_and_the_older_submit_goes_first() -> None:
    """6 charged on a share of 3 and 2 on a share of 1 tie, though their logarithms
    differ in the last bits: whichever account submitted first starts first."""
    for older, younger in (("three", "one"), ("one", "three")):
        fold = _funded("three", "one")
        fold.account("three", 2, share=3)
        fold.account("one", 2, share=1)
        fold.charged("three", "t0", 6, 3)
        fold.charged("one", "o0", 2, 3)
        fold.add("submit", 4, account=older, job="first", cost=1, priority=0, pool=None)
        fold.add("submit", 5, account=younger, job="second", cost=1, priority=0, pool=None)
        job = fold.ledger.next_job(6)
        assert job is not None and job.id == "first", older
