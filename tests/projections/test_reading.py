"""One way to read: every query catches up first, then reads the ledger it caught up."""

from __future__ import annotations

from eventstore import MemoryJournal
from projections import GPUCreditTracker, Scheduler
from projections.replay import fold_canonical
from projections.session import session_of


def test_job_state_after_a_late_consume_from_another_facade_is_the_replayed_one() -> None:
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 10)
    scheduler.open_account("a", 10, at=0)
    assert scheduler.submit("j", "a", cost=8, priority=1, at=10) is True
    assert scheduler.job_state("j") == "pending"
    # Another facade records a consume placed before the submit: on the corrected
    # timeline only 5 credits are left when the job asks for 8.
    GPUCreditTracker(journal, account="a").consume(5, timestamp=5)
    assert fold_canonical(journal).jobs["j"].state == "rejected"
    assert scheduler.job_state("j") == "rejected"
    assert Scheduler(journal).job_state("j") == "rejected"


def test_reading_yields_the_caught_up_ledger_under_the_lock() -> None:
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 10)
    GPUCreditTracker(journal, account="b").grant(7, timestamp=1, expiry=100)
    session = session_of(scheduler)
    with session.reading() as ledger:
        assert session.lock._is_owned()  # type: ignore[attr-defined]
        assert ledger.accounts["b"].balance == 7
        assert ledger is session.projector.ledger
