"""A late event re-projected for its own account equals a refold of the whole timeline.

Streams here are what the facades and import record: an event's account, a job event in
the stream of its job's account. The histories reuse job ids across accounts, void
grants, reverse events and put some job events in a stream of their own, so every case
that must fall back to the whole-timeline refold shows up too.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import JournalLike, MemoryJournal, NewEvent
from projections.events import from_payload, to_payload
from projections.ledger import Ledger
from projections.projector import MIN_KEY, Projector
from projections.replay import (
    account_reader,
    fold_canonical,
    journal_reader,
    lean_records,
    locator,
    replay,
)
from tests.replay.test_replay import assert_equals_a_cold_fold

ACCOUNTS = ("a", "b", "c")
POOLS = (None, "h100")
Event = tuple[str, str, str, int, dict[str, Any]]  # id, stream, type, time, payload


@st.composite
def histories(draw: st.DrawFn) -> list[Event]:
    """A random, well-formed mix of every event type, with the streams import would give."""
    n = draw(st.integers(1, 30))
    times = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    events: list[Event] = []
    owner: dict[str, str] = {}  # job -> account of its first submit in the history
    grants: list[str] = []
    for i in range(n):
        kind = draw(st.sampled_from(["account", "grant", "grant", "grant", "consume",
                                     "adjust", "submit", "submit", "submit", "start",
                                     "start", "complete", "complete", "cancel", "void",
                                     "reverse"]))
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        stream = account
        payload: dict[str, Any]
        if kind == "account":
            payload = {"account": account, "max_running": draw(st.sampled_from([None, 1, 2])),
                       "share": draw(st.sampled_from([None, 1, 3]))}
        elif kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool,
                       "expiry": draw(st.sampled_from([None, times[i] + 5, times[i] + 30]))}
            grants.append(f"e{i}")
        elif kind in ("consume", "adjust"):
            amount = draw(st.integers(1, 20))
            payload = {"account": account, "amount": amount, "pool": pool}
            if kind == "adjust":
                payload = {**payload, "amount": draw(st.sampled_from([amount, -amount])),
                           "reason": "fix"}
        elif kind == "submit":
            # Mostly fresh ids, sometimes one another account (or this one) used before.
            job = draw(st.sampled_from([f"j{i}", f"j{i}", f"j{i}", *sorted(owner)]))
            owner.setdefault(job, account)
            payload = {"account": account, "job": job, "cost": draw(st.integers(0, 15)),
                       "priority": draw(st.integers(0, 2)), "pool": pool}
        elif kind == "void":
            if not grants:
                continue
            target = draw(st.sampled_from(grants))
            payload = {"grant": target}
            stream = next(e[1] for e in events if e[0] == target)
        elif kind == "reverse":
            if not events:
                continue
            target_event = draw(st.sampled_from(events))
            payload = {"event": target_event[0], "reason": "undo"}
            stream = target_event[1]
        else:
            if not owner:
                continue
            job = draw(st.sampled_from(sorted(owner)))
            payload = {"job": job}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
                payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
            # The job's account, as import resolves it; now and then a stream of its own.
            stream = draw(st.sampled_from([owner[job], owner[job], f"job:{job}"]))
        event = from_payload(kind, payload)
        events.append((f"e{i}", stream, kind, times[i], to_payload(event)))
    return events


def _journal(events: list[Event]) -> MemoryJournal:
    journal = MemoryJournal()
    for event_id, stream, kind, time, payload in events:
        journal.append([NewEvent(event_id, stream, kind, time, payload)])
    return journal


def _projector(journal: MemoryJournal, *, by_account: bool, snapshot_every: int,
               max_snapshots: int = 3) -> Projector:
    return Projector(journal_reader(journal), min_snapshot_every=snapshot_every,
                     max_snapshots=max_snapshots, locate=locator(journal),
                     account_reader=account_reader(journal) if by_account else None)


def _revisions(projector: Projector) -> list[tuple[Any, ...]]:
    return sorted((r.late_position, r.position, repr(r.before), repr(r.after))
                  for r in projector.revisions)


def _revised(projector: Projector) -> list[tuple[Any, ...]]:
    """The revisions without their cause: each revised event, before and after."""
    return sorted((r.position, repr(r.before), repr(r.after)) for r in projector.revisions)


@settings(max_examples=150, deadline=None)
@given(histories(), st.randoms(use_true_random=False), st.sampled_from([1, 2, 5, 1000]))
def test_per_account_reprojection_equals_a_full_fold_after_every_event(
        events: list[Event], rnd: random.Random, snapshot_every: int) -> None:
    rnd.shuffle(events)
    assert_both_paths_agree_after_every_event(_journal(events), snapshot_every)


def assert_both_paths_agree_after_every_event(journal: MemoryJournal, snapshot_every: int,
                                              max_snapshots: int = 3,
                                              batches: list[int] | None = None) -> None:
    """A projector re-projecting by account and one refolding the whole timeline, fed
    the journal in arrival order, agree after every event with each other and with a
    cold fold, in everything a later fold or decision reads.

    `batches`: the sizes of the appends the events were recorded in, each taken with
    `ingest_batch` (default: one event at a time, with `ingest`)."""
    alone = _projector(journal, by_account=True, snapshot_every=snapshot_every,
                       max_snapshots=max_snapshots)
    whole = _projector(journal, by_account=False, snapshot_every=snapshot_every,
                       max_snapshots=max_snapshots)
    records = list(journal.read(order="position"))
    parts = [[rec] for rec in records]
    if batches is not None:
        ends = list(itertools.accumulate(batches))
        parts = [records[i:j] for i, j in zip([0, *ends], ends, strict=False)]
    for part in parts:
        if batches is None:
            got, expected = {part[0].position: alone.ingest(part[0])}, {
                part[0].position: whole.ingest(part[0])}
        else:
            got, expected = alone.ingest_batch(part), whole.ingest_batch(part)
        assert got == expected
        assert_equals_a_cold_fold(alone.ledger, journal, part[-1].position)
        ledger = alone.ledger
        assert sorted(ledger.anomalies) == sorted(whole.ledger.anomalies)
        assert (ledger.applied, ledger.rejected) == (whole.ledger.applied,
                                                     whole.ledger.rejected)
        assert _next_job(ledger) == _next_job(whole.ledger)
        # What the digest leaves out, and later folds and decisions depend on.
        assert ledger.last == whole.ledger.last
        assert ledger.reversals == whole.ledger.reversals
        assert alone.excluded == whole.excluded == ledger.excluded
    if batches is None:
        assert _revisions(alone) == _revisions(whole)
    else:
        # What a batch revised, and how, is the same; only the cause may differ: by
        # account, each revision names the batch's earliest event on its account's
        # timeline (`tests/replay/test_batches.py` checks which).
        assert _revised(alone) == _revised(whole)


def counting_account_reader(journal: JournalLike) -> tuple[Callable[..., Any], list[str]]:
    """`account_reader(journal)`, and the list it fills with the stream of every event it
    reads: how many reads a refold took, and of which accounts."""
    read: list[str] = []
    reader = account_reader(journal)

    def counting(stream: str, after: tuple[int, int], to_position: int) -> Any:
        for rec in reader(stream, after, to_position):
            read.append(rec.stream)
            yield rec

    return counting, read


def _next_job(ledger: Ledger) -> str | None:
    job = ledger.next_job(ledger.last[0])
    return None if job is None else job.id


def test_a_late_usage_report_refolds_only_its_own_account() -> None:
    journal = MemoryJournal()
    for i in range(300):
        account = ACCOUNTS[i % 3]
        journal.append([NewEvent(f"g{i}", account, "grant", 10 * i,
                                 {"account": account, "amount": 5})])
    counting, read = counting_account_reader(journal)
    projector = Projector(journal_reader(journal), min_snapshot_every=50,
                          account_reader=counting)
    projector.catch_up(journal.read(order="position"))
    (late,) = journal.append([NewEvent("late", "b", "consume", 2_905,
                                       {"account": "b", "amount": 7})])
    projector.ingest(late)
    assert projector.refolded_by_account == 1
    assert set(read) == {"b"}
    # b's events after the snapshot before the late one: not b's 100, nor all 300. (The
    # snapshots are spaced by the batches the state holds, here up to 300.)
    assert len(read) < 50
    assert projector.ledger.digest() == fold_canonical(journal).digest()


def test_late_usage_reports_of_the_only_account_refold_from_the_snapshots_laid_down() -> None:
    # Alone on the ledger, its stretch is the whole timeline. Refolded alone, it left every
    # later snapshot stale for the only account each held (dropped), so the second late
    # event refolded from before the first, and in a long history at last from the start.
    journal = MemoryJournal()
    for i in range(2_000):
        kind = "grant" if i % 2 == 0 else "consume"
        journal.append([NewEvent(f"e{i}", "a", kind, i, {"account": "a", "amount": 5})])
    by_account, read_alone = counting_account_reader(journal)
    read_whole: list[str] = []
    reader = journal_reader(journal)

    def counting(*args: Any) -> Any:
        for rec in reader(*args):
            read_whole.append(rec.id)
            yield rec

    projector = Projector(counting, min_snapshot_every=50, locate=locator(journal),
                          account_reader=by_account)
    whole = _projector(journal, by_account=False, snapshot_every=50)
    for rec in journal.read(order="position"):
        projector.ingest(rec)
        whole.ingest(rec)
    for t in (500, 1_500):
        (late,) = journal.append([NewEvent(f"late{t}", "a", "consume", t,
                                           {"account": "a", "amount": 3})])
        read_alone.clear()
        read_whole.clear()
        assert projector.ingest(late) == whole.ingest(late)
    assert len(read_alone) + len(read_whole) < 700  # from near 1,500, not from before 500
    assert [repr(r) for r in projector.revisions] == [repr(r) for r in whole.revisions]
    assert projector.ledger.digest() == fold_canonical(journal).digest()


def test_a_job_id_used_by_two_accounts_falls_back_to_the_whole_timeline() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 10}),
                    NewEvent("g2", "b", "grant", 2, {"account": "b", "amount": 10}),
                    NewEvent("s1", "b", "submit", 20,
                             {"account": "b", "job": "x", "cost": 3, "priority": 0})])
    projector = _projector(journal, by_account=True, snapshot_every=1)
    projector.catch_up(journal.read(order="position"))
    # a's submit of the same id lands before b's: b's submit becomes the duplicate.
    (late,) = journal.append([NewEvent("s0", "a", "submit", 10,
                                       {"account": "a", "job": "x", "cost": 4,
                                        "priority": 0})])
    projector.ingest(late)
    assert projector.refolded_by_account == 0
    assert projector.ledger.jobs["x"].account == "a"
    assert projector.ledger.digest() == fold_canonical(journal).digest()


def test_late_events_read_as_stored_text_refold_their_own_account() -> None:
    # As a replay reads them: payloads as their JSON text, job events arriving before the
    # submit of their job (in that job's account stream, as import records them).
    events: list[Event] = []
    for i in range(60):
        account = ACCOUNTS[i % 3]
        events.append((f"g{i}", account, "grant", 10 * i, {"account": account, "amount": 9}))
        events.append((f"s{i}", account, "submit", 10 * i + 1,
                       {"account": account, "job": f"j{i}", "cost": 2, "priority": 0}))
        events.append((f"t{i}", account, "start", 10 * i + 2, {"job": f"j{i}"}))
    random.Random(7).shuffle(events)
    journal = _journal(events)
    projector = _projector(journal, by_account=True, snapshot_every=20)
    late = 0
    for rec in lean_records(journal, order="position"):
        if (rec.time, rec.position) < projector.ledger.last:
            # Not while its account is alone on the ledger: its timeline is the whole one.
            late += bool(projector.ledger.accounts.keys() - {rec.stream})
        projector.ingest(rec)
    assert late > 100
    assert projector.refolded_by_account == late
    assert projector.ledger.digest() == fold_canonical(journal).digest()


@st.composite
def corrections(draw: st.DrawFn) -> list[Event]:
    """Grants, usage and adjustments of a few accounts, with many reversals among them,
    reversals of reversals too, each on the stream of the event it names (as finance
    records them); now and then a void, on its grant's stream or, as a hand-made journal
    may hold it, another account's."""
    events: list[Event] = []
    n = draw(st.integers(1, 40))
    for i in range(n):
        kind = draw(st.sampled_from(["grant", "grant", "consume", "consume", "adjust",
                                     "reverse", "reverse", "reverse", "void"]))
        account = draw(st.sampled_from(ACCOUNTS))
        time = draw(st.integers(1, 60))
        pool = draw(st.sampled_from(POOLS))
        payload: dict[str, Any]
        stream = account
        if kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool,
                       "expiry": draw(st.sampled_from([None, time + 10, time + 40]))}
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool}
        elif kind == "adjust":
            payload = {"account": account, "amount": draw(st.sampled_from([-5, 3, 12])),
                       "pool": pool, "reason": "fix"}
        elif kind == "void":
            grants = [e for e in events if e[2] == "grant"]
            if not grants:
                continue
            target = draw(st.sampled_from(grants))
            # Mostly on its grant's stream, as the facades and import record it.
            payload = {"grant": target[0]}
            stream = draw(st.sampled_from([target[1], target[1], target[1], *ACCOUNTS]))
        else:
            if not events:
                continue
            target = draw(st.sampled_from(events))
            payload, stream = {"event": target[0], "reason": "undo"}, target[1]
        event = from_payload(kind, payload)
        events.append((f"e{i}", stream, kind, time, to_payload(event)))
    return events


