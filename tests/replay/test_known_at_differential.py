"""Answers about the past, differentially: asked of the whole journal "as known at P",
every answer is the one a fresh journal holding only positions 1..P gives at its head,
and the revisions are exactly what each arrival changed in what the folds report.

The model is obviously right: the prefix is a new in-memory journal, the same events
appended in the same batches, in arrival order, asked at its head; the revisions are
the differences between straight folds of consecutive prefixes. The journals drawn
hold every correction (adjustments, voids, some recorded before their grant, reversals
of any event, reversals included), expiries landing on other events' times, caps,
refills, job steps (some filed in a stream of their job's own, some of a job id two
accounts submit), mostly arriving late; some are cut by checkpoints (saved by a replay
or from a live projection), some are SQLite rather than memory; some are made by the
facades' own decisions in the past.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from eventstore import Journal, MemoryJournal, NewEvent
from eventstore.interface import JournalLike
from projections import GPUCreditTracker, Scheduler
from projections.corrections import Corrections
from projections.errors import UnknownAccount, UnknownJob
from projections.events import from_payload, to_payload
from projections.figures import Figures
from projections.ledger import Ledger
from projections.queries import (
    accounts,
    balance,
    expiring,
    explain_account,
    explain_job,
    jobs,
    statement,
    to_dict,
)
from projections.replay import fold_canonical, ledger_at, replay, save_checkpoint
from projections.revisionlog import RevisionLog
from projections.session import session_of
from tests.arrivals import in_batches

ACCOUNTS = ("a", "b")
POOLS = (None, "h100")
Row = tuple[str, str, int, dict[str, Any], str]  # id, type, time, payload, stream


@st.composite
def recorded(draw: st.DrawFn, *, batched: bool = True) -> list[list[Row]]:
    """Events in arrival order, cut into the batches they were appended in: every event
    type, times in a small range (so expiries and events meet), most of them late."""
    n = draw(st.integers(1, 22))
    rows: list[Row] = []
    grants: list[tuple[str, str]] = []  # (id, account)
    jobs: list[tuple[str, str]] = []  # (job, account)
    void_ahead: int | None = None
    for i in range(n):
        kind = draw(st.sampled_from(
            ["account", "grant", "grant", "grant", "consume", "consume", "adjust", "void",
             "reverse", "reverse", "submit", "submit", "start", "start", "complete",
             "cancel"]))
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        time = draw(st.integers(0, 12))
        stream = account
        payload: dict[str, Any]
        if kind == "account":
            payload = {"account": account, "max_running": draw(st.sampled_from([None, 1]))}
            if draw(st.booleans()):
                # A refill: credits accrue between events, by the second.
                payload |= {"refill_rate": draw(st.sampled_from([1800, 3600, 7200])),
                            "refill_cap": draw(st.integers(1, 12))}
        elif kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool,
                       "expiry": draw(st.sampled_from([None, time + 1, time + 3, time + 6])),
                       "priority": draw(st.sampled_from([50, 50, 10]))}
            grants.append((f"e{i}", account))
            if void_ahead is not None:
                # A void recorded before its grant (an export lists a void timed before
                # its grant first, and an import appends the file in its order).
                rows.append((f"v{i}", "void", void_ahead, {"grant": f"e{i}"}, account))
                void_ahead = None
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool}
        elif kind == "adjust":
            payload = {"account": account, "amount": draw(st.integers(-15, 15).filter(bool)),
                       "reason": "fix", "pool": pool}
        elif kind == "void":
            if not grants or draw(st.integers(0, 3)) == 0:
                void_ahead = time  # of the next grant, recorded before it
                continue
            grant, stream = draw(st.sampled_from(grants))
            payload = {"grant": grant}
        elif kind == "reverse":
            if not rows:
                continue
            target = draw(st.sampled_from(rows))
            payload, stream = {"event": target[0], "reason": "wrong"}, target[4]
            # Mostly at the time of the event it reverses, as the command line records it.
            time = draw(st.sampled_from([target[2], target[2], time]))
        elif kind == "submit":
            # Now and then an id another submit used (an anomaly, or another account's).
            job = draw(st.sampled_from([f"j{i}"] * 3 + [j for j, _ in jobs[:2]]))
            jobs.append((job, account))
            payload = {"account": account, "job": job, "cost": draw(st.integers(0, 15)),
                       "priority": draw(st.integers(0, 2)), "pool": pool}
        elif not jobs:
            continue
        else:
            job, stream = draw(st.sampled_from(jobs))
            # Filed in a stream of the job's own now and then, as an import files a step
            # whose submit it does not know.
            stream = draw(st.sampled_from([stream, stream, f"job:{job}"]))
            payload = {"job": job}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
                payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
        rows.append((f"e{i}", kind, time, to_payload(from_payload(kind, payload)), stream))
    sizes = draw(st.lists(st.sampled_from([1, 1, 1, 2, 3] if batched else [1]),
                          min_size=len(rows), max_size=len(rows)))
    return in_batches(rows, sizes)


def append(journal: JournalLike, batches: list[list[Row]]) -> JournalLike:
    for batch in batches:
        journal.append([NewEvent(event_id, stream, kind, time, payload)
                        for event_id, kind, time, payload, stream in batch])
    return journal


def prefix(batches: list[list[Row]], position: int) -> list[list[Row]]:
    """The batches as a journal held them at `position` (a batch cut there, cut)."""
    out, left = [], position
    for batch in batches:
        if left <= 0:
            break
        out.append(batch[:left])
        left -= len(batch)
    return out


def without_recorded_at(value: Any) -> Any:
    """An answer as a plain value, without the recorded-at times a fresh journal has its own of."""
    if isinstance(value, dict):
        return {k: without_recorded_at(v) for k, v in value.items() if k != "recorded_at"}
    if isinstance(value, list):
        return [without_recorded_at(v) for v in value]
    return value


def _asked(ask: Any) -> Any:
    try:
        return without_recorded_at(to_dict(ask()))
    except (UnknownAccount, UnknownJob) as exc:
        return type(exc).__name__


def answers(journal: JournalLike, at: int, known: int | None,
            latest: int | None) -> dict[str, Any]:
    """Every answer compared, at event time `at` as known at position `known` (None:
    the head): the state's digest, each account's balance, statements (from the start
    and from `at - 4`), tracker balance and explanation (only when `latest`, the time
    it is given at, is the journal's latest), every account, what expires, the jobs,
    and each job's state and explanation."""
    out: dict[str, Any] = {
        "digest": ledger_at(journal, to_position=known, to_time=at).digest(),
        "cold": fold_canonical(journal, to_position=known, to_time=at).digest()}
    cold = fold_canonical(journal, to_position=known, to_time=at)
    for account in ACCOUNTS:
        out[f"balance {account}"] = _asked(
            lambda a=account: balance(journal, a, at=at, as_known_at=known))
        # Each also agrees with a straight fold of the same events (a shared mistake of
        # the two sides compared would not show otherwise).
        folded = Figures.of(cold.accounts.get(account), at)
        if isinstance(out[f"balance {account}"], dict):
            assert balance(journal, account, at=at, as_known_at=known).figures == folded
            closing = statement(journal, account, to_time=at, as_known_at=known).closing
            assert (closing.balance, closing.reserved) == (folded.balance, folded.reserved)
        out[f"statement {account}"] = _asked(
            lambda a=account: statement(journal, a, to_time=at, as_known_at=known))
        out[f"statement {account} from"] = _asked(
            lambda a=account: statement(journal, a, from_time=at - 4, to_time=at,
                                        as_known_at=known))
        out[f"tracker {account}"] = GPUCreditTracker(journal, account).get_balance(
            at, as_known_at=known)
        if journal.max_time() == latest:
            # Explained at the latest event time (of the journal asked): compared only
            # where the prefix's latest is the whole journal's.
            out[f"explain {account}"] = _asked(
                lambda a=account: explain_account(journal, a, as_known_at=known))
    out["accounts"] = _asked(lambda: accounts(journal, at=at, as_known_at=known))
    out["expiring"] = _asked(lambda: expiring(journal, at=at, within=5, as_known_at=known))
    out["jobs"] = _asked(lambda: jobs(journal, as_known_at=known))
    scheduler = Scheduler(journal, clock=lambda: 0)
    ledger: Ledger = fold_canonical(journal, to_position=known)
    for job in sorted(ledger.jobs):
        out[f"job {job}"] = scheduler.job_state(job, as_known_at=known)
        out[f"explain {job}"] = _asked(lambda j=job: explain_job(journal, j, as_known_at=known))
    return out


def expected(batches: list[list[Row]], position: int, at: int,
             latest: int | None) -> dict[str, Any]:
    """`answers` of a fresh journal holding only positions 1..position, at its head."""
    return answers(append(MemoryJournal(), prefix(batches, position)), at, None, latest)


def assert_agrees(journal: JournalLike, batches: list[list[Row]], position: int,
                  at: int) -> None:
    note(f"batches: {batches!r}")
    latest = append(MemoryJournal(), prefix(batches, position)).max_time()
    got = answers(journal, at, position, latest if latest == journal.max_time() else None)
    want = expected(batches, position, at, latest if latest == journal.max_time() else None)
    for key, value in want.items():
        if value == "UnknownAccount" and got[key] != value:
            # Named only by events recorded later: the whole journal answers with nothing.
            assert key.startswith(("balance", "statement", "explain")), key
            continue
        assert got[key] == value, key


@settings(max_examples=30, deadline=None)
@given(recorded().filter(bool), st.data())
def test_as_known_at_is_a_fold_of_the_journal_then(batches: list[list[Row]],
                                                   data: st.DataObject) -> None:
    journal = append(MemoryJournal(), batches)
    head = journal.head()
    position = data.draw(st.integers(1, head), label="as known at")
    at = data.draw(st.integers(-1, 20), label="at")
    assert_agrees(journal, batches, position, at)


@pytest.mark.parametrize("saved_by", ["replay", "live"])
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@settings(max_examples=30, deadline=None)
@given(batches=recorded().filter(bool), data=st.data())
def test_as_known_at_is_a_fold_of_the_journal_then_across_checkpoints(
        backend: str, saved_by: str, batches: list[list[Row]], data: st.DataObject) -> None:
    journal = MemoryJournal() if backend == "memory" else Journal()
    # Checkpoints saved part-way (by a replay of what was recorded then, or from a live
    # projection that took it as it came, as the service saves them), then the rest
    # recorded after them, late events among it: answers as known before, at and after.
    cut = data.draw(st.integers(1, len(batches)), label="checkpointed batches")
    if saved_by == "replay":
        append(journal, batches[:cut])
        replay(journal, checkpoint=True, checkpoint_every=data.draw(st.integers(1, 4)))
    else:
        session = session_of(GPUCreditTracker(journal, "a"))
        for batch in batches[:cut]:
            append(journal, [batch])
            if data.draw(st.booleans(), label="read"):
                session.catch_up()
        with session.reading() as ledger:
            save_checkpoint(journal, ledger, session.projector.position)
    append(journal, batches[cut:])
    position = data.draw(st.integers(1, journal.head()), label="as known at")
    at = data.draw(st.integers(-1, 20), label="at")
    assert_agrees(journal, batches, position, at)
    # Facades opened now resume from the newest checkpoint, whatever landed before it,
    # and answer about any time as a fold of the whole journal does.
    trackers = {account: GPUCreditTracker(journal, account) for account in ACCOUNTS}
    for when in (at, data.draw(st.integers(-1, 20), label="at, resumed")):
        folded = fold_canonical(journal, to_time=when)
        for account, tracker in trackers.items():
            want = Figures.of(folded.accounts.get(account), when)
            assert tracker.pool_balances(when) == want.pools, (account, when)
    scheduler = Scheduler(journal, clock=lambda: 0)
    for job, state in fold_canonical(journal).jobs.items():
        assert scheduler.job_state(job) == state.state, job


def _reported_in(journal: JournalLike) -> dict[int, dict[str, Any]]:
    """Position -> what a straight fold of the whole journal reports for each event."""
    ledger = Ledger(excluded=fold_canonical(journal).excluded)
    return {rec.position: ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time,
                                                rec.payload).reported()
            for rec in journal.read(order="canonical")}


