"""Decisions placed in the past hold where they land and leave what is recorded valid.

Each decision's answer is what a cold fold of the journal says of its event afterwards,
and no recorded job step turns into an anomaly, except through a usage report (a fact,
taken wherever it falls: docs/semantics.md, "Live decisions are never revised by later
decisions")."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import Journal, MemoryJournal
from projections import GPUCreditTracker, Scheduler
from projections.corrections import Corrections
from projections.errors import InvalidTransition
from projections.outcomes import Outcome
from projections.projector import fold
from projections.replay import fold_canonical
from projections.session import decision


def _outcomes(journal: MemoryJournal) -> dict[int, Outcome]:
    """Every event's outcome on a cold fold of the journal, by position."""
    return {rec.position: outcome
            for rec, outcome, _ in fold(journal.read(order="canonical"))}


def _a_started_job_behind_a_rejected_one() -> tuple[MemoryJournal, Scheduler]:
    """j1 (15) is rejected at 2 with 10 available; j2 (10) is accepted at 3, started at 4."""
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 0)
    scheduler.open_account("a", 10, at=0)
    assert not scheduler.submit("j1", "a", 15, 1, at=2)
    assert scheduler.submit("j2", "a", 10, 1, at=3)
    assert scheduler.start_next(at=4).id == "j2"  # type: ignore[union-attr]
    return journal, scheduler


@pytest.mark.parametrize("how", ["grant", "adjust"])
def test_a_credit_in_the_past_may_not_hand_a_started_jobs_credits_to_another(
        how: str) -> None:
    """Credits at 1 make j1 affordable at 2: it would hold everything, j2 would be
    rejected and the start a worker was handed an anomaly. Refused, nothing appended;
    the same credit at the start's time is taken."""
    journal, scheduler = _a_started_job_behind_a_rejected_one()
    head = journal.head()

    def credit(at: int) -> None:
        if how == "grant":
            Corrections(journal, clock=lambda: 0).grant("a", 5, at=at)
        else:
            Corrections(journal, clock=lambda: 0).adjust("a", 5, "goodwill", at=at)

    with pytest.raises(InvalidTransition, match="would invalidate the start"):
        credit(1)
    assert journal.head() == head
    assert scheduler.job_state("j2") == "running"
    credit(4)
    assert scheduler.job_state("j2") == "running"
    assert not any(o.anomaly for o in _outcomes(journal).values())


def test_a_trackers_late_grant_is_recorded_even_where_it_undoes_a_started_job() -> None:
    """The contract records a tracker's late call wherever it falls: the same credits at 1
    are taken, j1 holds them, j2 is rejected and its start is an anomaly, listed."""
    journal, scheduler = _a_started_job_behind_a_rejected_one()
    head = journal.head()
    GPUCreditTracker(journal, account="a").grant(5, timestamp=1, expiry=100)
    assert journal.head() == head + 1
    assert (scheduler.job_state("j1"), scheduler.job_state("j2")) == ("pending", "rejected")
    assert sum(o.anomaly for o in _outcomes(journal).values()) == 1


def test_a_credit_in_the_past_may_re_decide_a_job_still_pending() -> None:
    """Nothing started after it: the rejected submit becomes accepted and the accepted
    one rejected, as a late grant may do, with both revisions listed."""
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 0)
    scheduler.open_account("a", 10, at=0)
    assert not scheduler.submit("j1", "a", 15, 1, at=2)
    assert scheduler.submit("j2", "a", 10, 1, at=3)
    GPUCreditTracker(journal, account="a").grant(5, timestamp=1, expiry=100)
    assert (scheduler.job_state("j1"), scheduler.job_state("j2")) == ("pending", "rejected")
    assert [r.type for r in scheduler.revisions] == ["submit", "submit"]