@settings(max_examples=150, deadline=None)
@given(corrections(), st.randoms(use_true_random=False), st.sampled_from([1, 3, 1000]))
def test_reversals_in_any_arrival_order_equal_a_full_fold_after_every_event(
        events: list[Event], rnd: random.Random, snapshot_every: int) -> None:
    # Arrival order is shuffled: a reversal may arrive before the event it names, a
    # reversal of a reversal before the one it undoes, and either far back in time.
    rnd.shuffle(events)
    assert_both_paths_agree_after_every_event(_journal(events), snapshot_every)


def test_a_reversal_of_a_usage_report_refolds_only_its_own_account() -> None:
    journal = MemoryJournal()
    for i in range(300):
        account = ACCOUNTS[i % 3]
        journal.append([NewEvent(f"g{i}", account, "grant", 10 * i,
                                 {"account": account, "amount": 5})])
    journal.append([NewEvent("use", "b", "consume", 2_905, {"account": "b", "amount": 7})])
    for i in range(300, 330):
        account = ACCOUNTS[i % 3]
        journal.append([NewEvent(f"g{i}", account, "grant", 10 * i,
                                 {"account": account, "amount": 5})])
    counting, read = counting_account_reader(journal)
    projector = Projector(journal_reader(journal), min_snapshot_every=50,
                          locate=locator(journal), account_reader=counting)
    projector.catch_up(journal.read(order="position"))
    refolded = projector.refolded_by_account  # the usage report arrived late itself
    read.clear()
    (undo,) = journal.append([NewEvent("undo", "b", "reverse", 3_400,
                                       {"event": "use", "reason": "double count"})])
    projector.ingest(undo)
    assert projector.excluded == {"use"}
    assert projector.refolded_by_account == refolded + 1
    assert set(read) == {"b"}
    assert len(read) < 55  # b's events after the snapshot before the usage: not 110, nor 330
    assert projector.ledger.digest() == fold_canonical(journal).digest()
    (redo,) = journal.append([NewEvent("redo", "b", "reverse", 3_401,
                                       {"event": "undo", "reason": "it was right"})])
    projector.ingest(redo)
    assert projector.excluded == {"undo"}
    assert projector.refolded_by_account == refolded + 2
    assert projector.ledger.digest() == fold_canonical(journal).digest()