def _reported(batches: list[list[Row]], position: int) -> dict[int, dict[str, Any]]:
    """`_reported_in` a journal of the batches up to `position`."""
    return _reported_in(append(MemoryJournal(), prefix(batches, position)))


@settings(max_examples=30, deadline=None)
@given(recorded(batched=False).filter(bool))
def test_revisions_are_exactly_what_each_arrival_changed(batches: list[list[Row]]) -> None:
    journal = append(MemoryJournal(), batches)
    want = []
    before = _reported(batches, 0)
    for position in range(1, journal.head() + 1):
        after = _reported(batches, position)
        want += [(position, p, before[p], after[p]) for p in sorted(before)
                 if before[p] != after[p]]
        before = after
    for found in (replay(journal).revisions, RevisionLog(journal).revisions()):
        got = [(r.late_position, r.position, r.before, r.after) for r in found]
        assert sorted(got, key=lambda r: r[:2]) == want


@settings(max_examples=20, deadline=None)
@given(recorded().filter(bool), st.data())
def test_facades_open_while_events_arrive_answer_as_a_fold_of_them(
        batches: list[list[Row]], data: st.DataObject) -> None:
    note(f"batches: {batches!r}")
    journal = MemoryJournal()
    trackers = {account: GPUCreditTracker(journal, account) for account in ACCOUNTS}
    scheduler = Scheduler(journal, clock=lambda: 0)
    for i, batch in enumerate(batches):
        append(journal, [batch])
        # Caught up after each batch (a read catches up), or only now and then.
        if data.draw(st.booleans(), label=f"read after batch {i}"):
            trackers[data.draw(st.sampled_from(ACCOUNTS))].get_balance(
                data.draw(st.integers(-1, 20)))
    for at in range(-1, 21):
        folded = fold_canonical(journal, to_time=at)
        for account, tracker in trackers.items():
            want = Figures.of(folded.accounts.get(account), at)
            assert tracker.get_balance(at) == want.balance, (account, at)
            assert tracker.pool_balances(at) == want.pools, (account, at)
    folded = fold_canonical(journal)
    for job, state in folded.jobs.items():
        assert scheduler.job_state(job) == state.state, job
    got = {(r.late_position, r.position, repr(r.before), repr(r.after))
           for r in trackers["a"].revisions}
    assert got == {(r.late_position, r.position, repr(r.before), repr(r.after))
                   for r in replay(journal).revisions}


