"""The scheduler facade as the public contract states it."""

from __future__ import annotations

import pytest

from eventstore import Journal
from projections import GPUCreditTracker, Scheduler


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def make() -> tuple[Journal, Scheduler]:
    journal = Journal()
    return journal, Scheduler(journal, clock=Clock())


def test_open_account_and_read_only_view() -> None:
    _, s = make()
    assert s.open_account("a", 100, max_running=1) is None  # type: ignore[func-returns-value]
    view = s.accounts["a"]
    assert (view.balance, view.reserved, view.available, view.running) == (100, 0, 100, 0)
    with pytest.raises((AttributeError, TypeError)):
        view.balance = 5  # type: ignore[misc]
    with pytest.raises(KeyError):
        s.accounts["nobody"]


def test_submit_reserves_and_unaffordable_submit_is_recorded_false() -> None:
    journal, s = make()
    s.open_account("a", 10)
    assert s.submit("j1", "a", 8, 1) is True
    assert (s.accounts["a"].reserved, s.accounts["a"].available) == (8, 2)
    head = journal.head()
    assert s.submit("j2", "a", 5, 1) is False
    assert journal.head() == head + 1
    assert s.accounts["a"].balance >= s.accounts["a"].reserved >= 0


def test_start_next_highest_priority_then_oldest_and_cap() -> None:
    _, s = make()
    s.open_account("a", 100, max_running=1)
    s.open_account("b", 100)
    s.submit("low", "b", 1, 1, at=1)
    s.submit("a1", "a", 1, 5, at=2)
    s.submit("a2", "a", 1, 5, at=3)
    s.submit("b-high", "b", 1, 5, at=4)
    job = s.start_next(at=5)
    assert job is not None
    assert (job.id, job.account_id, job.cost, job.priority) == ("a1", "a", 1, 5)
    # a is at its cap: the next is b's priority-5 job, then b's low one.
    assert s.start_next(at=6).id == "b-high"  # type: ignore[union-attr]
    assert s.start_next(at=7).id == "low"  # type: ignore[union-attr]
    assert s.start_next(at=8) is None
    assert s.accounts["a"].running == 1


def test_complete_success_charges_the_cost() -> None:
    _, s = make()
    s.open_account("a", 100)
    s.submit("j", "a", 30, 1, at=1)
    s.start_next(at=2)
    assert s.complete("j", True, at=3) is None  # type: ignore[func-returns-value]
    v = s.accounts["a"]
    assert (v.balance, v.reserved, v.available) == (70, 0, 70)


@pytest.mark.parametrize(("fraction", "charged"), [(1.0, 0), (0.5, 15), (0.0, 30), (0.3, 21)])
def test_failed_job_is_charged_floor_of_cost_times_one_minus_fraction(
        fraction: float, charged: int) -> None:
    _, s = make()
    s.open_account("a", 100)
    s.submit("j", "a", 30, 1, at=1)
    s.start_next(at=2)
    s.complete("j", False, refund_fraction=fraction, at=3)
    assert s.accounts["a"].balance == 100 - charged
    assert s.accounts["a"].reserved == 0


def test_default_failure_charges_nothing() -> None:
    _, s = make()
    s.open_account("a", 100)
    s.submit("j", "a", 30, 1, at=1)
    s.start_next(at=2)
    s.complete("j", False, at=3)
    assert s.accounts["a"].balance == 100


@pytest.mark.parametrize("fraction", [-0.1, 1.5])
def test_refund_fraction_outside_unit_interval_is_value_error(fraction: float) -> None:
    journal, s = make()
    s.open_account("a", 100)
    s.submit("j", "a", 30, 1, at=1)
    s.start_next(at=2)
    head = journal.head()
    with pytest.raises(ValueError):
        s.complete("j", False, refund_fraction=fraction, at=3)
    assert journal.head() == head


def test_errors_raise_value_error_and_append_nothing() -> None:
    journal, s = make()
    s.open_account("a", 100)
    s.submit("j", "a", 10, 1, at=1)
    s.submit("done", "a", 10, 1, at=1)
    s.start_next(at=2)  # j starts (oldest)
    head = journal.head()
    with pytest.raises(ValueError):
        s.submit("j", "a", 1, 1, at=3)  # duplicate id
    with pytest.raises(ValueError):
        s.submit("neg", "a", -1, 1, at=3)
    with pytest.raises(ValueError):
        s.cancel("j", at=3)  # running
    with pytest.raises(ValueError):
        s.complete("done", True, at=3)  # pending, not running
    assert journal.head() == head
    s.complete("j", True, at=4)
    head = journal.head()
    with pytest.raises(ValueError):
        s.cancel("j", at=5)  # finished
    with pytest.raises(ValueError):
        s.complete("j", True, at=5)  # finished
    assert journal.head() == head


def test_unknown_account_or_job_raises_and_appends_nothing() -> None:
    journal, s = make()
    s.open_account("a", 100)
    head = journal.head()
    with pytest.raises((ValueError, KeyError)):
        s.submit("j", "nobody", 1, 1, at=1)
    with pytest.raises((ValueError, KeyError)):
        s.complete("ghost", True, at=1)
    with pytest.raises((ValueError, KeyError)):
        s.cancel("ghost", at=1)
    assert journal.head() == head


def test_unknown_account_on_submit_is_both_value_and_key_error() -> None:
    _, s = make()
    with pytest.raises(ValueError):
        s.submit("j", "nobody", 1, 1, at=1)
    with pytest.raises(KeyError):
        s.submit("j", "nobody", 1, 1, at=1)


def test_cancelling_twice_is_a_no_op() -> None:
    journal, s = make()
    s.open_account("a", 100)
    s.submit("j", "a", 10, 1, at=1)
    s.cancel("j", at=2)
    head = journal.head()
    assert s.cancel("j", at=3) is None  # type: ignore[func-returns-value]
    assert journal.head() == head
    assert s.accounts["a"].reserved == 0


def test_clock_gives_the_time_of_calls_without_at() -> None:
    journal = Journal()
    clock = Clock()
    s = Scheduler(journal, clock=clock)
    clock.now = 42
    s.open_account("a", 5)
    assert max(r.time for r in journal.read()) == 42


def test_tracker_and_scheduler_share_one_set_of_accounts() -> None:
    journal = Journal()
    t = GPUCreditTracker(journal, account="a")
    t.grant(50, 0, 1000)
    s = Scheduler(journal, clock=Clock())
    assert s.accounts["a"].balance == 50
    assert s.submit("j", "a", 20, 1, at=10) is True
    s.start_next(at=11)
    s.complete("j", True, at=12)
    assert t.get_balance(12) == 30
    with pytest.raises((ValueError, KeyError)):
        s.submit("k", "b", 1, 1, at=13)