def _caught_up(*events: NewEvent) -> tuple[MemoryJournal, Projector]:
    """A journal of `events`, appended together, and a projector by account caught up
    with it, a snapshot after every event."""
    journal = MemoryJournal()
    journal.append(list(events))
    projector = _projector(journal, by_account=True, snapshot_every=1)
    projector.catch_up(journal.read(order="position"))
    return journal, projector


def test_a_reversal_naming_an_event_of_another_stream_refolds_the_whole_timeline() -> None:
    journal, projector = _caught_up(
        NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 10}),
        NewEvent("g2", "b", "grant", 2, {"account": "b", "amount": 10}),
        NewEvent("c1", "a", "consume", 3, {"account": "a", "amount": 4}))
    # Recorded on b's stream, naming a's usage: b's events alone cannot show its effect.
    (undo,) = journal.append([NewEvent("undo", "b", "reverse", 4,
                                       {"event": "c1", "reason": "wrong account"})])
    projector.ingest(undo)
    assert projector.refolded_by_account == 0
    assert projector.ledger.accounts["a"].available == 10
    assert projector.ledger.digest() == fold_canonical(journal).digest()


def test_a_late_usage_report_after_a_void_of_its_accounts_grant_refolds_only_it() -> None:
    journal, projector = _caught_up(
        NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 10}),
        NewEvent("g2", "b", "grant", 2, {"account": "b", "amount": 10}),
        NewEvent("g3", "a", "grant", 3, {"account": "a", "amount": 10}))
    for rec in journal.append([NewEvent("v1", "a", "void", 20, {"grant": "g1"})]):
        projector.ingest(rec)
    (late,) = journal.append([NewEvent("c1", "a", "consume", 10,
                                       {"account": "a", "amount": 15})])
    projector.ingest(late)
    assert projector.refolded_by_account == 1
    assert projector.ledger.accounts["a"].available == 5  # g1 was spent before its void
    assert projector.ledger.digest() == fold_canonical(journal).digest()