def _copy_prefix(journal: JournalLike, position: int) -> MemoryJournal:
    """A new journal of `journal`'s events up to `position`, in their batches."""
    ends = {b.first: b.last for b in journal.batches(to_position=position)}
    records = list(journal.read(to_position=position, order="position"))
    copy, i = MemoryJournal(), 0
    while i < len(records):
        last = min(ends.get(records[i].position, records[i].position), position)
        batch = [r for r in records[i:] if r.position <= last]
        copy.append([NewEvent(r.id, r.stream, r.type, r.time, r.payload) for r in batch])
        i += len(batch)
    return copy


@st.composite
def decisions(draw: st.DrawFn) -> list[tuple[Any, ...]]:
    """Calls of the facades, with times of their own (most of them in the past)."""
    steps: list[tuple[Any, ...]] = []
    for i in range(draw(st.integers(1, 18))):
        kind = draw(st.sampled_from(["grant", "grant", "consume", "consume", "adjust", "void",
                                     "reverse", "submit", "submit", "start", "complete",
                                     "cancel", "open"]))
        steps.append((kind, i, draw(st.sampled_from(ACCOUNTS)), draw(st.integers(1, 15)),
                      draw(st.integers(0, 12)), draw(st.sampled_from(POOLS)),
                      draw(st.integers(0, 1000)), draw(st.booleans())))
    return steps


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@settings(max_examples=15, deadline=None)
@given(steps=decisions())
def test_facade_decisions_in_the_past_answer_as_a_fold_of_the_journal(
        backend: str, steps: list[tuple[Any, ...]]) -> None:
    journal = MemoryJournal() if backend == "memory" else Journal()
    corrections = Corrections(journal, clock=lambda: 0)
    scheduler = Scheduler(journal, clock=lambda: 0)
    recorded_ids: list[str] = []
    grants: list[str] = []
    jobs_: list[str] = []
    for kind, i, account, amount, at, pool, pick, flag in steps:
        head = journal.head()
        told: Any = None
        try:
            if kind == "grant":
                corrections.grant(account, amount, at=at, pool=pool, event_id=f"g{i}",
                                  expiry=at + 1 + pick % 6 if flag else None)
                grants.append(f"g{i}")
            elif kind == "consume":
                told = corrections.consume(account, amount, at=at, pool=pool).debt_after
            elif kind == "adjust":
                corrections.adjust(account, amount if flag else -amount, "fix", at=at)
            elif kind == "void" and grants:
                corrections.void(grants[pick % len(grants)], at=at)
            elif kind == "reverse" and recorded_ids:
                corrections.reverse(recorded_ids[pick % len(recorded_ids)], "wrong")
            elif kind == "submit":
                told = scheduler.submit(f"j{i}", account, amount, pick % 3, at=at, pool=pool)
                jobs_.append(f"j{i}")
            elif kind == "start":
                scheduler.start_next(at=at)
            elif kind == "complete" and jobs_:
                scheduler.complete(jobs_[pick % len(jobs_)], flag,
                                   refund_fraction=0.5, at=at)
            elif kind == "cancel" and jobs_:
                scheduler.cancel(jobs_[pick % len(jobs_)], at=at)
            elif kind == "open":
                scheduler.open_account(account, amount, max_running=1 if flag else None,
                                       at=at)
        except (ValueError, KeyError):
            assert journal.head() == head, f"a refused {kind} appended"  # nothing appended
            continue
        recorded_ids += [rec.id for rec in journal.read(after_position=head)]
        if told is not None:
            # What a decision answers is what the fold of the journal then says.
            rec = journal.read(after_position=head, order="position")
            (last,) = [r for r in rec if r.type in ("consume", "submit")]
            folded = _reported_in(journal)
            assert told == folded[last.position].get(
                "debt_after", folded[last.position]["ok"]), (kind, i)
    head = journal.head()
    if not head:
        return
    if not {"consume", "reverse"} & {rec.type for rec in journal.read()}:
        # Decisions in the past are refused when they would invalidate a recorded event;
        # only a usage report (a fact) or a reversal may make one an anomaly.
        assert fold_canonical(journal).anomalies == []
    for at in range(-1, 21, 3):
        for account in ACCOUNTS:
            tracker = GPUCreditTracker(journal, account)
            want = Figures.of(fold_canonical(journal, to_time=at).accounts.get(account), at)
            assert tracker.get_balance(at) == want.balance, (account, at)
            for position in range(1, head + 1):
                copy = _copy_prefix(journal, position)
                assert tracker.get_balance(at, as_known_at=position) == \
                    GPUCreditTracker(copy, account).get_balance(at), (account, at, position)
    got = {(r.late_position, r.position, repr(r.before), repr(r.after))
           for r in scheduler.revisions}
    assert got == {(r.late_position, r.position, repr(r.before), repr(r.after))
                   for r in replay(journal).revisions}


@settings(max_examples=20, deadline=None)
@given(recorded().filter(bool))
def test_revisions_of_batches_are_what_each_batch_changed_of_what_was_known(
        batches: list[list[Row]]) -> None:
    journal = append(MemoryJournal(), batches)
    # A batch is one step of knowledge: it revises only what was known before it, each
    # revision caused by one of its events (its earliest on the revised account's
    # timeline, which the brute force below does not try to say).
    want: list[tuple[int, int, Any, Any]] = []
    batch_of: dict[int, int] = {}
    end = 0
    before = _reported(batches, 0)
    for n, batch in enumerate(batches):
        first, end = end + 1, end + len(batch)
        batch_of.update(dict.fromkeys(range(first, end + 1), n))
        after = _reported(batches, end)
        want += [(n, p, before[p], after[p]) for p in sorted(before) if before[p] != after[p]]
        before = after
        for found in (replay(journal, to_position=end).revisions,
                      RevisionLog(_copy_prefix(journal, end)).revisions()):
            got = [(batch_of[r.late_position], r.position, r.before, r.after) for r in found]
            assert sorted(got, key=lambda r: r[:2]) == want
