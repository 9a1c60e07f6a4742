"""Holds: directly on `CreditBook`, and through the `Scheduler` (a job's reservation).

A hold moves credits out of their batches, earliest expiry first; held credits cannot
expire; releasing returns each credit to its batch, or expires it there when the batch
expired meanwhile; settling charges `charge` (earliest expiry first) and releases the rest.
"""

from __future__ import annotations

from typing import NoReturn

import pytest
from invariants import assert_invariants

from eventstore import MemoryJournal
from projections import GPUCreditTracker, Scheduler
from projections.creditbook import Batch, CreditBook, Expiry, Hold
from projections.events import GENERAL
from projections.invariants import outcome_violations
from projections.ledger import Ledger
from projections.projector import apply_recorded


def live(book: CreditBook) -> dict[str, int]:
    """grant id -> credits left in its batch, for batches in the heaps."""
    return {b.grant_id: b.amount for heap in book.heaps.values() for b in heap}


def portions(book: CreditBook, ref: str) -> list[tuple[str, int]]:
    return [(b.grant_id, amount) for b, amount in book.holds[ref].portions]


def check(book: CreditBook) -> None:
    """assert_invariants for a bare book (no jobs): wrap it in a ledger with fake jobs."""
    from projections.ledger import RUNNING, AccountState, JobState

    ledger = Ledger()
    ledger.accounts["x"] = AccountState("x", book=book, opened=True)
    for ref, hold in book.holds.items():
        job = JobState(ref, "x", hold.amount, 0, hold.pool, RUNNING, (0, 0))
        ledger.jobs[ref] = job
        if hasattr(ledger, "live"):
            ledger.live[ref] = job
        ledger.accounts["x"].running += 1
    assert_invariants(ledger)


@pytest.fixture
def book() -> CreditBook:
    """late: 10 expiring at 50; early: 10 at 20; never: 10 that never expire."""
    b = CreditBook()
    b.grant("late", 10, 50, GENERAL, (0, 1))
    b.grant("early", 10, 20, GENERAL, (0, 2))
    b.grant("never", 10, None, GENERAL, (0, 3))
    return b


# -- CreditBook ------------------------------------------------------------------------------


def test_hold_draws_earliest_expiry_first(book: CreditBook) -> None:
    assert book.hold("j", 15, GENERAL) == (("early", 10), ("late", 5))
    assert portions(book, "j") == [("early", 10), ("late", 5)]
    assert book.held == 15
    assert book.active_total == 15
    assert live(book) == {"late": 5, "never": 10}  # early is used up and left the heap
    assert book.hold("k", 12, GENERAL) == (("late", 5), ("never", 7))
    assert book.held == 27
    check(book)


def test_hold_in_a_pool_takes_pool_credits_before_general_on_equal_expiry() -> None:
    b = CreditBook()
    b.grant("g20", 10, 20, GENERAL, (0, 1))
    b.grant("h20", 10, 20, "h100", (0, 2))
    b.grant("g10", 5, 10, GENERAL, (0, 3))
    b.grant("a10", 5, 10, "a100", (0, 4))
    assert b.hold("j", 18, "h100") == (("g10", 5), ("h20", 10), ("g20", 3))
    assert live(b) == {"g20": 7, "a10": 5}
    check(b)


def test_hold_in_general_never_takes_pool_credits_and_a_failed_hold_changes_nothing() -> None:
    b = CreditBook()
    b.grant("h", 10, None, "h100", (0, 1))
    b.grant("g", 3, 30, GENERAL, (0, 2))
    b.grant("g2", 3, 40, GENERAL, (0, 3))
    with pytest.raises(ValueError):
        b.hold("j", 7, GENERAL)  # only 6 general credits
    assert b.holds == {} and b.held == 0
    assert live(b) == {"h": 10, "g": 3, "g2": 3}
    assert b.active == {"h100": 10, GENERAL: 6}
    # The batches went back in order: a draw still takes the earliest expiry first.
    assert b.hold("j", 4, GENERAL) == (("g", 3), ("g2", 1))
    check(b)


