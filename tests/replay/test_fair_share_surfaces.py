"""Fair share, differentially: every surface that picks or counts the next job agrees
with the simulator's reference model (`tools.sim.model`), which folds the records plainly
and compares every pending job's usage per share afresh at the pick's time.

The journals drawn give accounts shares and half-lives of a minute, an hour and a week
at once, at Unix-scale times, declare them again (another half-life, the share turned
off and on), charge some before their first share, and record most events out of time
order. Surfaces: a cold fold, `replay` (late events re-projected as they came), the
per-account refold, a snapshot restored, a checkpoint decoded, `explain`'s `ahead`
against starts taken one after another, export and import in both formats, the state as
known at an earlier position, and `Scheduler.start_next` through the facade, live and
placed in the past.
"""

from __future__ import annotations

import io
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent, RecordedEvent
from eventstore.interface import JournalLike
from projections import Scheduler, importing
from projections.checkpoint import chain_hash_at, decode_checkpoint, encode_checkpoint
from projections.events import from_payload, to_payload
from projections.ledger import Ledger, restore, snapshot
from projections.projector import Projector
from projections.queries import explain_job
from projections.replay import account_reader, fold_canonical, journal_reader, locator, replay
from tests.arrivals import in_batches
from tests.replay.test_known_at_differential import Row, append
from tools.sim import model

ACCOUNTS = ("a", "b", "c")
HALF_LIVES = (60, 3600, 604_800)
T0 = 1_700_000_000
LATER = (0, 59, 3600, 604_800)  # picks at the last event's time, and this much after it


@st.composite
def recorded(draw: st.DrawFn) -> list[list[Row]]:
    """Events in arrival order (mostly not time order), cut into batches."""
    rows: list[Row] = []
    jobs: list[tuple[str, str]] = []
    for i in range(draw(st.integers(5, 30))):
        kind = draw(st.sampled_from(["account", "account", "grant", "submit", "submit",
                                     "submit", "start", "start", "complete", "complete",
                                     "cancel"]))
        account = draw(st.sampled_from(ACCOUNTS))
        time = T0 + draw(st.integers(0, 7200))
        stream = account
        payload: dict[str, Any]
        if kind == "account":
            payload = {"account": account, "max_running": draw(st.sampled_from([None, 1, 2])),
                       "share": draw(st.sampled_from([None, 1, 2, 3])),
                       "half_life": draw(st.sampled_from(HALF_LIVES))}
        elif kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 5000))}
        elif kind == "submit":
            jobs.append((f"j{i}", account))
            payload = {"account": account, "job": f"j{i}",
                       "cost": draw(st.sampled_from([0, 1, 2, 3, 6, 9, 700, 1234])),
                       "priority": draw(st.integers(0, 1))}
        elif not jobs:
            continue
        else:
            job, stream = draw(st.sampled_from(jobs))
            payload = {"job": job}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
                payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.5]))
        rows.append((f"e{i}", kind, time, to_payload(from_payload(kind, payload)), stream))
    sizes = draw(st.lists(st.sampled_from([1, 1, 2]), min_size=len(rows), max_size=len(rows)))
    return in_batches(rows, sizes)


def _picked(ledger: Ledger, time: int) -> str | None:
    job = ledger.next_job(time)
    return None if job is None else job.id


def _model_picks(journal: JournalLike, to_position: int | None = None) -> list[str | None]:
    records = list(journal.read(to_position=to_position, order="position"))
    folded = model.fold(records)
    last = max((rec.time for rec in records), default=0)
    return [model._next_job(folded, last + later) for later in LATER]


def _picks(ledger: Ledger) -> list[str | None]:
    return [_picked(ledger, ledger.last[0] + later) for later in LATER]


def _settings(ledger: Ledger) -> dict[str, tuple[int | None, int, float, int]]:
    return {name: (a.share, a.half_life, a.usage_log2, a.usage_whole)
            for name, a in sorted(ledger.accounts.items())}


def _starts_before(ledger: Ledger, job_id: str) -> int | None:
    """How many jobs `start_next` takes, called again and again at the last event's
    time, before `job_id` (None: it never gets its turn)."""
    trial = restore(snapshot(ledger))
    time, position = trial.last
    for started in range(len(trial.live) + 1):
        job = trial.next_job(time)
        if job is None:
            return None
        if job.id == job_id:
            return started
        position += 1
        trial.apply_recorded(position, f"trial-{position}", "start", time, {"job": job.id})
    return None


