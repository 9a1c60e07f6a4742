"""Replay you can prove: arrival-order independence, incremental == full, revisions, as-known-at."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import IdempotencyConflict, MemoryJournal, NewEvent
from projections import GPUCreditTracker, Scheduler
from projections.events import from_payload, to_payload
from projections.ledger import Ledger
from projections.projector import Projector
from projections.replay import fold_canonical, journal_reader, ledger_at, replay, verify
from projections.session import LedgerSession

ACCOUNTS = ("a", "b")
POOLS = (None, "h100")


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(id, type, time, payload) tuples: a random but well-formed mix of every event type."""
    n = draw(st.integers(1, 25))
    times = draw(st.permutations(range(1, n + 1)))
    events: list[tuple[str, str, int, dict[str, Any]]] = []
    jobs: list[str] = []
    for i in range(n):
        kind = draw(st.sampled_from(["account", "grant", "grant", "consume", "submit", "submit",
                                     "start", "complete", "cancel"]))
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        payload: dict[str, Any]
        if kind == "account":
            payload = {"account": account, "max_running": draw(st.sampled_from([None, 1, 2]))}
        elif kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool,
                       "expiry": times[i] + draw(st.integers(1, 15))}
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool}
        elif kind == "submit":
            job = f"j{i}"
            jobs.append(job)
            payload = {"account": account, "job": job, "cost": draw(st.integers(0, 15)),
                       "priority": draw(st.integers(0, 2)), "pool": pool}
        elif not jobs:
            continue
        else:
            payload = {"job": draw(st.sampled_from(jobs))}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
                payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
        event = from_payload(kind, payload)
        events.append((f"e{i}", kind, times[i], to_payload(event)))
    return events


def _stream(payload: dict[str, Any]) -> str:
    return str(payload.get("account") or f"job:{payload['job']}")


def _journal(events: list[tuple[str, str, int, dict[str, Any]]]) -> MemoryJournal:
    journal = MemoryJournal()
    for event_id, kind, time, payload in events:
        journal.append([NewEvent(event_id, _stream(payload), kind, time, payload)])
    return journal


@st.composite
def cut_timelines(draw: st.DrawFn) -> tuple[list[tuple[str, str, int, dict[str, Any]]], int]:
    """A history in timeline order, and a place to cut it (0 to its length)."""
    timeline = sorted(draw(histories()), key=lambda e: e[2])
    return timeline, draw(st.integers(0, len(timeline)), label="cut")


def folded_to_cut(cut_timeline: tuple[list[Any], int]) -> tuple[list[Any], int, Ledger]:
    """A drawn `cut_timelines()` and a new ledger with the timeline up to the cut applied."""
    timeline, cut = cut_timeline
    return timeline, cut, fold_on(Ledger(), timeline[:cut])


def fold_on(ledger: Ledger, timeline: list[Any], start: int = 0) -> Ledger:
    """Apply `timeline[start:]` to `ledger` at positions start + 1, ...; return the ledger."""
    for position, (event_id, kind, time, payload) in enumerate(timeline[start:],
                                                               start=start + 1):
        ledger.apply_recorded(position, event_id, kind, time, payload)
    return ledger


def assert_equals_a_cold_fold(ledger: Ledger, journal: MemoryJournal, position: int) -> None:
    """`ledger`, kept live, is the state a fold of `journal` up to `position` gives, and
    its index of live jobs holds exactly its pending and running jobs."""
    assert ledger.digest() == fold_canonical(journal, to_position=position).digest()
    assert set(ledger.live) == {job_id for job_id, job in ledger.jobs.items()
                                if job.state in ("pending", "running")}
    assert all(ledger.jobs[job_id] is job for job_id, job in ledger.live.items())


@settings(max_examples=40, deadline=None)
@given(histories(), st.randoms(use_true_random=False))
def test_every_arrival_order_gives_the_same_digest(events: list[Any], rnd: random.Random) -> None:
    in_order = replay(_journal(sorted(events, key=lambda e: e[2])))
    shuffled = list(events)
    rnd.shuffle(shuffled)
    assert replay(_journal(shuffled)).digest == in_order.digest


def _reported_outcomes(journal: MemoryJournal, to_position: int) -> dict[int, dict[str, Any]]:
    ledger = Ledger()
    out = {}
    for rec in journal.read(to_position=to_position, order="canonical"):
        out[rec.position] = ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time,
                                                  rec.payload).reported()
    return out


@settings(max_examples=75, deadline=None)
@given(histories(), st.randoms(use_true_random=False), st.integers(1, 4),
       st.sampled_from([1, 3, 50_000]))