def test_a_void_recorded_apart_from_its_grant_keeps_reversals_on_the_whole_timeline() -> None:
    journal, projector = _caught_up(
        NewEvent("g1", "b", "grant", 1, {"account": "b", "amount": 10}),
        NewEvent("c1", "b", "consume", 2, {"account": "b", "amount": 10}),
        NewEvent("g2", "a", "grant", 3, {"account": "a", "amount": 10}),
        # On a's stream, naming b's grant: when folded, nothing left to void.
        NewEvent("v1", "a", "void", 5, {"grant": "g1"}))
    # Taking the usage out gives g1's credits back before the void: the void takes them.
    (undo,) = journal.append([NewEvent("undo", "b", "reverse", 6,
                                       {"event": "c1", "reason": "not used"})])
    projector.ingest(undo)
    assert projector.refolded_by_account == 0
    assert projector.ledger.accounts["b"].available == 0
    assert projector.ledger.digest() == fold_canonical(journal).digest()


@settings(max_examples=150, deadline=None)
@given(histories(), st.randoms(use_true_random=False), st.data())
def test_a_projector_started_from_a_saved_state_refolds_late_events_as_a_full_fold(
        events: list[Event], rnd: random.Random, data: st.DataObject) -> None:
    """As a session opening from a checkpoint does: the events before the saved state were
    never ingested, so what they tell of streams reaching across accounts (a job event in
    a stream of its own, a job's events in another account's stream) must still keep the
    late events after it off the per-account refold where it would miss them."""
    rnd.shuffle(events)
    journal = _journal(events)
    cut = data.draw(st.integers(0, journal.head()), label="saved at position")
    alone = _projector(journal, by_account=True,
                       snapshot_every=data.draw(st.sampled_from([1, 5, 1000])))
    if cut:
        alone.start_from(fold_canonical(journal, to_position=cut), cut)
    for rec in journal.read(after_position=cut, order="position"):
        alone.ingest(rec)
        assert_equals_a_cold_fold(alone.ledger, journal, rec.position)


