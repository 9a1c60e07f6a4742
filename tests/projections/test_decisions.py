"""A decision is a value: the job functions return the events recorded and the fold's
outcome of each, the facade answers from it, and a retry returns the original one."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import IdempotencyConflict
from projections import GPUCreditTracker, jobs
from projections.corrections import Corrections
from projections.events import JobStarted, JobSubmitted
from projections.projector import fold
from projections.scheduler import Scheduler
from projections.session import Decision, LedgerSession, decision, session_of


def _scheduler() -> Scheduler:
    scheduler = Scheduler(clock=lambda: 100)
    scheduler.open_account("a", 10, max_running=1)
    return scheduler


def test_a_submit_decision_names_its_event_and_outcome() -> None:
    session = session_of(_scheduler())
    accepted = jobs.submit(session, "j1", "a", 6, 0, clock=lambda: 100, event_id="s1")
    assert accepted.events == (JobSubmitted("a", "j1", 6, 0, "general"),)
    assert (accepted.outcome.ok, accepted.outcome.event_id, accepted.replayed) == (True, "s1",
                                                                                   False)
    refused = jobs.submit(session, "j2", "a", 6, 0, clock=lambda: 100)
    assert not refused.outcome.ok and refused.outcome.reason
    with pytest.raises(dataclasses.FrozenInstanceError):
        accepted.replayed = True  # type: ignore[misc]


def test_a_live_decision_among_negative_times_is_placed_at_the_latest_one() -> None:
    """Event times may be negative: a worker whose clock lags is still placed at the
    latest event time applied (-100), not at its own -200, nor at any floor above it."""
    from eventstore import MemoryJournal

    journal = MemoryJournal()
    Scheduler(journal, clock=lambda: -100).open_account("a", 10)
    assert Scheduler(journal, clock=lambda: -200).submit("j1", "a", 10, 0)
    assert [e.time for e in journal.read(order="position")][-1] == -100


def test_a_retry_returns_the_original_decision_and_appends_nothing() -> None:
    session = session_of(_scheduler())
    first = jobs.submit(session, "j1", "a", 6, 0, clock=lambda: 100, event_id="s1")
    head = session.journal.head()
    again = jobs.submit(session, "j1", "a", 6, 0, clock=lambda: 999, event_id="s1")
    assert again.replayed and again.outcomes == first.outcomes
    assert again.events == first.events
    assert session.journal.head() == head


def test_a_retry_of_a_decision_made_here_answers_without_rebuilding_its_state(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scheduler = _scheduler()
    session = session_of(scheduler)
    first = [jobs.submit(session, "j1", "a", 6, 0, clock=lambda: 100, event_id="s1"),
             jobs.start_next(session, clock=lambda: 101, event_id="go"),
             jobs.complete(session, "j1", False, refund_fraction=0.5, clock=lambda: 102,
                           event_id="end")]
    # A late usage report before all three revises nothing they decided, but moves them
    # on the timeline: the retries answer with their outcomes as they stand now.
    GPUCreditTracker(session.journal, account="a").consume(1, 50, event_id="late")
    head = session.journal.head()

    def rebuilt(*_args: object) -> None:
        raise AssertionError("a retry of a remembered decision rebuilt its state")

    monkeypatch.setattr(LedgerSession, "_state_before", rebuilt)
    again = [jobs.submit(session, "j1", "a", 6, 0, clock=lambda: 999, event_id="s1"),
             jobs.start_next(session, clock=lambda: 999, event_id="go"),
             jobs.complete(session, "j1", False, refund_fraction=0.5, clock=lambda: 999,
                           event_id="end")]
    assert [d.events for d in again] == [d.events for d in first]
    assert all(d.replayed for d in again) and session.journal.head() == head
    monkeypatch.undo()
    # The same outcomes as a fresh fold of the journal.
    folded = {rec.id: outcome
              for rec, outcome, _ in fold(session.journal.read(order="canonical"))}
    assert [d.outcomes for d in again] == [(folded[i],) for i in ("s1", "go", "end")]
    # Another command under a used id is still refused, remembered or not.
    with pytest.raises(IdempotencyConflict):
        jobs.submit(session, "j1", "a", 7, 0, clock=lambda: 100, event_id="s1")
    with pytest.raises(IdempotencyConflict):
        jobs.complete(session, "j1", True, clock=lambda: 102, event_id="end")
    assert session.journal.head() == head


def test_start_next_with_nothing_to_start_records_nothing() -> None:
    scheduler = _scheduler()
    session = session_of(scheduler)
    nothing = jobs.start_next(session, clock=lambda: 100)
    assert nothing == Decision((), ())
    assert jobs.started_job(session, nothing) is None
    with pytest.raises(LookupError):
        _ = nothing.outcome
    scheduler.submit("j1", "a", 6, 0)
    started = jobs.start_next(session, clock=lambda: 100)
    assert started.events == (JobStarted("j1"),)
    job = jobs.started_job(session, started)
    assert job is not None and (job.id, job.account_id, job.cost) == ("j1", "a", 6)


def test_a_used_id_on_a_call_that_would_record_nothing_is_a_conflict() -> None:
    # A start under an id that names a recorded start, at a time when nothing could
    # start: decided as the recorded one was, it records nothing, so it is not a retry of
    # it. Answering "nothing started" would give one id two answers.
    for remembered in (True, False):
        scheduler = _scheduler()
        scheduler.submit("j1", "a", 6, 0, at=110)
        job = scheduler.start_next(at=120, event_id="go")
        assert job is not None and job.id == "j1"
        # A session that did not decide it rebuilds it from the journal instead.
        session = session_of(scheduler if remembered else Scheduler(
            session_of(scheduler).journal, clock=lambda: 100))
        head = session.journal.head()
        with pytest.raises(IdempotencyConflict, match=r"'go' is already recorded at position 4"
                           r".*records nothing"):
            jobs.start_next(session, at=105, clock=lambda: 100, event_id="go")
        assert session.journal.head() == head
        # The same call again is its retry: the same job, nothing appended.
        again = jobs.start_next(session, at=120, clock=lambda: 100, event_id="go")
        assert again.replayed and again.events == (JobStarted("j1"),)
        assert session.journal.head() == head


def test_a_used_id_on_a_call_that_fails_where_its_event_was_decided_is_a_conflict() -> None:
    # A cancel under the id of the account's opening: decided as that event was, the job
    # did not exist yet. That is not "unknown job" (the job exists now): the id names
    # another event, so the call is not its retry.
    for remembered in (True, False):
        scheduler = _scheduler()
        scheduler.submit("j1", "a", 6, 0, at=110)
        session = session_of(scheduler if remembered else Scheduler(
            session_of(scheduler).journal, clock=lambda: 100))
        opened = next(iter(session.journal.read(order="position")))
        head = session.journal.head()
        with pytest.raises(IdempotencyConflict, match=f"'{opened.id}' is already recorded "
                           "at position 1.*fails \\(unknown job 'j1'"):
            jobs.cancel(session, "j1", at=120, clock=lambda: 100, event_id=opened.id)
        assert session.journal.head() == head
        assert jobs.cancel(session, "j1", at=120, clock=lambda: 100).events


def test_the_facade_and_the_functions_decide_alike() -> None:
    by_facade, by_function = _scheduler(), _scheduler()
    session = session_of(by_function)
    assert by_facade.submit("j1", "a", 6, 0) is True
    assert jobs.submit(session, "j1", "a", 6, 0, clock=lambda: 100).outcome.ok is True
    by_facade.start_next()
    jobs.start_next(session, clock=lambda: 100)
    by_facade.complete("j1", False, refund_fraction=0.5)
    done = jobs.complete(session, "j1", False, refund_fraction=0.5, clock=lambda: 100)
    assert done.outcome.charge == 3
    assert by_facade.accounts["a"] == by_function.accounts["a"]
    assert by_facade.job_state("j1") == by_function.job_state("j1") == "failed"


def test_decision_options_belong_to_the_thread_that_set_them() -> None:
    scheduler = _scheduler()
    scheduler.open_account("b", 10)
    journal = session_of(scheduler).journal
    with decision(scheduler, event_id="mine"):
        # Another thread's decision meanwhile takes a fresh id, not this block's.
        thread = threading.Thread(target=lambda: scheduler.submit("other", "b", 1, 0))
        thread.start()
        thread.join()
        scheduler.submit("j1", "a", 1, 0)
    mine = journal.get("mine")
    assert mine is not None and mine.payload["job"] == "j1"
    # One call only: the next one takes a fresh id.
    with decision(scheduler, event_id="once"):
        scheduler.submit("j2", "a", 1, 0)
        scheduler.submit("j3", "a", 1, 0)
    once = journal.get("once")
    assert once is not None and once.payload["job"] == "j2"


def test_a_retry_is_told_what_the_first_call_was_told_after_a_late_grant() -> None:
    """A late grant revises a consume's debt and makes a refused job affordable: the
    fold says so, and a retry of either call, in the same facades or in new ones on the
    journal (a restart), still returns what its first call returned."""
    scheduler = Scheduler(clock=lambda: 0)
    scheduler.open_account("a", 10)
    journal = session_of(scheduler).journal
    tracker = GPUCreditTracker(journal, account="a")
    with decision(tracker, event_id="use"):
        assert tracker.consume(15, 50) == 5
    with decision(scheduler, event_id="job"):
        assert scheduler.submit("big", "a", 8, 0, at=60) is False
    tracker.grant(100, 1, 1000)  # late: before both on the timeline
    assert tracker.get_balance(60) == 95 and scheduler.accounts["a"].reserved == 8
    assert {r.event_id for r in tracker.revisions} == {"use", "job"}
    for facades in [(tracker, scheduler),
                    (GPUCreditTracker(journal, account="a"), Scheduler(journal))]:
        again, rescheduled = facades
        with decision(again, event_id="use"):
            assert again.consume(15, 50) == 5
        with decision(rescheduled, event_id="job"):
            assert rescheduled.submit("big", "a", 8, 0, at=60) is False
        assert rescheduled.accounts["a"].reserved == 8  # the fold as it stands
    assert journal.head() == 5  # the account (two events), the two calls, the grant


def test_a_retry_with_nothing_revised_since_is_told_the_outcome_as_it_stands() -> None:
    """Events recorded after a decision that land after it on the timeline, in its
    account or others, change nothing it was told: its retry needs no refold."""
    scheduler = Scheduler(clock=lambda: 0)
    scheduler.open_account("a", 10)
    scheduler.open_account("b", 10)
    tracker = GPUCreditTracker(session_of(scheduler).journal, account="a")
    with decision(tracker, event_id="use"):
        assert tracker.consume(15, 50) == 5
    tracker.grant(3, 70, 1000)  # after it: pays 3 of the debt from time 70 on
    GPUCreditTracker(session_of(scheduler).journal, account="b").grant(100, 1, 1000)
    with decision(tracker, event_id="use"):
        assert tracker.consume(15, 50) == 5
    assert tracker.get_balance(80) == -2


_CALLS = st.lists(st.tuples(st.sampled_from(["grant", "consume", "reverse"]),
                            st.integers(1, 30), st.integers(0, 40)), min_size=1, max_size=25)


@settings(max_examples=30, deadline=None)
@given(_CALLS)
def test_every_retry_is_told_what_its_first_call_was_told(calls: list[tuple[str, int, int]]
                                                          ) -> None:
    """Consumes and grants in any order of time (so many are late), and reversals of
    earlier grants: retried at the end, in the same tracker and in a new one on the
    journal, every consume returns the debt its first call returned, and nothing more is
    recorded."""
    from projections.corrections import Corrections

    tracker = GPUCreditTracker(account="a")
    journal = tracker.journal
    told: dict[str, tuple[int, int, int]] = {}
    grants: list[str] = []
    for i, (kind, amount, time) in enumerate(calls):
        if kind == "grant":
            with decision(tracker, event_id=f"g{i}"):
                tracker.grant(amount, time, time + 20)
            grants.append(f"g{i}")
        elif kind == "consume":
            with decision(tracker, event_id=f"c{i}"):
                told[f"c{i}"] = (amount, time, tracker.consume(amount, time))
        elif grants:
            Corrections(session_of(tracker), lambda: 0).reverse(
                grants.pop(0), reason="entered twice", event_id=f"r{i}")
    head = journal.head()
    for retrying in (tracker, GPUCreditTracker(journal, account="a")):
        for event_id, (amount, time, debt) in told.items():
            with decision(retrying, event_id=event_id):
                assert retrying.consume(amount, time) == debt, event_id
    assert journal.head() == head


_JOB_CALLS = st.lists(st.tuples(st.sampled_from(["submit", "start", "complete", "cancel",
                                                 "reverse"]),
                                st.integers(0, 5), st.integers(0, 40), st.booleans()),
                      min_size=1, max_size=30)


@settings(max_examples=40, deadline=None)
@given(_JOB_CALLS)
def test_every_job_decision_retried_elsewhere_answers_as_first_told(
        calls: list[tuple[str, int, int, bool]]) -> None:
    """Job decisions at times in any order (many placed in the past), each under its own
    id, and reversals of submits: retried in the same scheduler and in a new one on the
    journal (another replica, or this one after a restart, which must rebuild each from
    the journal), each gives back what its first call gave, and nothing more is
    recorded."""
    scheduler = Scheduler(clock=lambda: 0)
    scheduler.open_account("a", 30, max_running=2)
    journal = session_of(scheduler).journal
    told: list[tuple[str, tuple[str, int, int, bool], object]] = []
    submits: dict[str, str] = {}  # job -> the id its submit was recorded under
    for i, call in enumerate(calls):
        kind = call[0]
        if kind == "reverse":
            # A submit taken out later: its decisions' retries still answer as told.
            target = submits.pop(f"j{call[1]}", None)
            if target is not None:
                Corrections(journal, clock=lambda: 0).reverse(target, "entered twice")
            continue
        before = journal.head()
        try:
            with decision(scheduler, event_id=f"d{i}"):
                answer = _job_call(scheduler, call)
        except (ValueError, KeyError):
            continue  # refused: nothing recorded under the id
        if journal.head() == before:
            # Nothing started, or a cancel of a cancelled job (a no-op): nothing recorded
            # under the id either, so a retry is a new call (after the submit's reversal,
            # of an unknown job).
            continue
        if kind == "submit":
            submits[f"j{call[1]}"] = f"d{i}"
        told.append((f"d{i}", call, answer))
    head = journal.head()
    for retrying in (scheduler, Scheduler(journal, clock=lambda: 0)):
        for event_id, call, answer in told:
            with decision(retrying, event_id=event_id):
                assert _job_call(retrying, call) == answer, (event_id, call)
    assert journal.head() == head


def _job_call(scheduler: Scheduler, call: tuple[str, int, int, bool]) -> object:
    kind, job, time, flag = call
    if kind == "submit":
        return scheduler.submit(f"j{job}", "a", 4 + job, job % 3, at=time)
    if kind == "start":
        return scheduler.start_next(at=time)
    if kind == "complete":
        scheduler.complete(f"j{job}", flag, refund_fraction=0.5, at=time)
    else:
        scheduler.cancel(f"j{job}", at=time)
    return None


def test_a_start_retried_elsewhere_after_its_submit_was_reversed_names_the_job() -> None:
    """The job has left the timeline since: the retry's answer is the job as it was
    started, not a KeyError."""
    scheduler = Scheduler(clock=lambda: 0)
    scheduler.open_account("a", 30)
    journal = session_of(scheduler).journal
    assert scheduler.submit("j1", "a", 10, 1, at=10, event_id="sub-j1")
    first = scheduler.start_next(at=11, event_id="st-1")
    scheduler.complete("j1", True, at=12, event_id="done-1")
    Corrections(journal, clock=lambda: 0).reverse("sub-j1", "entered twice")
    head = journal.head()
    elsewhere = Scheduler(journal, clock=lambda: 0)
    assert elsewhere.start_next(at=11, event_id="st-1") == first
    elsewhere.complete("j1", True, at=12, event_id="done-1")
    assert journal.head() == head