def test_incremental_reprojection_equals_full_replay_and_finds_every_revision(
        events: list[Any], rnd: random.Random, snapshot_every: int, remembered: int) -> None:
    rnd.shuffle(events)
    journal = _journal(events)
    # `remembered` small forces the fallback that folds the old timeline again.
    projector = Projector(journal_reader(journal), min_snapshot_every=snapshot_every,
                          max_snapshots=3, recent_outcomes=remembered)
    expected_revisions = []
    for rec in journal.read(order="position"):
        before = _reported_outcomes(journal, rec.position - 1)
        projector.ingest(rec)
        after = _reported_outcomes(journal, rec.position)
        # Brute force: whatever changed for an earlier event is a revision caused by rec.
        for position in sorted(before):
            if before[position] != after[position]:
                expected_revisions.append((rec.position, position, before[position],
                                           after[position]))
        assert_equals_a_cold_fold(projector.ledger, journal, rec.position)
    got = [(r.late_position, r.position, r.before, r.after) for r in projector.revisions]
    # The projector reports in timeline order; compare as sets of (cause, effect).
    assert sorted(got, key=lambda r: r[:2]) == sorted(expected_revisions, key=lambda r: r[:2])


@settings(max_examples=30, deadline=None)
@given(histories(), st.randoms(use_true_random=False), st.data())
def test_as_known_at_equals_a_replay_of_the_truncated_journal(
        events: list[Any], rnd: random.Random, data: st.DataObject) -> None:
    rnd.shuffle(events)
    journal = _journal(events)
    cut = data.draw(st.integers(0, len(events)))
    truncated = _journal(events[:cut])
    assert fold_canonical(journal, to_position=cut).digest() == replay(truncated).digest


def test_a_late_event_refolds_events_at_the_earliest_time_a_journal_holds() -> None:
    # Times reach down to -2**63: a refold from the start must not begin after them.
    first = -(2**63)
    events = [("g", "grant", first + 1, {"account": "a", "amount": 10, "pool": None,
                                         "expiry": None}),
              ("c", "consume", first + 2, {"account": "a", "amount": 4, "pool": None}),
              ("late", "consume", first, {"account": "a", "amount": 3, "pool": None})]
    journal = _journal([(i, kind, time, to_payload(from_payload(kind, payload)))
                        for i, kind, time, payload in events])
    projector = Projector(journal_reader(journal), min_snapshot_every=1, max_snapshots=3)
    for rec in journal.read(order="position"):
        projector.ingest(rec)
        assert_equals_a_cold_fold(projector.ledger, journal, rec.position)
    assert projector.ledger.accounts["a"].balance == 3


def test_late_grant_and_late_consume_revise_exactly_the_affected_events() -> None:
    journal = MemoryJournal()
    s = Scheduler(journal, clock=lambda: 100)
    t = GPUCreditTracker(journal, account="a")
    t.grant(10, timestamp=10, expiry=1000)
    assert t.consume(15, timestamp=20) == 5          # debt 5
    s.open_account("b", 0, at=0)
    tb = GPUCreditTracker(journal, account="b")
    tb.grant(10, timestamp=30, expiry=1000)
    assert s.submit("jb", "b", 8, 1, at=40)           # accepted: 10 available
    # Late grant at 15 to a: the consume at 20 now leaves no debt.
    t.grant(20, timestamp=15, expiry=1000)
    # Late consume at 35 on b: the submit at 40 can no longer be paid.
    tb.consume(5, timestamp=35)
    revisions = s.revisions
    by_event = {(r.late_event_id, r.event_id, r.type): (r.before, r.after) for r in revisions}
    ids = [rec.id for rec in journal.read(order="position")]
    consume_a, submit_b, late_grant, late_consume = ids[1], ids[4], ids[5], ids[6]
    assert set(by_event) >= {
        (late_grant, consume_a, "consume"),
        (late_consume, submit_b, "submit"),
    }
    assert by_event[(late_grant, consume_a, "consume")][0]["debt_after"] == 5
    assert by_event[(late_grant, consume_a, "consume")][1]["debt_after"] == 0
    assert by_event[(late_consume, submit_b, "submit")][0]["ok"] is True
    assert by_event[(late_consume, submit_b, "submit")][1]["ok"] is False
    assert s.job_state("jb") == "rejected"
    # A replay of the same journal reproduces the revisions exactly.
    assert replay(journal).revisions == revisions
    # Only those: nothing else was touched by the late events.
    assert {(r.late_event_id, r.event_id) for r in revisions} <= {
        (late_grant, consume_a), (late_consume, submit_b)}