def test_what_a_draw_may_use_in_a_pool_the_book_has_never_seen() -> None:
    """A pool nothing named yet has no credits of its own, but every general credit is
    usable in it; a book of pool credits only has nothing usable without a pool."""
    general_only = CreditBook()
    general_only.grant("g", 10, None, GENERAL, (0, 1))
    assert (general_only.usable("l40s"), general_only.usable(GENERAL)) == (10, 10)
    h100_only = CreditBook()
    h100_only.grant("h", 10, None, "h100", (0, 1))
    assert (h100_only.usable(GENERAL), h100_only.usable("a100")) == (0, 0)


def test_a_job_in_a_new_pool_may_reserve_every_general_credit() -> None:
    """The submit is decided on what is usable in its pool: the 10 general credits, all of
    them (one fewer would reject it)."""
    s = Scheduler(clock=lambda: 1)
    s.open_account("a", 10)
    assert s.submit("j1", "a", cost=10, priority=1, pool="l40s")
    assert s.accounts["a"].available == 0


def test_a_rejected_submit_says_what_its_pool_could_use() -> None:
    """An account of h100 credits only: a job with no pool may use none of them (the
    rejection says so, docs/semantics.md "Pools"); one in h100 is told what h100 holds."""
    from projections.events import AccountOpened, CreditsGranted, JobSubmitted

    ledger = Ledger()
    ledger.apply(1, "open", 0, AccountOpened("a"))
    ledger.apply(2, "g", 0, CreditsGranted("a", 10, None, "h100"))
    general = ledger.apply(3, "s1", 1, JobSubmitted("a", "j1", 5, 0)).reason
    assert general is not None and general.startswith("job 'j1' costs 5, only 0 available (")
    assert "0 of them general credits: a job without a pool cannot use pool credits" in general
    h100 = ledger.apply(4, "s2", 1, JobSubmitted("a", "j2", 50, 0, "h100")).reason
    assert h100 is not None
    assert h100.startswith("job 'j2' costs 50, only 10 available in pool 'h100' (")
    assert "10 of them usable in 'h100'" in h100


def test_duplicate_hold_ref_is_refused(book: CreditBook) -> None:
    book.hold("j", 1, GENERAL)
    with pytest.raises(ValueError):
        book.hold("j", 1, GENERAL)
    assert book.held == 1


def test_held_credits_cannot_expire_while_held(book: CreditBook) -> None:
    book.hold("j", 15, GENERAL)  # early 10, late 5
    expired = book.advance(60)  # past both expiries
    assert expired == [Expiry("late", GENERAL, 50, 5)]  # only the unheld rest of `late`
    assert book.held == 15
    assert book.totals.expired == 5
    assert book.active_total == 10  # never
    assert portions(book, "j") == [("early", 10), ("late", 5)]
    check(book)


def test_release_returns_each_credit_to_its_batch(book: CreditBook) -> None:
    book.hold("j", 15, GENERAL)
    charged, expired, paid_debt, _ = book.settle("j", 0, 10)
    assert charged == () and expired == [] and paid_debt == ()
    assert live(book) == {"late": 10, "early": 10, "never": 10}
    assert book.held == 0 and book.holds == {}
    assert book.active_total == 30
    # `early` left the heap when it was drawn to zero; it is back, in its place.
    lineage, short = book.consume(12, GENERAL)
    assert lineage == (("early", 10), ("late", 2)) and short == 0
    check(book)


def test_released_credit_whose_batch_expired_meanwhile_expires_at_release(
    book: CreditBook,
) -> None:
    book.hold("j", 15, GENERAL)  # early 10 (exp 20), late 5 (exp 50)
    book.advance(25)
    charged, expired, _, _ = book.settle("j", 0, 25)
    assert charged == ()
    assert expired == [Expiry("early", GENERAL, 20, 10)]
    assert live(book) == {"late": 10, "never": 10}
    assert book.totals.expired == 10
    assert book.active_total == 20
    check(book)


