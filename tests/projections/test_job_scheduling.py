"""`Scheduler` against the credit-scheduler design note: its four tests, every error case
of the contract, refunds, caps across accounts, and the figures after each settlement."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import pytest
from invariants import assert_invariants

from eventstore import MemoryJournal
from eventstore.testing import open_journal
from projections import (
    AccountExists,
    DuplicateJob,
    GPUCreditTracker,
    InvalidTransition,
    LedgerError,
    Scheduler,
    UnknownAccount,
    UnknownJob,
)


def make(**accounts: int) -> tuple[Scheduler, MemoryJournal]:
    """A scheduler on a fresh memory journal with a deterministic clock (1, 2, 3, ...)."""
    journal = MemoryJournal()
    ticks = itertools.count(1)
    scheduler = Scheduler(journal, clock=lambda: next(ticks))
    for name, balance in accounts.items():
        scheduler.open_account(name, balance)
    return scheduler, journal


def figures(s: Scheduler, account: str = "a") -> tuple[int, int, int, int]:
    v = s.accounts[account]
    return v.balance, v.reserved, v.available, v.running


# -- the design note's four rules, accounts opened with open_account -------------------------


def test_reject_when_unaffordable() -> None:
    s, _ = make(a=10)
    assert s.submit("j1", "a", cost=8, priority=1)
    assert not s.submit("j2", "a", cost=5, priority=9)  # 8 reserved, 2 available


def test_priority_then_age() -> None:
    s, _ = make(a=100)
    s.submit("low", "a", 1, priority=1)
    s.submit("high1", "a", 1, priority=5)
    s.submit("high2", "a", 1, priority=5)
    started = [s.start_next() for _ in range(3)]
    assert [j.id for j in started if j is not None] == ["high1", "high2", "low"]


def test_age_is_the_submits_event_time_not_when_it_was_recorded() -> None:
    """"Oldest submit" is canonical order: a submit recorded later but placed earlier on
    the timeline (`at=`) is the older one, in its own account and across accounts."""
    s, _ = make(a=100, b=100)
    s.submit("recorded-first", "a", 1, priority=1, at=50)
    s.submit("placed-first", "a", 1, priority=1, at=40)
    s.submit("b-placed-first", "b", 1, priority=1, at=45)
    started = [s.start_next() for _ in range(3)]
    assert [j.id for j in started if j is not None] == [
        "placed-first", "b-placed-first", "recorded-first"]


def test_failure_refunds_reservation() -> None:
    s, _ = make(a=10)
    s.submit("j", "a", 7, 1)
    s.start_next()
    s.complete("j", success=False)
    assert s.accounts["a"].available == 10 and s.accounts["a"].balance == 10


def test_cancel_pending_is_skipped() -> None:
    s, _ = make(a=10)
    s.submit("j1", "a", 3, 1)
    s.submit("j2", "a", 3, 1)
    s.cancel("j1")
    assert s.accounts["a"].available == 7
    s.cancel("j1")
    assert s.accounts["a"].available == 7
    job = s.start_next()
    assert job is not None and job.id == "j2"


# -- what start_next hands out, and when it hands out nothing ----------------------------


def test_start_next_returns_the_job_fields() -> None:
    s, _ = make(a=10)
    s.submit("j", "a", 4, priority=-3)
    job = s.start_next()
    assert job is not None
    assert (job.id, job.account_id, job.cost, job.priority) == ("j", "a", 4, -3)
    assert s.job_state("j") == "running"
    assert figures(s) == (10, 4, 6, 1)


def test_start_next_returns_none_when_nothing_can_start() -> None:
    s, journal = make(a=10)
    assert s.start_next() is None  # no jobs at all
    s.submit("j", "a", 3, 0)
    s.cancel("j")
    assert not s.submit("big", "a", 11, 5)  # rejected: never pending
    head = journal.head()
    assert s.start_next() is None  # only a tombstone and a rejected job
    assert journal.head() == head  # None appends nothing


def test_rejected_submit_is_recorded_and_takes_its_id() -> None:
    s, journal = make(a=10)
    head = journal.head()
    assert not s.submit("j", "a", 11, 0)
    assert journal.head() == head + 1
    assert s.job_state("j") == "rejected"
    assert figures(s) == (10, 0, 10, 0)
    with pytest.raises(DuplicateJob):
        s.submit("j", "a", 1, 0)


def test_a_submit_is_paid_from_what_is_available_after_debt_in_another_pool() -> None:
    """Credits of pool gpu cannot pay general debt, but the debt still lowers what the
    account has available: a submit in gpu may use at most min(usable(gpu), available)."""
    s, journal = make(a=0)
    tracker = GPUCreditTracker(journal, "a")
    assert tracker.consume(10, 1) == 10  # general debt
    tracker.grant(20, 2, 100, pool="gpu")  # pool credits: they leave general debt owed
    assert figures(s) == (10, 0, 10, 0)
    assert not s.submit("j1", "a", cost=15, priority=1, pool="gpu", at=3)
    assert s.submit("j2", "a", cost=10, priority=1, pool="gpu", at=4)
    assert figures(s) == (10, 10, 0, 0)


def test_zero_cost_job_runs_and_charges_nothing() -> None:
    s, _ = make(a=0)
    assert s.submit("free", "a", 0, 0)
    assert s.start_next() is not None
    s.complete("free", success=True)
    assert figures(s) == (0, 0, 0, 0)
    assert s.job_state("free") == "succeeded"


# -- settlement figures --------------------------------------------------------------------


def test_after_success_balance_and_reserved_fall_by_cost_available_unchanged() -> None:
    s, _ = make(a=20)
    s.submit("j", "a", 7, 0)
    s.submit("k", "a", 5, 0)
    s.start_next()
    before = figures(s)
    assert before == (20, 12, 8, 1)
    s.complete("j", success=True)
    balance, reserved, available, running = figures(s)
    assert balance == before[0] - 7
    assert reserved == before[1] - 7
    assert available == before[2]
    assert running == 0
    assert s.job_state("j") == "succeeded"


@pytest.mark.parametrize(
    ("cost", "fraction", "charge"),
    [
        (7, 0.5, 3),  # floor(3.5)
        (7, 1.0, 0),  # refunded in full: a failed job costs nothing
        (7, 0.0, 7),
        (10, 0.9, 1),  # exactly 1 (a binary float product would floor to 0)
        (10, 0.1, 9),
        (10, 0.7, 3),
        (3, 0.1, 2),  # floor(2.7)
        (100, 0.33, 67),  # floor(67.0): a float product gives 66.99999999999999
        (1, 0.5, 0),
        (0, 0.5, 0),
        (9, 1, 0),  # an int fraction is a number in [0, 1] too
        (9, 0, 9),
    ],
)
def test_failure_charges_floor_of_cost_times_one_minus_fraction(
    cost: int, fraction: float, charge: int
) -> None:
    s, _ = make(a=100, b=5)
    s.submit("j", "a", cost, 0)
    s.start_next()
    before = figures(s)
    s.complete("j", success=False, refund_fraction=fraction)
    balance, reserved, available, _ = figures(s)
    assert balance == before[0] - charge
    assert reserved == before[1] - cost
    assert available == before[2] + cost - charge
    assert s.ledger().jobs["j"].charge == charge
    assert s.job_state("j") == "failed"
    assert figures(s, "b") == (5, 0, 5, 0)
    assert_invariants(s.ledger(), scheduler_only=True)


def test_default_failure_leaves_balance_unchanged_and_frees_the_cost() -> None:
    s, _ = make(a=10)
    s.submit("j", "a", 6, 0)
    s.start_next()
    s.complete("j", success=False)
    assert figures(s) == (10, 0, 10, 0)


def test_cancel_releases_the_whole_reservation() -> None:
    s, _ = make(a=10)
    s.submit("j", "a", 6, 0)
    assert figures(s) == (10, 6, 4, 0)
    s.cancel("j")
    assert figures(s) == (10, 0, 10, 0)
    assert s.job_state("j") == "cancelled"


# -- caps across two accounts ---------------------------------------------------------------


def test_accounts_at_their_cap_are_skipped_without_losing_their_place() -> None:
    journal = MemoryJournal()
    ticks = itertools.count(1)
    s = Scheduler(journal, clock=lambda: next(ticks))
    s.open_account("a", 100, max_running=1)
    s.open_account("b", 100, max_running=2)
    s.submit("a1", "a", 1, 9)
    s.submit("a2", "a", 1, 9)
    s.submit("b1", "b", 1, 5)
    s.submit("a3", "a", 1, 9)
    s.submit("b2", "b", 1, 5)
    s.submit("b3", "b", 1, 1)

    def next_id() -> str | None:
        job = s.start_next()
        return None if job is None else job.id

    assert next_id() == "a1"
    assert next_id() == "b1"  # a is at its cap: a2 and a3 wait
    assert next_id() == "b2"
    head = journal.head()
    assert next_id() is None  # a at 1 of 1, b at 2 of 2
    assert journal.head() == head
    assert s.accounts["a"].running == 1 and s.accounts["b"].running == 2
    s.complete("a1", success=True)
    assert next_id() == "a2"  # a's place kept: before b3 and in submit order
    s.complete("b1", success=True)
    assert next_id() == "b3"  # a is at its cap again
    s.complete("a2", success=True)
    assert next_id() == "a3"
    assert next_id() is None
    assert_invariants(s.ledger(), scheduler_only=True)


def test_equal_priority_across_accounts_is_oldest_first_after_a_cap_frees() -> None:
    s, _ = make()
    s.open_account("a", 10, max_running=1)
    s.open_account("b", 10)
    s.submit("a1", "a", 1, 1)
    s.submit("a2", "a", 1, 1)  # older than b1
    s.submit("b1", "b", 1, 1)
    assert [s.start_next().id, s.start_next().id] == ["a1", "b1"]  # type: ignore[union-attr]
    s.submit("b2", "b", 1, 1)  # younger than a2
    s.complete("a1", success=False)
    assert [s.start_next().id, s.start_next().id] == ["a2", "b2"]  # type: ignore[union-attr]


def test_cancelled_head_does_not_block_its_account() -> None:
    s, _ = make()
    s.open_account("a", 10, max_running=1)
    s.submit("a1", "a", 1, 5)
    s.submit("a2", "a", 1, 4)
    s.cancel("a1")
    job = s.start_next()
    assert job is not None and job.id == "a2"


# -- errors: raise, append nothing, change no figure ---------------------------------------


def scenario() -> tuple[Scheduler, MemoryJournal]:
    """Account a (balance 100): pending p, running r, succeeded s, failed f, cancelled c,
    rejected x; account b (balance 5) with nothing; account 'c' used only by a consume."""
    s, journal = make(a=100, b=5)
    for job, prio in [("s", 9), ("f", 8), ("r", 7), ("p", 1), ("c", 0)]:
        assert s.submit(job, "a", 10, prio)
    assert not s.submit("x", "a", 1000, 0)
    for _ in range(3):
        s.start_next()
    s.complete("s", success=True)
    s.complete("f", success=False, refund_fraction=0.5)
    s.cancel("c")
    from projections import GPUCreditTracker

    GPUCreditTracker(journal, account="consumer").consume(5, 10**6)
    return s, journal


def state(s: Scheduler, journal: MemoryJournal) -> tuple[Any, ...]:
    return (
        journal.head(),
        s.state_digest(),
        figures(s, "a"),
        figures(s, "b"),
        {j: s.job_state(j) for j in "sfrpcx"},
    )


def test_each_job_state_and_figure_of_the_scenario_is_as_computed_by_hand() -> None:
    s, _ = scenario()
    assert {j: s.job_state(j) for j in "sfrpcx"} == {
        "s": "succeeded", "f": "failed", "r": "running", "p": "pending",
        "c": "cancelled", "x": "rejected",
    }
    assert figures(s, "a") == (100 - 10 - 5, 20, 65, 1)
    assert sorted(s.accounts) == ["a", "b"]
    assert_invariants(s.ledger(), scheduler_only=True)


ERRORS: list[tuple[str, type[Exception], Callable[[Scheduler], object]]] = [
    ("duplicate pending", DuplicateJob, lambda s: s.submit("p", "a", 1, 0)),
    ("duplicate running", DuplicateJob, lambda s: s.submit("r", "a", 1, 0)),
    ("duplicate succeeded", DuplicateJob, lambda s: s.submit("s", "b", 1, 0)),
    ("duplicate failed", DuplicateJob, lambda s: s.submit("f", "a", 1, 0)),
    ("duplicate cancelled", DuplicateJob, lambda s: s.submit("c", "a", 1, 0)),
    ("duplicate rejected", DuplicateJob, lambda s: s.submit("x", "a", 1, 0)),
    ("negative cost", ValueError, lambda s: s.submit("new", "a", -1, 0)),
    ("cost 1.5", ValueError, lambda s: s.submit("new", "a", 1.5, 0)),  # type: ignore[arg-type]
    ("cost True", ValueError, lambda s: s.submit("new", "a", True, 0)),
    ("cost '3'", ValueError, lambda s: s.submit("new", "a", "3", 0)),  # type: ignore[arg-type]
    ("priority 1.5", ValueError, lambda s: s.submit("new", "a", 1, 1.5)),  # type: ignore[arg-type]
    ("unknown account", KeyError, lambda s: s.submit("new", "zz", 1, 0)),
    ("consume-only account", KeyError, lambda s: s.submit("new", "consumer", 0, 0)),
    ("cancel running", ValueError, lambda s: s.cancel("r")),
    ("cancel succeeded", ValueError, lambda s: s.cancel("s")),
    ("cancel failed", ValueError, lambda s: s.cancel("f")),
    ("cancel rejected", ValueError, lambda s: s.cancel("x")),
    ("cancel unknown", KeyError, lambda s: s.cancel("nope")),
    ("complete pending", ValueError, lambda s: s.complete("p", True)),
    ("complete succeeded", ValueError, lambda s: s.complete("s", True)),
    ("complete failed", ValueError, lambda s: s.complete("f", False)),
    ("complete cancelled", ValueError, lambda s: s.complete("c", True)),
    ("complete rejected", ValueError, lambda s: s.complete("x", False)),
    ("complete unknown", KeyError, lambda s: s.complete("nope", True)),
    ("refund -0.1", ValueError, lambda s: s.complete("r", False, refund_fraction=-0.1)),
    ("refund 1.1", ValueError, lambda s: s.complete("r", False, refund_fraction=1.1)),
    ("refund 2", ValueError, lambda s: s.complete("r", False, refund_fraction=2)),
    ("refund nan", ValueError, lambda s: s.complete("r", False, refund_fraction=math.nan)),
    ("refund inf", ValueError, lambda s: s.complete("r", False, refund_fraction=math.inf)),
    ("refund True", ValueError, lambda s: s.complete("r", False, refund_fraction=True)),
    ("refund '0.5'", ValueError,
     lambda s: s.complete("r", False, refund_fraction="0.5")),  # type: ignore[arg-type]
    ("refund 1.1 on success", ValueError,
     lambda s: s.complete("r", True, refund_fraction=1.1)),
    ("success 1", ValueError, lambda s: s.complete("r", 1)),  # type: ignore[arg-type]
    ("open twice", AccountExists, lambda s: s.open_account("a", 5)),
    ("open negative", ValueError, lambda s: s.open_account("new", -5)),
    ("open max_running 0", ValueError, lambda s: s.open_account("new", 5, max_running=0)),
]


@pytest.mark.parametrize(
    ("error", "call"), [(e, c) for _, e, c in ERRORS], ids=[n for n, _, _ in ERRORS]
)
def test_error_raises_appends_nothing_and_changes_no_figure(
    error: type[Exception], call: Callable[[Scheduler], object]
) -> None:
    s, journal = scenario()
    before = state(s, journal)
    with pytest.raises(error) as raised:
        call(s)
    assert isinstance(raised.value, LedgerError | ValueError)
    assert state(s, journal) == before
    # A replay agrees: nothing half-written.
    assert Scheduler(journal).state_digest() == before[1]


def test_error_classes_are_what_the_contract_promises() -> None:
    assert issubclass(DuplicateJob, ValueError)
    assert issubclass(InvalidTransition, ValueError)
    assert issubclass(AccountExists, ValueError)
    assert issubclass(UnknownAccount, KeyError)
    assert issubclass(UnknownJob, KeyError)


def test_an_unknown_account_in_the_accounts_view_names_the_open_ones() -> None:
    """As a submit naming it does: an account a grant alone made is not open."""
    s = Scheduler(clock=lambda: 1)
    s.open_account("b", 5)
    s.open_account("Alice", 5)
    with pytest.raises(UnknownAccount) as missing:
        s.accounts["alice"]
    assert str(missing.value) == ("unknown account 'alice'; the journal holds 'Alice', "
                                  "spelled otherwise only in letter case, spaces or Unicode "
                                  "form (known: Alice, b)")


def test_a_submit_to_an_account_spelled_like_an_open_one_is_not_told_to_open_it() -> None:
    """Opening 'alice' would make a second account beside 'Alice': the submit names the
    held spelling as the accounts view does, and advises opening only a name like none."""
    s = Scheduler(clock=lambda: 1)
    s.open_account("b", 5)
    s.open_account("Alice", 5)
    with pytest.raises(UnknownAccount) as alike:
        s.submit("j", "alice", 1, 1)
    with pytest.raises(UnknownAccount) as viewed:
        s.accounts["alice"]
    assert str(alike.value) == str(viewed.value)
    with pytest.raises(UnknownAccount) as other:
        s.submit("j", "carol", 1, 1)
    assert str(other.value) == "unknown account 'carol'; open it first (known: Alice, b)"


def test_cancelling_an_already_cancelled_job_is_a_no_op() -> None:
    s, journal = scenario()
    before = state(s, journal)
    s.cancel("c")
    s.cancel("c")
    assert state(s, journal) == before


def test_accounts_is_a_read_only_view() -> None:
    s, _ = make(a=10)
    view = s.accounts["a"]
    with pytest.raises(AttributeError):
        view.balance = 99  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.accounts["a"] = view  # type: ignore[index]
    with pytest.raises(KeyError):
        s.accounts["zz"]
    assert "a" in s.accounts and "zz" not in s.accounts
    assert s.accounts["a"].balance == 10
    with pytest.raises(AttributeError):
        s.accounts = {}  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del s.accounts
    assert list(s.accounts) == ["a"] and s.accounts["a"].balance == 10


def test_an_account_view_kept_across_calls_follows_the_account() -> None:
    s, _ = make(a=10)
    view = s.accounts["a"]
    assert s.submit("j", "a", 4, 1)
    assert (view.balance, view.reserved, view.available, view.running) == (10, 4, 6, 0)
    assert s.start_next() is not None and view.running == 1
    s.complete("j", success=True)
    assert (view.balance, view.reserved, view.available, view.running) == (6, 0, 6, 0)
    assert view == s.accounts["a"] and view.id == "a"
    with pytest.raises(AttributeError):
        view.id = "b"  # type: ignore[misc]


def test_open_account_after_a_grant_adds_the_balance_and_the_cap() -> None:
    from projections import GPUCreditTracker

    s, journal = make()
    GPUCreditTracker(journal, account="a").grant(5, 0, 10**9)
    s.open_account("a", 10, max_running=1)
    assert figures(s) == (15, 0, 15, 0)
    assert s.accounts["a"].max_running == 1
    with pytest.raises(AccountExists):
        s.open_account("a", 1)


# -- explicit times (`at=`): a call placed in the past -----------------------------------


def timed() -> tuple[Scheduler, MemoryJournal]:
    """Account a opened at 100 with 10; job p (cost 5) submitted at 100."""
    journal = MemoryJournal()
    s = Scheduler(journal, clock=lambda: 100)
    s.open_account("a", 10)
    assert s.submit("p", "a", 5, 0)
    return s, journal


def test_complete_at_a_time_when_the_job_was_running_settles_it() -> None:
    s, _ = timed()
    assert s.start_next(at=110) is not None
    s.complete("p", True, at=150)
    assert s.job_state("p") == "succeeded"
    assert figures(s) == (5, 0, 5, 0)
    assert s.ledger().anomalies == []


def test_complete_at_a_time_before_the_job_started_is_refused() -> None:
    s, journal = timed()
    assert s.start_next(at=110) is not None
    head, digest = journal.head(), s.state_digest()
    with pytest.raises(ValueError):
        s.complete("p", True, at=105)  # p was pending at 105, not running
    assert journal.head() == head
    assert s.state_digest() == digest
    assert s.ledger().anomalies == []


@pytest.mark.parametrize("running", [False, True])
def test_cancel_or_complete_at_a_time_before_the_job_was_submitted_is_refused(
        running: bool) -> None:
    """Saying when the job was submitted, not "unknown job" of a job the caller can see."""
    s, journal = timed()
    if running:
        assert s.start_next(at=110) is not None
    head = journal.head()
    with pytest.raises(InvalidTransition, match=(
            r"^job 'p' was submitted at time 100; a (cancel|completion) at time 90 would "
            r"come before it: give a time of 100 or later, or no time \(now\)$")):
        if running:
            s.complete("p", True, at=90)
        else:
            s.cancel("p", at=90)  # p did not exist at 90
    assert journal.head() == head
    assert s.ledger().anomalies == []


def test_start_next_in_the_past_does_not_resurrect_a_cancelled_job() -> None:
    s, _ = timed()
    s.cancel("p", at=120)
    assert figures(s) == (10, 0, 10, 0)
    job = s.start_next(at=110)  # p was pending at 110, but it is cancelled at 120
    assert job is None
    assert s.job_state("p") == "cancelled"
    assert figures(s) == (10, 0, 10, 0)
    assert s.ledger().anomalies == []


def test_submit_at_a_time_before_the_account_existed_is_an_unknown_account() -> None:
    s, journal = timed()
    head = journal.head()
    with pytest.raises(KeyError):
        s.submit("early", "a", 1, 0, at=50)  # a was opened at 100
    assert journal.head() == head


def test_steps_of_a_job_rejected_for_its_unknown_account_are_anomalies() -> None:
    """A journal may hold a submit naming no account (rejected: no account is made for
    it); a start, completion or cancel of that job is kept as an anomaly naming no
    account, and changes nothing."""
    from projections.events import JobCancelled, JobCompleted, JobStarted, JobSubmitted
    from projections.ledger import Ledger

    ledger = Ledger()
    assert not ledger.apply(1, "s", 0, JobSubmitted("ghost", "j1", 5, 0)).ok
    steps = [JobStarted("j1"), JobCompleted("j1", True), JobCancelled("j1")]
    outcomes = [ledger.apply(2 + n, f"e{n}", 1, step) for n, step in enumerate(steps)]
    assert [(o.ok, o.anomaly, o.account, o.reason) for o in outcomes] == [
        (False, True, None, f"{kind} of job 'j1' which is rejected")
        for kind in ("start", "complete", "cancel")]
    assert ledger.accounts == {} and ledger.jobs["j1"].state == "rejected"


def test_a_submit_before_its_account_opened_says_when_it_opens(journal_url: str) -> None:
    """Found among the account's own events by the fold: a usage report before the
    opening (which does not open it) and grants after it do not move the answer."""
    journal = open_journal(journal_url)
    s = Scheduler(journal, clock=lambda: 1_000)
    tracker = GPUCreditTracker(journal, account="a")
    tracker.consume(5, 200)
    s.open_account("a", 10, at=500)
    tracker.grant(20, 600, 10_000)
    tracker.grant(20, 700, 10_000)
    recorded = len(list(journal.read()))
    with pytest.raises(UnknownAccount) as early:
        s.submit("j", "a", 1, 1, at=100)
    assert str(early.value) == ("account 'a' did not exist at time 100; it is opened at "
                                "time 500: submit at that time or later")
    with pytest.raises(UnknownAccount, match="did not exist at time 499; it is opened at "
                                             "time 500:"):
        s.submit("j", "a", 1, 1, at=499)
    assert len(list(journal.read())) == recorded  # the refusals appended nothing
    assert s.submit("j", "a", 1, 1, at=500)
    journal.close()


@pytest.mark.parametrize("opening", range(1, 9))
def test_the_opening_named_is_the_first_of_many_events(opening: int) -> None:
    """Each time halved to is an event of the account's own, whichever one opens it."""
    journal = MemoryJournal()
    s = Scheduler(journal, clock=lambda: 1_000)
    tracker = GPUCreditTracker(journal, account="a")
    for t in range(1, 9):  # usage reports, then the grant that opens, then more grants
        if t < opening:
            tracker.consume(1, t * 10)
        else:
            tracker.grant(5, t * 10, 10_000)
    with pytest.raises(UnknownAccount, match=f"it is opened at time {opening * 10}:"):
        s.submit("j", "a", 1, 1, at=5)