def test_a_late_submit_of_a_job_whose_start_came_before_the_saved_state() -> None:
    # The start, in its job's own stream, found no job; the projector starts after it,
    # then a's submit of that job lands before the start: the job runs.
    journal = _journal([("g", "a", "grant", 0, {"account": "a", "amount": 100}),
                        ("t", "job:j", "start", 100, {"job": "j"}),
                        ("h", "b", "grant", 110, {"account": "b", "amount": 5})])
    projector = _projector(journal, by_account=True, snapshot_every=1000)
    projector.start_from(fold_canonical(journal), journal.head())
    (late,) = journal.append([NewEvent("s", "a", "submit", 50,
                                       {"account": "a", "job": "j", "cost": 10,
                                        "priority": 0})])
    projector.ingest(late)
    assert projector.ledger.jobs["j"].state == "running"
    assert projector.ledger.digest() == fold_canonical(journal).digest()


SOAK_ACCOUNTS = ("a", "b", "c", "d", "e")


@st.composite
def slightly_late(draw: st.DrawFn) -> tuple[list[Event], list[int]]:
    """Grants, usage, submits and job steps of several accounts, each on its account's
    stream, now and then a reversal of a grant or usage (on its stream), in arrival
    order: each event a few events later than its event time, as usage reports come in
    a service's soak; and the sizes of the appends that recorded them."""
    events: list[Event] = []
    jobs: dict[str, list[str]] = {}
    undoable: dict[str, list[str]] = {}
    for i in range(draw(st.integers(10, 60))):
        account = draw(st.sampled_from(SOAK_ACCOUNTS))
        kind = draw(st.sampled_from(["grant", "consume", "consume", "consume", "submit",
                                     "start", "complete", "reverse"]))
        payload: dict[str, Any]
        if kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": None}
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 15)), "pool": None}
        elif kind == "submit":
            jobs.setdefault(account, []).append(f"j{i}")
            payload = {"account": account, "job": f"j{i}", "cost": draw(st.integers(0, 10)),
                       "priority": draw(st.integers(0, 2)), "pool": None}
        elif kind == "reverse":
            if not undoable.get(account):
                continue
            payload = {"event": draw(st.sampled_from(undoable[account])), "reason": "undo"}
        else:
            if not jobs.get(account):
                continue
            payload = {"job": draw(st.sampled_from(jobs[account]))}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
                payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
        if kind in ("grant", "consume"):
            undoable.setdefault(account, []).append(f"e{i}")
        events.append((f"e{i}", account, kind, 10 * i, to_payload(from_payload(kind, payload))))
    delays = draw(st.lists(st.integers(0, 6), min_size=len(events), max_size=len(events)))
    order = sorted(range(len(events)), key=lambda i: (i + delays[i], i))
    sizes = draw(st.lists(st.integers(1, 3), min_size=len(events), max_size=len(events)))
    ends = [end for end in itertools.accumulate(sizes) if end < len(events)]
    batches = [b - a for a, b in zip([0, *ends], [*ends, len(events)], strict=True)]
    return [events[i] for i in order], batches