_ACCOUNTS = ("a", "b")
_CALL = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(_ACCOUNTS), st.integers(0, 12),
              st.integers(0, 2), st.integers(1, 20)),
    st.tuples(st.just("start"), st.just(""), st.just(0), st.just(0), st.integers(1, 20)),
    st.tuples(st.just("complete"), st.just(""), st.integers(1, 12), st.integers(0, 2),
              st.integers(1, 20)),
    st.tuples(st.just("cancel"), st.just(""), st.integers(1, 12), st.just(0),
              st.integers(1, 20)),
    st.tuples(st.just("grant"), st.sampled_from(_ACCOUNTS), st.integers(1, 10),
              st.integers(1, 30), st.integers(1, 20)),
    st.tuples(st.just("consume"), st.sampled_from(_ACCOUNTS), st.integers(1, 10),
              st.just(0), st.integers(1, 20)),
    st.tuples(st.just("adjust"), st.sampled_from(_ACCOUNTS), st.integers(-10, 10).filter(bool),
              st.just(0), st.integers(1, 20)),
    st.tuples(st.just("void"), st.just(""), st.integers(0, 30), st.just(0),
              st.integers(1, 20)),
)
_CORRECTIONS = frozenset({"grant", "adjust", "void"})


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 20), st.sampled_from([None, 1, 2]), st.lists(_CALL, min_size=5, max_size=30))
def test_every_decision_in_the_past_is_what_the_fold_says_and_invalidates_nothing(
        balance: int, cap: int | None, calls: list[tuple[str, str, int, int, int]]) -> None:
    """Calls at times in any order through the facades: each answer is the outcome a
    cold fold of the journal gives its event; no recorded start, completion or cancel
    (or the acceptance of a job that started) turns into an anomaly but through a usage
    report; a retry under the same id answers the same and appends nothing; and the
    live projection is the cold fold's."""
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 0)
    scheduler.open_account("a", balance, max_running=cap, at=0)
    scheduler.open_account("b", 20 - balance, max_running=1, at=0)
    trackers = {name: GPUCreditTracker(journal, account=name) for name in _ACCOUNTS}
    corrections = Corrections(journal, clock=lambda: 0)
    submitted = 0
    grants: list[str] = []

    def call(kind: str, account: str, n: int, m: int, at: int) -> object:
        if kind == "submit":
            return scheduler.submit(f"j{submitted}", account, n, m, at=at)
        if kind == "start":
            return scheduler.start_next(at=at)
        if kind == "complete":
            return scheduler.complete(f"j{n}", m > 0, refund_fraction=0.5, at=at)
        if kind == "cancel":
            return scheduler.cancel(f"j{n}", at=at)
        if kind == "grant":  # a finance correction: a tracker's late grant is never refused
            return corrections.grant(account, n, expiry=at + m, at=at).debt_after
        if kind == "adjust":
            return corrections.adjust(account, n, "fix", at=at).debt_after
        if kind == "void":
            return corrections.void(grants[n % len(grants)], at=at).ok
        return trackers[account].consume(n, timestamp=at)

    for i, (kind, account, n, m, at) in enumerate(calls):
        submitted += kind == "submit"
        if kind == "void" and not grants:
            continue
        facade = scheduler if kind in ("submit", "start", "complete", "cancel") \
            else corrections if kind in _CORRECTIONS else trackers[account]
        before, head = _outcomes(journal), journal.head()
        try:
            with decision(facade, event_id=f"d{i}"):
                answer = call(kind, account, n, m, at)
        except (ValueError, KeyError):
            assert journal.head() == head
            continue
        after = _outcomes(journal)
        if journal.head() > head:
            mine = after[head + 1]
            assert not mine.anomaly, mine
            if kind == "submit":
                assert answer == mine.ok
            elif kind in ("consume", "adjust"):
                assert answer == mine.debt_after
            elif kind == "start":
                assert answer is not None
            with decision(facade, event_id=f"d{i}"):
                assert call(kind, account, n, m, at) == answer
            assert journal.head() == head + 1
            if kind == "grant":
                grants.append(f"d{i}")
        if kind != "consume":
            turned = [after[p] for p, o in before.items() if after[p].anomaly and not o.anomaly]
            assert not turned, (kind, at, turned)
    cold = fold_canonical(journal)
    assert scheduler.ledger().digest() == cold.digest()


def test_a_credit_decided_now_is_not_tried_at_the_time_it_was_asked_for() -> None:
    """`decision(..., live=True)` records it at the latest event time, where it takes
    nothing from the started job: it is taken there, not refused for the time given."""
    journal, scheduler = _a_started_job_behind_a_rejected_one()
    tracker = GPUCreditTracker(journal, account="a")
    with decision(tracker, live=True):
        tracker.grant(5, timestamp=1, expiry=100)
    assert [rec.time for rec in journal.read(order="position")][-1] == 4
    assert scheduler.job_state("j2") == "running"


def test_a_job_decision_decided_now_is_decided_at_the_time_it_is_recorded() -> None:
    """`at` earlier than the latest event, decided now: the start is recorded at 5, so it
    picks among the jobs pending at 5 (j1 was cancelled there), not at 2."""
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 0)
    scheduler.open_account("a", 10, at=0)
    assert scheduler.submit("j1", "a", 5, 5, at=1)
    assert scheduler.submit("j2", "a", 5, 1, at=1)
    scheduler.cancel("j1", at=5)
    with decision(scheduler, live=True):
        assert scheduler.start_next(at=2).id == "j2"  # type: ignore[union-attr]
    assert [rec.time for rec in journal.read(order="position")][-1] == 5
    assert not any(o.anomaly for o in _outcomes(journal).values())


def test_a_grant_decided_now_must_expire_after_the_time_it_is_recorded_at() -> None:
    """Decided now, the grant asked for at 1 is recorded at 10: an expiry of 5 would make
    an event no file may hold (its export would not import back). Refused, nothing
    appended; an expiry after 10 is taken."""
    tracker = GPUCreditTracker(account="a")
    tracker.grant(5, 10, 100)
    with pytest.raises(ValueError, match="grant expiry 5 must be after its live time 10"), \
            decision(tracker, live=True):
        tracker.grant(5, timestamp=1, expiry=5)
    assert tracker.journal.head() == 1
    with decision(tracker, live=True):
        tracker.grant(5, timestamp=1, expiry=11)
    assert [(rec.time, rec.payload["expiry"]) for rec in tracker.journal.read()][-1] == (10, 11)


def test_a_live_grant_is_not_moved_past_its_own_expiry(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A live decision moves up to a later time another account's decision committed
    meanwhile (on PostgreSQL, where accounts lock apart), as a courtesy that spares a
    re-projection. A grant whose expiry that time would pass stays at its own time: a
    grant expiring before its time is an event no file may hold."""
    journal = Journal(f"sqlite:///{tmp_path / 'ledger.db'}")
    corrections = Corrections(journal, clock=lambda: 10)
    corrections.grant("a", 5)
    monkeypatch.setattr(journal, "max_time", lambda streams=None: 50)
    corrections.grant("a", 5, expiry=20)
    corrections.grant("a", 5, expiry=60)
    assert [(rec.time, rec.payload.get("expiry")) for rec in journal.read()] == [
        (10, None), (10, 20), (50, 60)]