def test_second_complete_is_refused_by_the_facade_and_an_anomaly_in_the_journal() -> None:
    journal = MemoryJournal()
    s = Scheduler(journal, clock=lambda: 1)
    s.open_account("a", 10)
    s.submit("j", "a", 5, 1)
    s.start_next()
    s.complete("j", True)
    head = journal.head()
    try:
        s.complete("j", True)
    except ValueError as exc:
        assert "succeeded" in str(exc)
    else:
        raise AssertionError("second complete was accepted")
    assert journal.head() == head
    # An import brings the second complete anyway, under a new id: kept, reported, no crash.
    journal.append([NewEvent("dup-complete", "a", "complete", 2,
                             {"job": "j", "success": True})])
    report = replay(journal)
    assert [a[1] for a in report.anomalies] == ["dup-complete"]
    assert s.accounts["a"].balance == 5


def test_replay_of_the_same_journal_is_the_same_on_every_backend(journal_url: str) -> None:
    from eventstore.testing import open_journal

    journal = open_journal(journal_url)
    rnd = random.Random(7)
    batch = []
    for i in range(300):
        account = rnd.choice(ACCOUNTS)
        kind = rnd.choice(["grant", "consume", "submit", "start", "complete", "cancel"])
        payload: dict[str, Any]
        if kind == "grant":
            payload = {"account": account, "amount": rnd.randint(1, 50),
                       "expiry": i + rnd.randint(5, 100)}
        elif kind == "consume":
            payload = {"account": account, "amount": rnd.randint(1, 30)}
        elif kind == "submit":
            payload = {"account": account, "job": f"j{i}", "cost": rnd.randint(0, 20),
                       "priority": rnd.randint(0, 3)}
        else:
            payload = {"job": f"j{rnd.randrange(max(i, 1))}"}
            if kind == "complete":
                payload["success"] = rnd.random() < 0.7
        time = i if rnd.random() > 0.1 else max(0, i - rnd.randint(1, 50))  # some late
        batch.append(NewEvent(f"e{i}", _stream(payload), kind, time, payload))
    journal.append(batch)
    memory = MemoryJournal()
    memory.append(batch)
    assert replay(journal).digest == replay(memory).digest
    assert replay(journal).revisions == replay(memory).revisions


def test_checkpoint_resumes_a_facade_even_once_a_late_event_lands_before_it(
        tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'cp.db'}"
    t = GPUCreditTracker(url, account="a")
    for i in range(50):
        t.grant(10, timestamp=2 * i, expiry=2 * i + 30)
        t.consume(7, timestamp=2 * i + 1)
    from eventstore import Journal

    journal = Journal(url)
    replay(journal, checkpoint=True)
    assert len(journal.snapshots("ledger")) == 1
    reopened = GPUCreditTracker(url, account="a")
    assert reopened._session.projector.position == journal.head()  # resumed, not replayed
    assert reopened.get_balance(100) == t.get_balance(100)
    assert verify(journal).ok
    reopened.consume(3, timestamp=50)  # late: the checkpoint covers up to time 99
    # Stale for a query (which folds in canonical order and passes over it), still the
    # state of every event up to its position: the next facade resumes from it and puts
    # the late consume in its place.
    assert [info.position for info in journal.snapshots("ledger")] == [100]
    third = GPUCreditTracker(url, account="a")
    assert third._session.projector._started_at == 100
    assert third.get_balance(100) == reopened.get_balance(100)
    assert third.state_digest() == fold_canonical(journal).digest()
    assert ledger_at(journal).digest() == fold_canonical(journal).digest()
    assert verify(journal).ok


def test_a_retried_call_with_the_same_event_id_is_recorded_once() -> None:
    journal = MemoryJournal()
    s = Scheduler(journal, clock=lambda: 10)
    s.open_account("a", 10, event_id="open-a")
    assert s.submit("j", "a", 8, 1, event_id="submit-j") is True
    head = journal.head()
    # The answer was lost: the client sends the same call again and gets the same answer.
    assert s.submit("j", "a", 8, 1, event_id="submit-j") is True
    t = GPUCreditTracker(journal, account="a")
    assert t.consume(5, 20, event_id="use-1") == 3
    assert t.consume(5, 20, event_id="use-1") == 3
    assert journal.head() == head + 1