def test_settle_charges_earliest_expiry_first_and_releases_the_rest(book: CreditBook) -> None:
    book.hold("j", 15, GENERAL)
    charged, expired, _, _ = book.settle("j", 12, 10)
    assert charged == (("early", 10), ("late", 2))
    assert expired == []
    assert live(book) == {"late": 8, "never": 10}
    assert book.totals.charged_jobs == 12
    assert book.totals.charged_from_credits == 12
    assert book.held == 0
    check(book)


def test_settle_after_expiry_charges_then_expires_the_released_part(book: CreditBook) -> None:
    book.hold("j", 15, GENERAL)
    book.advance(55)  # both expired; `late`'s unheld 5 expire now
    charged, expired, _, _ = book.settle("j", 7, 55)
    assert charged == (("early", 7),)
    assert expired == [Expiry("early", GENERAL, 20, 3), Expiry("late", GENERAL, 50, 5)]
    assert book.totals.expired == 5 + 3 + 5
    assert live(book) == {"never": 10}
    check(book)


@pytest.mark.parametrize(("charge", "lapsed"), [
    (10, [Expiry("late", GENERAL, 50, 5)]),  # early's portion charged whole
    (15, []),  # every portion charged whole: nothing comes back to lapse
])
def test_settle_after_expiry_expires_only_what_it_releases(
        book: CreditBook, charge: int, lapsed: list[Expiry]) -> None:
    """A portion the charge takes whole releases nothing: its expired batch gets no
    expiry of 0 credits (a statement would show it as a line of credits that lapsed)."""
    book.hold("j", 15, GENERAL)  # early 10 (exp 20), late 5 (exp 50)
    book.advance(55)
    _, expired, _, _ = book.settle("j", charge, 55)
    assert expired == lapsed
    check(book)


def test_released_credits_pay_debt_first() -> None:
    b = CreditBook()
    b.grant("g", 10, 100, GENERAL, (0, 1))
    b.hold("j", 10, GENERAL)
    assert b.consume(4, GENERAL) == ((), 4)
    assert b.debt == {GENERAL: 4}
    settled = b.settle("j", 0, 5)
    assert b.debt == {}
    assert live(b) == {"g": 6}
    assert b.totals.debt_paid == 4
    # The settlement says so: which debt the released credits paid, and whose they were.
    assert settled.paid_debt == ((GENERAL, 4),)
    assert settled.debt_paid_by == (("g", 4),)
    check(b)


def test_released_credits_name_each_grant_and_pool_whose_debt_they_paid() -> None:
    b = CreditBook()
    b.grant("g1", 3, 100, "h100", (0, 1))
    b.grant("g2", 10, 200, GENERAL, (0, 2))
    b.hold("j", 13, "h100")  # g1 3, then g2 10
    assert b.consume(2, "h100") == ((), 2)
    assert b.consume(5, "a100") == ((), 5)
    settled = b.settle("j", 0, 5)
    # g1's h100 credits pay h100's debt; g2's general credits pay what is left of it
    # (none), then each pool's in pool-name order.
    assert settled.paid_debt == (("h100", 2), ("a100", 5))
    assert settled.debt_paid_by == (("g1", 2), ("g2", 5))
    assert b.debt == {} and live(b) == {"g1": 1, "g2": 5}
    check(b)


def test_settle_with_a_charge_outside_the_hold_changes_nothing(book: CreditBook) -> None:
    book.hold("j", 6, GENERAL)
    with pytest.raises(ValueError):
        book.settle("j", 7, 1)
    assert portions(book, "j") == [("early", 6)]
    assert book.held == 6
    check(book)


# -- through the Scheduler ---------------------------------------------------------------


class Clock:
    def __init__(self, t: int = 0) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def figures(scheduler: Scheduler) -> tuple[int, int, int]:
    """Account a's (balance, reserved, available), as the Scheduler's view shows them."""
    view = scheduler.accounts["a"]
    return view.balance, view.reserved, view.available


def book_of(scheduler: Scheduler) -> CreditBook:
    """Account a's credit book in the Scheduler's ledger."""
    return scheduler.ledger().accounts["a"].book


