"""The facades' contract (`GPUCreditTracker`, `Scheduler`), written once, run on every backend.

Like the journal's (tests/eventstore/journal_contract.py): each class states what one
facade promises, in tests named by the behaviour they check; `FacadeContract` gathers
them with what the two promise together. A backend runs the whole contract by
subclassing it and saying which journal to open:

    class TestMyFacades(FacadeContract):
        @pytest.fixture
        def journal_url(self, tmp_path: Path) -> str:
            return ...  # what `eventstore.testing.open_journal` takes ("memory" or a URL)

`test_facade_contract.py` runs it on the memory journal, a SQLite file and PostgreSQL,
with the mixins of tests/backend_classes.py that provide those `journal_url` fixtures.
Cases are small on purpose: the same bodies run once per backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

import pytest

from eventstore import JournalLike
from eventstore.testing import open_journal
from projections import GPUCreditTracker, Scheduler


class Clock:
    """The time of calls made without `at`: `now`, set by the test."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class _OnOneJournal:
    """An empty journal on the backend under test, and the facades on it."""

    @pytest.fixture
    def journal_url(self) -> str:
        raise NotImplementedError("a backend's test class provides journal_url")

    @pytest.fixture
    def journal(self, journal_url: str) -> Iterator[JournalLike]:
        with closing(open_journal(journal_url)) as journal:
            yield journal

    @pytest.fixture
    def tracker(self, journal: JournalLike) -> GPUCreditTracker:
        return GPUCreditTracker(journal, account="a")

    @pytest.fixture
    def clock(self) -> Clock:
        return Clock()

    @pytest.fixture
    def scheduler(self, journal: JournalLike, clock: Clock) -> Scheduler:
        return Scheduler(journal, clock=clock)