@settings(max_examples=150, deadline=None)
@given(slightly_late(), st.sampled_from([1, 2, 3]), st.booleans())
def test_a_stream_of_slightly_late_events_over_many_snapshots_equals_a_full_fold(
        drawn: tuple[list[Event], list[int]], snapshot_every: int, in_batches: bool) -> None:
    # Snapshots close together and many kept: each late event re-projected for its
    # account alone leaves the ones after it stale for that account only, and the next
    # late event of another account starts from one of them.
    events, batches = drawn
    journal = _journal_in_batches(events, batches)
    assert_both_paths_agree_after_every_event(journal, snapshot_every, max_snapshots=12,
                                              batches=batches if in_batches else None)
    assert replay(journal).digest == fold_canonical(journal).digest()


def _journal_in_batches(events: list[Event], batches: list[int]) -> MemoryJournal:
    journal = MemoryJournal()
    rows = iter(events)
    for size in batches:
        journal.append([NewEvent(event_id, stream, kind, time, payload)
                        for event_id, stream, kind, time, payload
                        in itertools.islice(rows, size)])
    return journal


def test_late_usage_of_many_accounts_refolds_from_a_snapshot_not_the_empty_ledger() -> None:
    # Usage reports of 20 accounts, each up to 60 events late: every snapshot taken at
    # the head is soon behind a late event of some account. Each refold must still start
    # from a snapshot near the late event, not from the empty ledger (the account's whole
    # history), once the first snapshots are taken: with every snapshot after a late
    # event dropped, all of them did.
    rnd = random.Random(5)
    accounts = [f"acct{i}" for i in range(20)]
    events: list[Event] = [(f"g-{name}", name, "grant", i, {"account": name, "amount": 10**6})
                           for i, name in enumerate(accounts)]
    for i in range(100, 4_000):
        name = rnd.choice(accounts)
        events.append((f"u{i}", name, "consume", 10 * i, {"account": name, "amount": 1}))
    head = events[:20]
    arrivals = sorted(events[20:], key=lambda e: e[3] + 10 * rnd.randint(0, 60))
    journal = _journal(head + arrivals)
    counting, _ = counting_account_reader(journal)
    starts: list[tuple[int, int]] = []

    def reader(stream: str, after: tuple[int, int], to_position: int) -> Any:
        starts.append(after)
        return counting(stream, after, to_position)

    projector = Projector(journal_reader(journal), locate=locator(journal),
                          account_reader=reader)
    projector.catch_up(journal.read(order="position"))
    late = len(starts)
    assert late > 3_000
    assert projector.refolded_by_account == late
    second_half = starts[late // 2:]
    from_empty = sum(after == MIN_KEY for after in second_half)
    assert from_empty < len(second_half) // 5, f"{from_empty} of {len(second_half)}"
    assert projector.ledger.digest() == fold_canonical(journal).digest()


@settings(max_examples=100, deadline=None)
@given(histories(), st.randoms(use_true_random=False), st.sampled_from([1, 2, 5]),
       st.booleans())
def test_states_of_the_past_kept_as_snapshots_stay_right_under_later_late_events(
        events: list[Event], rnd: random.Random, snapshot_every: int,
        by_account: bool) -> None:
    """`state_at` keeps what it folded far to make as a snapshot: questions about the past
    asked between arrivals (late ones among them) answer as a fold of what was known,
    then and after, and the live state stays a cold fold's."""
    from projections.replay import ledger_at

    rnd.shuffle(events)
    journal = _journal(events)
    projector = _projector(journal, by_account=by_account, snapshot_every=snapshot_every)
    times = sorted({time for _, _, _, time, _ in events})
    for rec in journal.read(order="position"):
        projector.ingest(rec)
        for _ in range(2):
            when = rnd.choice(times) - rnd.choice([0, 1])
            past = projector.state_at(when)
            expected = ledger_at(journal, to_position=rec.position, to_time=when)
            assert past.digest() == expected.digest(), (rec.position, when)
        assert_equals_a_cold_fold(projector.ledger, journal, rec.position)