def test_a_retried_grant_or_usage_report_answers_as_first_without_refolding_history(
        monkeypatch: pytest.MonkeyPatch) -> None:
    journal = MemoryJournal()
    t = GPUCreditTracker(journal, account="a")
    t.grant(10, 1, 100, event_id="g")
    assert t.consume(4, 2, event_id="u") == 0
    assert t.consume(9, 3) == 3
    head = journal.head()

    def refold(*_: object) -> None:
        raise AssertionError("the retry rebuilt the account's state from its history")

    # A grant or a usage report is built without reading the state: its retry needs none.
    monkeypatch.setattr(LedgerSession, "_state_before", refold)
    assert t.consume(4, 2, event_id="u") == 0  # what it answered then, not the debt now
    t.grant(10, 1, 100, event_id="g")
    assert journal.head() == head
    with pytest.raises(IdempotencyConflict):
        t.consume(5, 2, event_id="u")  # another command under a used id
    assert journal.head() == head


@settings(max_examples=40, deadline=None)
@given(cut_timelines())
def test_restore_gives_the_state_at_its_snapshot_however_the_ledger_went_on(
        cut_timeline: tuple[list[Any], int]) -> None:
    from projections.ledger import restore, snapshot

    timeline, cut, ledger = folded_to_cut(cut_timeline)
    saved, want, want_live = snapshot(ledger), ledger.canonical(), sorted(ledger.live)
    fold_on(ledger, timeline, cut)
    # The snapshot shares the job index with a ledger that went on: restoring must give
    # the state as it was, twice over (restores are independent copies).
    first, second = restore(saved), restore(saved)
    assert first.canonical() == want and sorted(first.live) == want_live
    assert all(first.jobs[job_id] is job for job_id, job in first.live.items())
    # Folding on from one restored copy changes neither the other nor the saved state.
    assert fold_on(first, timeline, cut).canonical() == ledger.canonical()
    assert second.canonical() == want == restore(saved).canonical()


def test_interval_checkpoints_let_a_fresh_facade_refold_a_late_event_from_a_recent_one(
        tmp_path: Any) -> None:
    from eventstore import Journal

    url = f"sqlite:///{tmp_path / 'cps.db'}"
    t = GPUCreditTracker(url, account="a")
    for i in range(100):  # position p has event time p - 1
        t.grant(10, timestamp=2 * i, expiry=2 * i + 30)
        t.consume(7, timestamp=2 * i + 1)
    journal = Journal(url)
    replay(journal, checkpoint=True, checkpoint_every=40)
    assert [info.position for info in journal.snapshots("ledger")] == [80, 120, 160, 200]
    assert verify(journal).checked_checkpoints == 4

    reopened = GPUCreditTracker(url, account="a")
    projector = reopened._session.projector
    assert projector.position == 200  # resumed from the newest checkpoint
    folded: list[int] = []
    reader = projector._reader

    def counting(after: Any, to_position: int, to_time: int | None) -> Any:
        for rec in reader(after, to_position, to_time):
            folded.append(rec.position)
            yield rec

    account_reader = projector._account_reader
    assert account_reader is not None

    def counting_account(stream: str, after: Any, to_position: int) -> Any:
        for rec in account_reader(stream, after, to_position):
            folded.append(rec.position)
            yield rec

    projector._reader = counting
    projector._account_reader = counting_account
    reopened.consume(50, timestamp=130)
    # Refolded from the checkpoint at position 120 (time 119), not from the start: the
    # events at times 120..199 and the late one.
    assert folded and min(folded) > 120 and len(set(folded)) == 81
    # The late consume made the two later checkpoints stale: the earlier ones stay, and
    # so does the newest, which a facade still resumes from.
    assert [info.position for info in journal.snapshots("ledger")] == [80, 120, 200]
    want = fold_canonical(journal).digest()
    third = GPUCreditTracker(url, account="a")
    assert third._session.projector._started_at == 200
    assert reopened.state_digest() == want == third.state_digest()
    assert verify(journal).ok


def test_checkpoint_every_must_be_positive() -> None:
    import pytest

    with pytest.raises(ValueError, match="checkpoint_every must be a positive"):
        replay(MemoryJournal(), checkpoint=True, checkpoint_every=0)