class TrackerContract(_OnOneJournal):
    """`GPUCreditTracker`: grant, consume, get_balance."""

    def test_the_seeds_worked_examples(self, journal: JournalLike,
                                       tracker: GPUCreditTracker) -> None:
        # Example 1, word for word.
        tracker.grant(amount=100, timestamp=0, expiry=10)
        tracker.grant(amount=50, timestamp=2, expiry=5)
        assert tracker.consume(amount=70, timestamp=3) == 0
        assert tracker.get_balance(timestamp=4) == 80
        assert tracker.consume(amount=90, timestamp=8) == 10
        assert tracker.get_balance(timestamp=8) == -10
        tracker.grant(amount=30, timestamp=12, expiry=20)
        assert tracker.get_balance(timestamp=12) == 20
        # Example 2 (expiration), on an account of its own.
        other = GPUCreditTracker(journal, account="example-2")
        other.grant(amount=50, timestamp=0, expiry=5)
        assert other.get_balance(timestamp=5) == 0
        assert other.consume(amount=20, timestamp=6) == 20
        assert other.get_balance(timestamp=6) == -20

    def test_credits_are_valid_from_timestamp_until_just_before_expiry(
            self, tracker: GPUCreditTracker) -> None:
        assert tracker.grant(100, 5, 10) is None  # type: ignore[func-returns-value]
        assert [tracker.get_balance(t) for t in (4, 5, 9, 10)] == [0, 100, 100, 0]

    def test_earliest_expiry_is_consumed_first_and_debt_is_returned(
            self, tracker: GPUCreditTracker) -> None:
        tracker.grant(100, 0, 20)
        tracker.grant(50, 0, 10)
        assert tracker.consume(60, 1) == 0
        # The 50 expiring at 10 went first; 90 of the later batch remain.
        assert tracker.get_balance(10) == 90
        assert tracker.consume(100, 11) == 10
        assert tracker.get_balance(11) == -10

    def test_a_later_grant_pays_debt_first_and_only_the_rest_expires(
            self, tracker: GPUCreditTracker) -> None:
        assert tracker.consume(30, 0) == 30
        assert tracker.get_balance(0) == -30
        tracker.grant(100, 1, 5)
        assert tracker.get_balance(1) == 70
        assert tracker.get_balance(5) == 0

    def test_a_grant_swallowed_by_debt_never_expires_anything(
            self, tracker: GPUCreditTracker) -> None:
        tracker.consume(100, 0)
        tracker.grant(40, 1, 3)
        assert tracker.get_balance(2) == -60
        assert tracker.get_balance(3) == -60

    @pytest.mark.parametrize("amount", [0, -1, True, 1.5, "3"])
    def test_bad_amounts_raise_value_error_and_append_nothing(
            self, journal: JournalLike, tracker: GPUCreditTracker, amount: object) -> None:
        with pytest.raises(ValueError):
            tracker.grant(amount, 0, 10)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            tracker.consume(amount, 0)  # type: ignore[arg-type]
        assert journal.head() == 0

    @pytest.mark.parametrize("expiry", [5, 4])
    def test_expiry_not_after_timestamp_is_a_value_error(
            self, journal: JournalLike, tracker: GPUCreditTracker, expiry: int) -> None:
        with pytest.raises(ValueError):
            tracker.grant(10, 5, expiry)
        assert journal.head() == 0

    def test_a_late_consume_returns_debt_on_the_corrected_timeline(
            self, tracker: GPUCreditTracker) -> None:
        tracker.grant(100, 0, 10)
        tracker.grant(50, 20, 30)
        assert tracker.consume(30, 25) == 0
        # Late: at 12 nothing is active, so all of it is debt right after.
        assert tracker.consume(40, 12) == 40
        # The grant at 20 paid the debt; the consume at 25 then ate 10 of the last 10.
        assert tracker.get_balance(25) == -20
        assert tracker.get_balance(12) == -40
        assert tracker.get_balance(5) == 100

    def test_get_balance_only_sees_events_up_to_t(self, tracker: GPUCreditTracker) -> None:
        tracker.grant(10, 0, 100)
        tracker.consume(4, 50)
        assert tracker.get_balance(49) == 10
        assert tracker.get_balance(50) == 6

    def test_accounts_on_one_journal_are_separate_and_unknown_ones_hold_zero(
            self, journal: JournalLike) -> None:
        a = GPUCreditTracker(journal, account="a")
        b = GPUCreditTracker(journal, account="b")
        a.grant(10, 0, 10)
        assert b.get_balance(1) == 0
        assert b.consume(3, 1) == 3
        assert a.get_balance(1) == 10
        assert a.consume(4, 2) == 0  # b's debt is not a's

    def test_a_second_tracker_on_the_journal_gives_the_same_answers(
            self, journal_url: str, journal: JournalLike, tracker: GPUCreditTracker) -> None:
        tracker.grant(100, 0, 10)
        tracker.consume(120, 5)
        assert tracker.consume(5, 2) == 0  # late: placed before the big consume
        answers = [tracker.get_balance(t) for t in range(12)]
        # A URL is opened again (a new process would do the same); memory is shared.
        with closing(journal if journal_url == "memory" else open_journal(journal_url)) \
                as again:
            other = GPUCreditTracker(again, account="a")
            assert [other.get_balance(t) for t in range(12)] == answers
            assert other.get_balance(5) == -25
            assert other.consume(1, 11) == 26  # and what one records, the other sees
        assert tracker.get_balance(11) == -26


