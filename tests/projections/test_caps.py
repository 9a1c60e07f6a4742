"""An account's cap on running jobs: checked when a job starts, and never set below the
jobs already running."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import Scheduler
from projections.errors import InvalidTransition
from projections.invariants import violations
from projections.ledger import Ledger
from projections.projector import apply_recorded
from projections.replay import fold_canonical, verify

JOBS = [f"j{i}" for i in range(5)]
OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(JOBS)),
    st.tuples(st.just("start"), st.sampled_from(JOBS)),
    st.tuples(st.just("complete"), st.sampled_from(JOBS)),
    st.tuples(st.just("account"), st.none() | st.integers(1, 3))), max_size=40)


def _payload(op: tuple[str, Any]) -> dict[str, Any]:
    kind, arg = op
    if kind == "submit":
        return {"account": "a", "job": arg, "cost": 1, "priority": 0}
    if kind == "account":
        return {"account": "a"} if arg is None else {"account": "a", "max_running": arg}
    if kind == "complete":
        return {"job": arg, "success": True}
    return {"job": arg}


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_running_jobs_never_exceed_the_cap_and_a_cap_below_them_changes_nothing(
        ops: list[tuple[str, Any]]) -> None:
    ledger = Ledger()
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 1000})])
    apply_recorded(ledger, next(iter(journal.read())))
    cap: int | None = None  # the model: the last cap that took effect
    for n, op in enumerate(ops, start=1):
        running = ledger.accounts["a"].running
        rec = journal.append([NewEvent(f"e{n}", "a", op[0], n, _payload(op))])[0]
        outcome = apply_recorded(ledger, rec)
        if op[0] == "account":
            below = op[1] is not None and running > op[1]
            assert outcome.anomaly == below, (op, running)
            if not below:
                cap = op[1]
        assert ledger.accounts["a"].max_running == cap
        assert violations(ledger) == [], op
    assert verify(journal).ok


def _one_running(*then: NewEvent) -> MemoryJournal:
    """Account `a` with credits, jobs j1 and j2 submitted and j1 running, then `then`."""
    journal = MemoryJournal()
    journal.append([
        NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 100}),
        *(NewEvent(f"s{n}", "a", "submit", 1, {"account": "a", "job": f"j{n}", "cost": 10,
                                               "priority": 1}) for n in (1, 2)),
        NewEvent("st1", "a", "start", 2, {"job": "j1"}), *then])
    return journal


def _cap(name: str, time: int, cap: int) -> NewEvent:
    return NewEvent(name, "a", "account", time, {"account": "a", "max_running": cap})


def test_a_cap_below_the_running_jobs_is_an_anomaly_and_verify_passes() -> None:
    journal = _one_running(NewEvent("st2", "a", "start", 3, {"job": "j2"}), _cap("acc", 5, 1))
    result = verify(journal)
    assert result.ok, result
    ledger = fold_canonical(journal)
    assert ledger.accounts["a"].max_running is None
    assert [event_id for _, event_id, _ in ledger.anomalies] == ["acc"]
    scheduler = Scheduler(journal, clock=lambda: 6)
    assert scheduler.accounts["a"].running == 2
    # Once a job finished, the same cap is one the account can take.
    scheduler.complete("j1", True)
    journal.append([_cap("acc2", 7, 1)])
    assert verify(journal).ok
    assert fold_canonical(journal).accounts["a"].max_running == 1


def test_a_late_start_before_a_lowered_cap_turns_the_cap_into_an_anomaly() -> None:
    journal = _one_running(_cap("acc", 5, 1))
    assert fold_canonical(journal).accounts["a"].max_running == 1
    journal.append([NewEvent("st2", "a", "start", 3, {"job": "j2"})])  # late
    assert verify(journal).ok
    ledger = fold_canonical(journal)
    assert (ledger.accounts["a"].running, ledger.accounts["a"].max_running) == (2, None)
    assert [event_id for _, event_id, _ in ledger.anomalies] == ["acc"]


def test_opening_an_account_with_a_cap_below_its_running_jobs_is_refused() -> None:
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 1)
    journal.append([NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 100})])
    for job in ("j1", "j2"):
        scheduler.submit(job, "a", 10, 1)
        assert scheduler.start_next() is not None
    head = journal.head()
    with pytest.raises(InvalidTransition, match="runs 2 jobs, more than the cap of 1"):
        scheduler.open_account("a", max_running=1)
    assert journal.head() == head
    scheduler.open_account("a", max_running=2)
    assert scheduler.accounts["a"].running == 2


def test_opening_an_account_in_the_past_may_not_undo_a_recorded_start() -> None:
    """A cap placed before two recorded starts would make the second an anomaly: the job
    a worker was handed would be pending again, and start_next would hand it out twice.
    open_account refuses it, as any decision in the past that would invalidate what is
    recorded, and appends nothing."""
    from projections import GPUCreditTracker

    journal = MemoryJournal()
    GPUCreditTracker(journal, account="a").grant(100, 0, 1000)  # opens "a", no cap
    scheduler = Scheduler(journal, clock=lambda: 0)
    scheduler.submit("j1", "a", 10, 1, at=1)
    scheduler.submit("j2", "a", 10, 1, at=1)
    assert [scheduler.start_next(at=t).id for t in (5, 6)] == ["j1", "j2"]  # type: ignore[union-attr]
    scheduler.complete("j1", True, at=7)
    head = journal.head()
    with pytest.raises(InvalidTransition, match="would invalidate the start"):
        scheduler.open_account("a", 0, max_running=1, at=2)
    assert journal.head() == head and scheduler.accounts["a"].running == 1
    scheduler.open_account("a", 0, max_running=2, at=2)  # a cap both starts keep to
    assert scheduler.start_next(at=8) is None


@pytest.mark.parametrize("completed", [True, False])
def test_a_submit_in_the_past_may_not_undo_a_job_that_started(completed: bool) -> None:
    """It would take the credits a started job reserved: the started job would become a
    rejected one, its start an anomaly (and its charge, once completed, gone). Refused,
    appending nothing; a submit that fits beside it is accepted."""
    scheduler = Scheduler(clock=lambda: 100)
    scheduler.open_account("a", 20, at=0)
    assert scheduler.submit("j1", "a", 15, 1)
    assert scheduler.start_next().id == "j1"  # type: ignore[union-attr]
    if completed:
        scheduler.complete("j1", True)
    journal = scheduler.journal
    head, before = journal.head(), scheduler.accounts["a"]
    with pytest.raises(InvalidTransition, match="would invalidate the start"):
        scheduler.submit("j0", "a", 10, 1, at=50)
    assert journal.head() == head and scheduler.accounts["a"] == before
    assert scheduler.submit("j2", "a", 5, 1, at=50)