@settings(max_examples=30, deadline=None)
@given(batches=recorded())
def test_every_surface_picks_the_models_next_job(batches: list[list[Row]]) -> None:
    journal = append(MemoryJournal(), batches)
    head = journal.head()
    want = _model_picks(journal)
    cold = fold_canonical(journal)
    note(f"model {want}, cold fold {_picks(cold)}")
    assert _picks(cold) == want
    assert _picks(replay(journal).ledger) == want
    assert _picks(restore(snapshot(cold))) == want
    chain = chain_hash_at(journal, head)
    decoded = decode_checkpoint(encode_checkpoint(cold, head, chain), position=head,
                                chain_hash=chain)
    assert _picks(decoded) == want
    assert _settings(decoded) == _settings(cold)
    by_account = Projector(journal_reader(journal), min_snapshot_every=2, max_snapshots=3,
                           locate=locator(journal), account_reader=account_reader(journal))
    for rec in journal.read(order="position"):
        by_account.ingest(rec)
    assert _picks(by_account.ledger) == want
    for position in range(1, head, 3):
        assert _picks(fold_canonical(journal, to_position=position)) == \
            _model_picks(journal, position)
    for job_id, job in cold.live.items():
        if job.state == "pending":
            ahead = _starts_before(cold, job_id)
            if ahead is not None:
                assert explain_job(journal, job_id).ahead == ahead, job_id
    for fmt, write in (("jsonl", importing.write_jsonl), ("csv", importing.write_csv)):
        out = io.StringIO()
        write(importing.export_records(journal), out)
        again = MemoryJournal()
        importing.import_file(again, out.getvalue().encode(), "export", fmt=fmt)
        back = fold_canonical(again)
        assert _settings(back) == _settings(cold), fmt
        assert _picks(back) == want, fmt




def _anomalies(records: list[Any]) -> list[str]:
    ledger = Ledger()
    for rec in sorted(records, key=lambda rec: (rec.time, rec.position)):
        ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time, rec.payload)
    return sorted(event_id for _, event_id, _ in ledger.anomalies)


def _first_start_in_the_past(records: list[Any], at: int) -> str | None:
    """What `start_next(at=...)` before the last event starts: the first job in the
    model's order at `at` (a job pending then, of an account below its cap, by priority,
    usage per share at `at`, then age) whose start there makes no event recorded since
    an anomaly."""
    folded = model.fold([rec for rec in records if rec.time <= at])
    before = _anomalies(records)
    position = max(rec.position for rec in records) + 1
    while (job := model._next_job(folded, at)) is not None:
        probe = RecordedEvent(position, "probe", "probe", 1, "start", at, 0, {"job": job}, "")
        tried = [*records, probe]
        if _anomalies(tried) == before:
            return job
        folded.queue.remove(job)
    return None


@st.composite
def facade_ops(draw: st.DrawFn) -> list[tuple[str, int, int, int]]:
    return draw(st.lists(st.tuples(
        st.sampled_from(["declare", "submit", "submit", "submit", "start", "start",
                         "past-start", "past-start", "complete", "late-complete"]),
        st.sampled_from([0, 0, 1, 60, 3600, 90_000]), st.integers(0, 2**16),
        st.sampled_from([1, 2, 3, 6, 9, 700])), min_size=5, max_size=40))


@settings(max_examples=40, deadline=None)
@given(ops=facade_ops())
def test_start_next_through_the_facade_starts_the_models_job(
        ops: list[tuple[str, int, int, int]]) -> None:
    now = [T0]
    s = Scheduler(clock=lambda: now[0])
    journal = s._session.journal
    for i, name in enumerate(ACCOUNTS):
        s.open_account(name, 10**9, share=None if i == 2 else i + 1,
                       half_life=HALF_LIVES[i])
    running: list[str] = []
    for i, (kind, gap, pick, cost) in enumerate(ops):
        now[0] += gap
        account = ACCOUNTS[pick % len(ACCOUNTS)]
        if kind == "declare":
            journal.append([NewEvent(f"declare-{i}", account, "account", now[0], {
                "account": account, "share": [None, 1, 3][pick % 3],
                "half_life": HALF_LIVES[(pick // 3) % len(HALF_LIVES)]})])
        elif kind == "submit":
            assert s.submit(f"j{i}", account, cost, priority=pick % 2)
        elif kind in ("start", "past-start"):
            records = list(journal.read(order="position"))
            last = max(rec.time for rec in records)
            # In the past: at the time of an event recorded before, or just after it.
            at = now[0] if kind == "start" else min(
                last - 1, records[pick % len(records)].time + pick % 2)
            started = s.start_next(at=at)
            want = (model._next_job(model.fold(records), at) if kind == "start"
                    else _first_start_in_the_past(records, at))
            assert (None if started is None else started.id) == want
            if started is not None:
                running.append(started.id)
        elif running:
            job = running.pop(pick % len(running))
            at = now[0] - pick % 600 if kind == "late-complete" else now[0]
            try:
                s.complete(job, cost % 2 == 0, refund_fraction=0.5, at=at)
            except ValueError:  # before its own start: complete it now instead
                s.complete(job, cost % 2 == 0, refund_fraction=0.5, at=now[0])
    ledger = s.ledger()
    assert _picks(ledger) == _model_picks(journal)
