"""Reversals: a reversed event leaves every fold, as if it had never been recorded.

The central property: for a generated journal, reversing the event at any position gives
the same state (digest, balances) as the journal without that event, whether the state is
replayed, folded straight, or kept live by a session that ingests the reversal.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import GPUCreditTracker
from projections.replay import fold_canonical, replay
from projections.reversals import reversed_ids
from projections.session import LedgerSession
from tests.projections.draws import add_event, other_event

Raw = tuple[str, str, int, dict[str, Any]]  # (id, type, time, payload)

ACCOUNTS = ["a", "b"]


@st.composite
def journals(draw: st.DrawFn) -> list[Raw]:
    """Grants (with priorities, expiries, pools), usage, adjustments, voids and jobs."""
    events: list[Raw] = []
    grants: list[str] = []
    jobs: list[tuple[str, str]] = []
    for n in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["grant", "grant", "consume", "adjust", "void", "submit",
                                     "start", "complete"]))
        time = draw(st.integers(0, 20))
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from([None, "h100"]))
        payload: dict[str, Any]
        if kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 40))}
            expiry = draw(st.sampled_from([None, 10, 25]))
            if expiry is not None:
                payload["expiry"] = max(expiry, time + 1)
            priority = draw(st.sampled_from([None, 10, 90]))
            if priority is not None:
                payload["priority"] = priority
            grants.append(f"e{n}")
        else:
            drawn = other_event(draw, kind, n, account, grants, jobs)
            if drawn is None:
                continue
            payload, account = drawn
        add_event(events, n, kind, time, payload, pool)
    return events


def stream_of(raw: Raw, events: list[Raw]) -> str:
    _, kind, _, payload = raw
    if "account" in payload:
        return str(payload["account"])
    if kind == "void":
        grant = [p for i, _, _, p in events if i == payload["grant"]]
        return str(grant[0]["account"]) if grant else "a"
    for _, k, _, p in events:
        if k == "submit" and p["job"] == payload.get("job"):
            return str(p["account"])
    return "a"


def journal_of(events: list[Raw]) -> MemoryJournal:
    journal = MemoryJournal()
    journal.append([NewEvent(raw[0], stream_of(raw, events), raw[1], raw[2], raw[3])
                    for raw in events])
    return journal


def reversal(target: str, time: int, event_id: str = "r1") -> NewEvent:
    return NewEvent(event_id, "a", "reverse", time, {"event": target, "reason": "wrong"})


def balances(ledger: Any) -> dict[str, int]:
    return {name: a.balance for name, a in sorted(ledger.accounts.items()) if a.opened}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=journals().filter(bool), when=st.integers(0, 25))
def test_reversing_any_event_equals_the_journal_without_it(events: list[Raw],
                                                           when: int) -> None:
    for target in events:
        rest = [e for e in events if e is not target]
        expected = fold_canonical(journal_of(rest))
        journal = journal_of(events)
        session = LedgerSession(journal)  # live: ingests the reversal as it is appended
        journal.append([reversal(target[0], when)])
        session.catch_up()
        for got in (session.ledger, replay(journal).ledger, fold_canonical(journal)):
            assert got.digest() == expected.digest(), f"reversing {target}"
            assert balances(got) == balances(expected)


def test_a_reversal_of_a_reversal_restores_the_event() -> None:
    journal = journal_of([("g1", "grant", 0, {"account": "a", "amount": 100}),
                          ("u1", "consume", 1, {"account": "a", "amount": 1_000_000})])
    tracker = GPUCreditTracker(journal, "a")
    journal.append([reversal("u1", 2, "r1")])
    assert tracker.get_balance(5) == 100
    journal.append([reversal("r1", 3, "r2")])
    assert tracker.get_balance(5) == -999_900
    journal.append([reversal("r2", 4, "r3")])
    assert tracker.get_balance(5) == 100
    assert reversed_ids({"r1": "u1", "r2": "r1", "r3": "r2"}) == {"u1", "r2"}


@pytest.mark.parametrize("ring", [
    {"r1": "r2", "r2": "r1"},
    {"r2": "r1", "r1": "r2"},
    {"r1": "r1"},
    {"r1": "r2", "r2": "r3", "r3": "r1"},
    {"r3": "r1", "r1": "r2", "r2": "r3"},
])
def test_reversals_naming_each_other_in_a_ring_all_count_as_in(ring: dict[str, str]) -> None:
    """Only a hand-made journal holds a ring (an import refuses one): it is a
    contradiction, and nothing on it is dropped, whatever order the reversals are known in."""
    assert reversed_ids(ring) == frozenset()
    # What a ring member names is the ring's; a reversal outside it still counts.
    assert reversed_ids({**ring, "x1": "u1"}) == {"u1"}
    assert reversed_ids({"x1": "r1", **ring}) == {"r1"}


def test_answers_as_known_before_the_reversal_still_show_the_event() -> None:
    journal = journal_of([("g1", "grant", 0, {"account": "a", "amount": 100}),
                          ("u1", "consume", 1, {"account": "a", "amount": 30})])
    tracker = GPUCreditTracker(journal, "a")
    assert tracker.get_balance(5) == 70
    journal.append([reversal("u1", 1)])  # at the reversed event's time, as facades do
    assert tracker.get_balance(5) == 100
    assert tracker.get_balance(5, as_known_at=2) == 70
    assert tracker.get_balance(5, as_known_at=3) == 100
    assert tracker.get_balance(5, as_known_at=0) == 0
    # Past the head is a wrong journal or a typo, as on the command line: not the head.
    with pytest.raises(ValueError, match="as_known_at 4 is past the journal's head 3"):
        tracker.get_balance(5, as_known_at=4)


def test_as_known_at_a_position_the_events_at_the_asked_time_count() -> None:
    """`get_balance(t, as_known_at=p)` answers from the events with event time <= t."""
    journal = journal_of([("g1", "grant", 0, {"account": "a", "amount": 100}),
                          ("u1", "consume", 1, {"account": "a", "amount": 30})])
    tracker = GPUCreditTracker(journal, "a")
    assert tracker.get_balance(1, as_known_at=2) == tracker.get_balance(1) == 70
    assert tracker.get_balance(0, as_known_at=2) == 100


@pytest.mark.parametrize("position", [-1, True, 1.0])
def test_as_known_at_is_a_position_from_0(position: Any) -> None:
    journal = journal_of([("g1", "grant", 0, {"account": "a", "amount": 100})])
    with pytest.raises(ValueError, match="as_known_at"):
        GPUCreditTracker(journal, "a").get_balance(5, as_known_at=position)


def test_a_reversal_is_listed_in_the_revisions() -> None:
    journal = journal_of([("u1", "consume", 1, {"account": "a", "amount": 30}),
                          ("u2", "consume", 2, {"account": "a", "amount": 5})])
    tracker = GPUCreditTracker(journal, "a")
    tracker.get_balance(2)
    journal.append([reversal("u1", 3)])
    (revision,) = [r for r in tracker.revisions if r.event_id == "u2"]
    assert revision.late_event_id == "r1"
    assert (revision.before["debt_after"], revision.after["debt_after"]) == (35, 5)


def test_a_reversed_millisecond_timestamp_stops_ruining_the_balance() -> None:
    journal = journal_of([("g1", "grant", 0, {"account": "a", "amount": 100, "expiry": 100}),
                          ("u-991", "consume", 1796083200000, {"account": "a", "amount": 1})])
    tracker = GPUCreditTracker(journal, "a")
    journal.append([reversal("u-991", 7)])
    assert tracker.get_balance(50) == 100
    assert fold_canonical(journal).last[0] < 1796083200000


def test_a_reversal_after_a_checkpoint_is_not_missed_by_queries(tmp_path: Any) -> None:
    from eventstore import Journal
    from projections.replay import ledger_at

    journal = Journal(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        journal.append([NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 100}),
                        NewEvent("u1", "a", "consume", 1, {"account": "a", "amount": 30})])
        replay(journal, checkpoint=True)
        journal.append([reversal("u1", 2)])
        expected = fold_canonical(journal)
        assert ledger_at(journal).digest() == expected.digest()
        assert expected.accounts["a"].balance == 100
    finally:
        journal.close()


@pytest.mark.parametrize("reversal_time", [200, 250, 350])
def test_a_checkpoint_holding_an_event_reversed_since_is_not_folded_from(
        tmp_path: Any, reversal_time: int) -> None:
    # A checkpoint saved between a grant and its reversal is the state as known then; a
    # session folding a past time from it would count the grant (a reversal at or after
    # the checkpoint's time passes every time check), and decide on it.
    from eventstore import Journal
    from projections import Scheduler

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Journal(url) as journal:
        journal.append([NewEvent("open", "c", "account", 0, {"account": "c"})])
        journal.append([NewEvent("g5", "c", "grant", 200, {"account": "c", "amount": 5})])
        journal.append([reversal("g5", reversal_time)])
        journal.append([NewEvent("g1", "c", "grant", 300, {"account": "c", "amount": 1,
                                                            "expiry": 400})])
        replay(journal, checkpoint=True, checkpoint_every=1)
        assert any(s.position == 2 for s in journal.snapshots("ledger"))
    assert GPUCreditTracker(url, account="c").get_balance(250) == 0
    scheduler = Scheduler(url, clock=lambda: 300)
    assert scheduler.submit("j1", "c", 5, 1, at=250) is False
    with Journal(url) as journal:
        assert scheduler.state_digest() == fold_canonical(journal).digest()


def _chart(journal: MemoryJournal, account: str) -> list[tuple[Any, ...]]:
    from projections.timeline import account_timeline

    return [(p.time, p.pools, p.held, p.debt)
            for p in account_timeline(journal.read(order="canonical"), account, until=30)]


def _charged(journal: MemoryJournal) -> tuple[dict[str, Any], dict[str, Any]]:
    from projections.queries.reconcile import ledger_charges

    jobs, events, _ = ledger_charges(journal, journal.head())
    return ({k: (c.account, c.amount, c.time) for k, c in jobs.items()},
            {k: (c.account, c.amount, c.time) for k, c in events.items()})


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=journals().filter(bool), when=st.integers(0, 25))
def test_charts_and_reconciled_charges_leave_a_reversed_event_out(events: list[Raw],
                                                                  when: int) -> None:
    for target in events:
        without = journal_of([e for e in events if e is not target])
        journal = journal_of(events)
        journal.append([reversal(target[0], when)])
        for account in ACCOUNTS:
            assert _chart(journal, account) == _chart(without, account), f"reversing {target}"
        assert _charged(journal) == _charged(without), f"reversing {target}"


def test_a_reversed_submit_keeps_its_job_id_taken() -> None:
    """Job ids are unique for the journal's lifetime: a reversal of the reversal brings a
    reversed submit back, and a second job under its id would then be billed as the
    first. The scheduler refuses the id (a DuplicateJob naming the reversed submit) and
    appends nothing; a new id is accepted."""
    from projections import Scheduler
    from projections.corrections import Corrections
    from projections.errors import DuplicateJob

    journal = MemoryJournal()
    GPUCreditTracker(journal, account="a").grant(100, 0, 1000)
    scheduler = Scheduler(journal, clock=lambda: 0)
    assert scheduler.submit("j0", "a", 30, 1, at=1, event_id="sub-1")
    Corrections(journal, clock=lambda: 0).reverse("sub-1", "entered twice")
    head = journal.head()
    for deciding in (scheduler, Scheduler(journal, clock=lambda: 0)):
        with pytest.raises(DuplicateJob, match="'sub-1', which a reversal took out"):
            deciding.submit("j0", "a", 50, 1, at=2)
    assert journal.head() == head
    assert scheduler.submit("j0b", "a", 50, 1, at=2)


def _two_accounts_used() -> MemoryJournal:
    """a and b granted 100 at 0; a uses 10 at 5 and 95 at 60, b 10 at 50."""
    return journal_of([("g-a", "grant", 0, {"account": "a", "amount": 100}),
                       ("u-a", "consume", 5, {"account": "a", "amount": 10}),
                       ("g-b", "grant", 0, {"account": "b", "amount": 100}),
                       ("u-b", "consume", 50, {"account": "b", "amount": 10}),
                       ("late", "consume", 60, {"account": "a", "amount": 95})])


def test_revisions_name_the_reversal_of_a_batch_that_reaches_furthest_back() -> None:
    """Two reversals appended together: the revisions they cause name the one whose event
    lies earliest on the timeline (the batch reaches across accounts, so one cause serves
    every revision), not whichever came first in the batch."""
    journal = _two_accounts_used()
    journal.append([
        NewEvent("rev-b", "b", "reverse", 50, {"event": "u-b", "reason": "duplicate"}),
        NewEvent("rev-a", "a", "reverse", 5, {"event": "u-a", "reason": "wrong account"}),
    ])
    revised = {r.event_id: r.late_event_id for r in replay(journal).revisions}
    assert revised == {"u-a": "rev-a", "u-b": "rev-a", "late": "rev-a"}
    # A reversal of a reversal reaches where the event it puts back lies.
    journal.append([
        NewEvent("unrev-b", "b", "reverse", 70, {"event": "rev-b", "reason": "it was right"}),
        NewEvent("unrev-a", "a", "reverse", 70, {"event": "rev-a", "reason": "it was right"}),
    ])
    causes = {r.late_event_id for r in replay(journal).revisions if r.late_position > 7}
    assert causes == {"unrev-a"}


def test_a_reversal_of_a_late_timed_reversal_reaches_back_to_the_event_it_puts_back() -> None:
    """The reach of a reversal of a reversal is the earliest of its chain: here the event
    put back (at 5), not the reversal it undoes, timed long after it (at 80)."""
    journal = _two_accounts_used()
    journal.append([
        NewEvent("rev-a", "a", "reverse", 80, {"event": "u-a", "reason": "wrong account"}),
        NewEvent("rev-b", "b", "reverse", 50, {"event": "u-b", "reason": "duplicate"})])
    journal.append([
        NewEvent("unrev-b", "b", "reverse", 90, {"event": "rev-b", "reason": "it was right"}),
        NewEvent("unrev-a", "a", "reverse", 90, {"event": "rev-a", "reason": "it was right"}),
    ])
    causes = {r.late_event_id for r in replay(journal).revisions if r.late_position > 7}
    assert causes == {"unrev-a"}


@settings(max_examples=30, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events=journals().filter(bool), data=st.data())
@pytest.mark.parametrize("held", [True, False], ids=["rows held", "rows read again"])
def test_replay_to_a_time_leaves_out_events_reversed_by_reversals_timed_after_it(
        held: bool, events: list[Raw], data: st.DataObject,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay(to_time=T)` is the state at T as known: a reversal takes its event out at
    every time, also when it is recorded with a time after T (as `fold_canonical`, and so
    `balance --at T`, take it), and a reversal of it puts the event back."""
    import projections.replay as replaying

    if not held:
        monkeypatch.setattr(replaying, "HELD_ROWS", 0)
    journal = MemoryJournal()
    cut = data.draw(st.integers(0, len(events)))
    ids: list[str] = []
    for part in (events[:cut], events[cut:]):
        if part:
            journal.append([NewEvent(raw[0], stream_of(raw, events), raw[1], raw[2], raw[3])
                            for raw in part])
            ids += [raw[0] for raw in part]
        for n in range(data.draw(st.integers(0, 2)) if ids else 0):
            target = data.draw(st.sampled_from(ids))
            rid = f"r{len(ids)}-{n}"
            journal.append([reversal(target, data.draw(st.integers(0, 40)), rid)])
            ids.append(rid)
    to_time = data.draw(st.integers(0, 30))
    note(repr([(r.position, r.id, r.type, r.time, r.payload) for r in journal.read()]))
    assert replay(journal, to_time=to_time).ledger.digest() == fold_canonical(
        journal, to_time=to_time).digest()


def test_a_reversed_event_that_is_not_a_valid_event_is_no_longer_an_anomaly() -> None:
    """A hand-made journal's grant of -5 is kept as an anomaly; reversed, it takes no part
    in the fold at all, as if it had never been recorded."""
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 10}),
                    NewEvent("bad", "a", "grant", 2, {"account": "a", "amount": -5})])
    assert [a[1] for a in replay(journal).ledger.anomalies] == ["bad"]
    journal.append([NewEvent("r", "a", "reverse", 2, {"event": "bad", "reason": "typo"})])
    report = replay(journal)
    assert report.ledger.anomalies == []
    assert report.ledger.accounts["a"].balance == 10