def test_frequent_late_events_refold_a_bounded_stretch_each() -> None:
    """Snapshots densify when late events are frequent: each late event refolds a short
    stretch of the timeline, not everything since a sparse snapshot (which made a replay
    of a journal with many late events quadratic)."""
    journal = MemoryJournal()
    rnd = random.Random(3)
    events = []
    for i in range(3000):
        account = f"acct-{i % 7}"
        if i % 5 == 0:
            events.append((f"g{i}", "grant", i, {"account": account, "amount": 40}))
        else:
            events.append((f"c{i}", "consume", i, {"account": account, "amount": 3}))
    arrival = list(range(len(events)))
    for i in range(10, len(arrival) - 10, 10):  # every 10th event arrives a few late
        j = i + rnd.randint(1, 6)
        arrival[i], arrival[j] = arrival[j], arrival[i]
    for k in arrival:
        event_id, kind, time, payload = events[k]
        journal.append([NewEvent(event_id, payload["account"], kind, time, payload)])

    folded = 0
    reader = journal_reader(journal)

    def counting(after: Any, to_position: int, to_time: int | None) -> Any:
        nonlocal folded
        for rec in reader(after, to_position, to_time):
            folded += 1
            yield rec

    # replay()'s settings: sparse snapshots, no remembered outcomes.
    projector = Projector(counting, min_snapshot_every=20_000, snapshot_factor=8,
                          recent_outcomes=0)
    late = 0
    for rec in journal.read(order="position"):
        late += (rec.time, rec.position) < projector.ledger.last
        projector.ingest(rec)
    assert late > 250
    assert projector.ledger.digest() == fold_canonical(journal).digest()
    # Refolding from the last sparse snapshot (here: from the start) would fold about
    # late * n / 2 = 400,000 events; densified snapshots keep it to a few dozen each.
    assert folded < 40 * late, (folded, late)


def test_verify_reports_every_stage_with_its_total_known_from_the_start() -> None:
    from projections.replay import VERIFY_STAGES

    journal = MemoryJournal()
    journal.append([NewEvent(f"g{i}", "a", "grant", i, {"account": "a", "amount": 1})
                    for i in range(12_000)])
    replay(journal, checkpoint=True, checkpoint_every=5_000)
    seen: list[tuple[str, int, int]] = []
    stages: list[str] = []

    def progress(done: int, total: int) -> None:
        seen.append((stages[-1], done, total))

    report = verify(journal, progress=progress, stage=stages.append)
    assert report.ok
    assert stages == list(VERIFY_STAGES)
    for name in VERIFY_STAGES:
        calls = [(done, total) for stage, done, total in seen if stage == name]
        assert calls, name
        totals = {total for _, total in calls}
        assert len(totals) == 1 and totals.pop() > 0, name  # never an unknown total
        assert calls[0][0] == 0, name  # a bar from the start, not after the first batch
        assert [done for done, _ in calls] == sorted(done for done, _ in calls), name
    chain = [(d, t) for s, d, t in seen if s == VERIFY_STAGES[0]]
    assert chain[-1] == (12_000, 12_000) and len(chain) > 2
    assert [(d, t) for s, d, t in seen if s == VERIFY_STAGES[2]][-1] == (12_000, 12_000)


def test_verify_counts_every_event_of_the_journal_reversed_ones_included() -> None:
    """`checked_events` is the journal's size, whose chain was checked, not the count of
    events the fold applied: a reversed event and its reversal are journal events too."""
    journal = MemoryJournal()
    journal.append([NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 100}),
                    NewEvent("c1", "a", "consume", 1, {"account": "a", "amount": 5}),
                    NewEvent("c2", "a", "consume", 2, {"account": "a", "amount": 7}),
                    NewEvent("r1", "a", "reverse", 1, {"event": "c1", "reason": "x"})])
    report = verify(journal)
    assert report.ok and report.checked_events == journal.head() == 4
    replay(journal, checkpoint=True)  # replay reproducing a checkpoint changes nothing
    report = verify(journal)
    assert (report.ok, report.checked_events, report.checked_checkpoints) == (True, 4, 1)


def test_replay_counts_the_journal_events_it_replayed_reversed_ones_included() -> None:
    """As `verify` counts them: every event up to `to_time`, not only those the fold
    applied (a reversed event and its reversal are replayed too)."""
    journal = MemoryJournal()
    journal.append([NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 100}),
                    NewEvent("c1", "a", "consume", 1, {"account": "a", "amount": 5}),
                    NewEvent("c2", "a", "consume", 3, {"account": "a", "amount": 7})])
    journal.append([NewEvent("r1", "a", "reverse", 1, {"event": "c1", "reason": "x"})])
    journal.append([NewEvent("g2", "a", "grant", 2, {"account": "a", "amount": 1})])
    assert replay(journal).events == 5
    assert replay(journal, to_time=2).events == 4  # c2, at 3, is past it
    assert replay(journal, to_time=0).events == 1