def setup() -> tuple[Scheduler, GPUCreditTracker, Clock]:
    """Account a: 10 expiring at 50 and 10 at 100; job j (cost 15) submitted at 10."""
    journal = MemoryJournal()
    clock = Clock(0)
    scheduler = Scheduler(journal, clock=clock)
    tracker = GPUCreditTracker(journal, account="a")
    scheduler.open_account("a")
    tracker.grant(10, 0, 100)
    tracker.grant(10, 0, 50)
    clock.t = 10
    assert scheduler.submit("j", "a", 15, 1)
    return scheduler, tracker, clock


def cancelled_at(t: int) -> tuple[Scheduler, GPUCreditTracker, Clock]:
    """`setup()`, then job j cancelled (while pending) at time t."""
    scheduler, tracker, clock = setup()
    clock.t = t
    scheduler.cancel("j")
    return scheduler, tracker, clock


def test_scheduler_hold_draws_earliest_expiry_first() -> None:
    scheduler, tracker, _ = setup()
    book = book_of(scheduler)
    g100, g50 = [r.id for r in tracker.journal.read() if r.type == "grant"]  # type: ignore[attr-defined]
    assert portions(book, "j") == [(g50, 10), (g100, 5)]
    assert figures(scheduler) == (20, 15, 5)


def test_scheduler_reserved_credits_do_not_expire_under_a_job() -> None:
    scheduler, tracker, clock = setup()
    clock.t = 60  # the credits expiring at 50 are held
    assert figures(scheduler) == (20, 15, 5)
    assert tracker.get_balance(60) == 20
    assert scheduler.start_next() is not None
    scheduler.complete("j", success=True)
    assert figures(scheduler) == (5, 0, 5)
    assert book_of(scheduler).totals.expired == 0
    assert_invariants(scheduler.ledger(), scheduler_only=True)


def test_scheduler_cancel_returns_credits_and_expires_those_past_their_expiry() -> None:
    scheduler, tracker, _ = cancelled_at(70)
    assert figures(scheduler) == (10, 0, 10)
    assert tracker.get_balance(69) == 20
    assert tracker.get_balance(70) == 10
    assert book_of(scheduler).totals.expired == 10
    assert_invariants(scheduler.ledger(), scheduler_only=True)


def test_scheduler_cancel_before_expiry_returns_everything() -> None:
    scheduler, tracker, clock = cancelled_at(30)
    assert figures(scheduler) == (20, 0, 20)
    clock.t = 50
    assert scheduler.accounts["a"].balance == 10  # the 50-batch expires whole, as granted
    assert tracker.get_balance(50) == 10


def test_scheduler_partial_failure_charges_earliest_expiry_first_rest_expires() -> None:
    scheduler, tracker, clock = setup()
    assert scheduler.start_next() is not None
    clock.t = 70
    scheduler.complete("j", success=False, refund_fraction=0.5)  # charge floor(7.5) = 7
    # charged 7 of the 50-batch; its other 3 expire at release; 5 return to the 100-batch
    assert figures(scheduler) == (10, 0, 10)
    book = book_of(scheduler)
    assert book.totals.charged_jobs == 7
    assert book.totals.expired == 3
    assert tracker.get_balance(70) == 10
    assert_invariants(scheduler.ledger(), scheduler_only=True)


def test_scheduler_release_pays_debt_a_usage_report_created() -> None:
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 5)
    tracker = GPUCreditTracker(journal, account="a")
    scheduler.open_account("a", 10)
    assert scheduler.submit("j", "a", 10, 0)
    assert tracker.consume(4, 5) == 4  # all 10 are held: the usage is debt
    assert scheduler.accounts["a"].balance == 6
    scheduler.cancel("j")
    assert figures(scheduler) == (6, 0, 6)
    assert book_of(scheduler).debt == {}
    assert_invariants(scheduler.ledger())