class SchedulerContract(_OnOneJournal):
    """`Scheduler`: accounts, submit, start_next, complete, cancel."""

    def test_the_seeds_tests_through_open_account(self, scheduler: Scheduler) -> None:
        s = scheduler  # each case on an account of its own, leaving nothing pending
        s.open_account("reject", 10)
        assert s.submit("j1", "reject", cost=8, priority=1)
        assert not s.submit("j2", "reject", cost=5, priority=9)  # 8 reserved, 2 available
        s.cancel("j1")
        s.open_account("order", 100)
        s.submit("low", "order", 1, priority=1)
        s.submit("high1", "order", 1, priority=5)
        s.submit("high2", "order", 1, priority=5)
        assert [getattr(s.start_next(), "id", None) for _ in range(3)] == [
            "high1", "high2", "low"]
        s.open_account("refund", 10)
        s.submit("j", "refund", 7, 1)
        assert getattr(s.start_next(), "id", None) == "j"
        s.complete("j", success=False)
        assert (s.accounts["refund"].available, s.accounts["refund"].balance) == (10, 10)
        s.open_account("skip", 10)
        s.submit("c1", "skip", 3, 1)
        s.submit("c2", "skip", 3, 1)
        s.cancel("c1")
        assert s.accounts["skip"].available == 7
        s.cancel("c1")
        assert s.accounts["skip"].available == 7
        assert getattr(s.start_next(), "id", None) == "c2"

    def test_open_account_and_read_only_view(self, scheduler: Scheduler) -> None:
        assert scheduler.open_account(  # type: ignore[func-returns-value]
            "a", 100, max_running=1) is None
        view = scheduler.accounts["a"]
        assert (view.balance, view.reserved, view.available, view.running) == (100, 0, 100, 0)
        with pytest.raises((AttributeError, TypeError)):
            view.balance = 5  # type: ignore[misc]
        with pytest.raises(KeyError):
            scheduler.accounts["nobody"]

    def test_submit_reserves_and_unaffordable_submit_is_recorded_false(
            self, journal: JournalLike, scheduler: Scheduler) -> None:
        scheduler.open_account("a", 10)
        assert scheduler.submit("j1", "a", 8, 1) is True
        a = scheduler.accounts["a"]
        assert (a.reserved, a.available) == (8, 2)
        head = journal.head()
        assert scheduler.submit("j2", "a", 5, 1) is False
        assert journal.head() == head + 1
        assert scheduler.accounts["a"].balance >= scheduler.accounts["a"].reserved >= 0

    def test_start_next_highest_priority_then_oldest_and_cap(
            self, scheduler: Scheduler) -> None:
        scheduler.open_account("a", 100, max_running=1)
        scheduler.open_account("b", 100)
        scheduler.submit("low", "b", 1, 1, at=1)
        scheduler.submit("a1", "a", 1, 5, at=2)
        scheduler.submit("a2", "a", 1, 5, at=3)
        scheduler.submit("b-high", "b", 1, 5, at=4)
        job = scheduler.start_next(at=5)
        assert job is not None
        assert (job.id, job.account_id, job.cost, job.priority) == ("a1", "a", 1, 5)
        # a is at its cap: the next is b's priority-5 job, then b's low one.
        assert [getattr(scheduler.start_next(at=t), "id", None) for t in (6, 7, 8)] == [
            "b-high", "low", None]
        assert scheduler.accounts["a"].running == 1

    def test_the_oldest_submit_is_the_earliest_on_the_timeline_not_the_first_recorded(
            self, scheduler: Scheduler) -> None:
        # "Oldest" is by the canonical order (event time, then position): a submit that
        # arrives late, timed before one already recorded, is the older of the two.
        scheduler.open_account("a", 100, at=0)
        assert scheduler.submit("recorded-first", "a", 1, 5, at=5) is True
        assert scheduler.submit("timed-first", "a", 1, 5, at=2) is True
        assert [getattr(scheduler.start_next(at=t), "id", None) for t in (6, 7)] == [
            "timed-first", "recorded-first"]

    @pytest.mark.parametrize(("success", "fraction", "charged"), [
        (True, None, 30), (False, 1.0, 0), (False, 0.5, 15), (False, 0.0, 30),
        (False, 0.3, 21), (False, None, 0)])
    def test_completion_charges_the_cost_or_floor_of_cost_times_one_minus_fraction(
            self, scheduler: Scheduler, success: bool, fraction: float | None,
            charged: int) -> None:
        scheduler.open_account("a", 100)
        scheduler.submit("j", "a", 30, 1, at=1)
        scheduler.start_next(at=2)
        if fraction is None:  # the default: a failure is refunded in full
            done = scheduler.complete("j", success, at=3)
        else:
            done = scheduler.complete("j", success, refund_fraction=fraction, at=3)
        assert done is None  # type: ignore[func-returns-value]
        a = scheduler.accounts["a"]
        assert (a.balance, a.reserved, a.available) == (100 - charged, 0, 100 - charged)

    @pytest.mark.parametrize("fraction", [-0.1, 1.5])
    def test_refund_fraction_outside_unit_interval_is_value_error(
            self, journal: JournalLike, scheduler: Scheduler, fraction: float) -> None:
        scheduler.open_account("a", 100)
        scheduler.submit("j", "a", 30, 1, at=1)
        scheduler.start_next(at=2)
        head = journal.head()
        with pytest.raises(ValueError):
            scheduler.complete("j", False, refund_fraction=fraction, at=3)
        assert journal.head() == head

    def test_errors_raise_value_error_and_append_nothing(
            self, journal: JournalLike, scheduler: Scheduler) -> None:
        s = scheduler
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

    def test_unknown_account_or_job_raises_and_appends_nothing(
            self, journal: JournalLike, scheduler: Scheduler) -> None:
        scheduler.open_account("a", 100)
        head = journal.head()
        with pytest.raises((ValueError, KeyError)):
            scheduler.submit("j", "nobody", 1, 1, at=1)
        with pytest.raises((ValueError, KeyError)):
            scheduler.complete("ghost", True, at=1)
        with pytest.raises((ValueError, KeyError)):
            scheduler.cancel("ghost", at=1)
        assert journal.head() == head

    def test_unknown_account_on_submit_is_both_value_and_key_error(
            self, scheduler: Scheduler) -> None:
        with pytest.raises(ValueError):
            scheduler.submit("j", "nobody", 1, 1, at=1)
        with pytest.raises(KeyError):
            scheduler.submit("j", "nobody", 1, 1, at=1)

    def test_cancelling_twice_is_a_no_op(self, journal: JournalLike,
                                         scheduler: Scheduler) -> None:
        scheduler.open_account("a", 100)
        scheduler.submit("j", "a", 10, 1, at=1)
        scheduler.cancel("j", at=2)
        head = journal.head()
        assert scheduler.cancel("j", at=3) is None  # type: ignore[func-returns-value]
        assert journal.head() == head
        assert scheduler.accounts["a"].reserved == 0

    def test_clock_gives_the_time_of_calls_without_at(
            self, journal: JournalLike, scheduler: Scheduler, clock: Clock) -> None:
        clock.now = 42
        scheduler.open_account("a", 5)
        assert max(r.time for r in journal.read()) == 42

    def test_a_clock_of_fractional_seconds_is_refused_saying_what_to_pass(
            self, journal: JournalLike, scheduler: Scheduler, clock: Clock) -> None:
        scheduler.open_account("a", 5)
        head = journal.head()
        clock.now = 43.5  # type: ignore[assignment]  # what time.time returns
        with pytest.raises(ValueError, match=r"got 43\.5 \(float\).*int\(time\.time\(\)\)"):
            scheduler.submit("j", "a", 1, 1)
        assert journal.head() == head


class FacadeContract(TrackerContract, SchedulerContract):
    """Both facades, and what they promise together: one set of accounts per journal."""

    def test_tracker_and_scheduler_share_one_set_of_accounts(
            self, tracker: GPUCreditTracker, scheduler: Scheduler) -> None:
        tracker.grant(50, 0, 1000)
        assert scheduler.accounts["a"].balance == 50
        assert scheduler.submit("j", "a", 20, 1, at=10) is True
        scheduler.start_next(at=11)
        scheduler.complete("j", True, at=12)
        assert tracker.get_balance(12) == 30
        with pytest.raises((ValueError, KeyError)):
            scheduler.submit("k", "b", 1, 1, at=13)