@pytest.mark.parametrize("finish", ["cancel", "fail", "partial"])
def test_the_outcome_of_a_release_says_what_debt_it_paid(finish: str) -> None:
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 5)
    tracker = GPUCreditTracker(journal, account="a")
    scheduler.open_account("a")
    tracker.grant(10, 5, 100)
    assert scheduler.submit("j", "a", 8, 0)
    assert tracker.consume(5, 5) == 3  # 2 active, then 3 owed
    if finish == "cancel":
        scheduler.cancel("j")
    else:
        assert scheduler.start_next() is not None
        scheduler.complete("j", success=False,
                           refund_fraction=1.0 if finish == "fail" else 0.5)
    ledger = Ledger()
    outcomes = [apply_recorded(ledger, rec) for rec in journal.read(order="canonical")]
    release = outcomes[-1]
    assert release.type == ("cancel" if finish == "cancel" else "complete")
    assert release.paid_debt == ((GENERAL, 3),)
    grant = next(rec.id for rec in journal.read() if rec.type == "grant")
    assert release.debt_paid_by == ((grant, 3),)
    assert outcome_violations(release) == []
    assert ledger.accounts["a"].book.debt == {}


def test_a_hold_compares_and_shows_itself_as_a_dataclass_did() -> None:
    batch = Batch("g", GENERAL, None, 3, (1, 1))
    hold = Hold(GENERAL, [(batch, 2)])
    assert hold == Hold(GENERAL, [(batch, 2)]) and hold != Hold("h100", [(batch, 2)])
    assert hold.amount == 2 and Hold(GENERAL, []).amount == 0
    assert repr(hold) == f"Hold(pool='general', portions=[({batch!r}, 2)])"


def _summed(book: CreditBook) -> dict[str, int]:
    """What every hold's portions add per pool of their batches, summed hold by hold."""
    out: dict[str, int] = {}
    for hold in book.holds.values():
        for batch, amount in hold.portions:
            out[batch.pool] = out.get(batch.pool, 0) + amount
    return out


def test_held_by_pool_is_every_holds_portions_summed(book: CreditBook) -> None:
    assert book.held_by_pool() == _summed(book) == {}
    book.hold("free", 0, GENERAL)  # a job of cost 0 holds nothing
    assert book.held_by_pool() == _summed(book) == {}
    book.hold("j1", 15, GENERAL)
    book.hold("j2", 7, GENERAL)
    assert book.held_by_pool() == _summed(book) == {GENERAL: 22}
    book.grant("gpu", 10, None, "h100", (0, 4))
    book.hold("j3", 12, "h100")  # 10 of the h100 grant, 2 general
    assert book.held_by_pool() == _summed(book) == {GENERAL: 24, "h100": 10}
    book.settle("j3", 12, 5)
    assert book.held_by_pool() == _summed(book) == {GENERAL: 22}


@pytest.mark.pure_python
def test_held_by_pool_of_a_one_pool_book_does_not_sum_its_holds(book: CreditBook) -> None:
    # Summing them made each read of an account's figures as slow as it had pending jobs.
    for i in range(3):
        book.hold(f"j{i}", 5, GENERAL)

    class Unread(dict[str, Hold]):
        def values(self) -> NoReturn:
            raise AssertionError("every hold was summed")

    book.holds = Unread(book.holds)
    assert book.held_by_pool() == {GENERAL: 15}


def test_released_credits_that_expired_meanwhile_pay_no_debt() -> None:
    """Credits released after their batch expired lapse: they are not there to pay the
    debt a usage report made meanwhile (10 held from a grant ending at 10, 5 owed)."""
    s = Scheduler(clock=lambda: 1)
    t = GPUCreditTracker(s.journal, account="a")
    t.grant(10, timestamp=0, expiry=10)
    assert s.submit("j1", "a", cost=10, priority=1)
    assert t.consume(5, timestamp=2) == 5
    s.cancel("j1", at=12)
    assert t.get_balance(12) == -5
    book = s.ledger().accounts["a"].book
    assert (book.debt_total, book.totals.expired, book.totals.debt_paid) == (5, 10, 0)
