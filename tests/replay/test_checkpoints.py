"""Checkpoints are data: they round-trip exactly, and loading one never runs its bytes."""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from eventstore import Journal, MemoryJournal, NewEvent
from projections import GPUCreditTracker, Scheduler, queries
from projections.checkpoint import (
    CHECKPOINT,
    MAGIC,
    VERSION,
    CheckpointError,
    StaleCheckpoint,
    _header_bytes,
    chain_hash_at,
    decode_checkpoint,
    encode_checkpoint,
    latest_valid_checkpoint,
)
from projections.ledger import STATE, Ledger
from projections.replay import fold_canonical, ledger_at, replay, verify
from projections.session import LedgerSession
from projections.statecopy import StateFormatError
from tests.replay.test_replay import cut_timelines, fold_on, folded_to_cut, histories

HASH = "ab" * 32


@settings(max_examples=40, deadline=None)
@given(cut_timelines())
def test_a_decoded_checkpoint_folds_on_exactly_like_the_ledger_it_was_taken_from(
        cut_timeline: tuple[list[Any], int]) -> None:
    timeline, cut, ledger = folded_to_cut(cut_timeline)
    blob = encode_checkpoint(ledger, cut, HASH)
    loaded = decode_checkpoint(blob, position=cut, chain_hash=HASH)
    assert loaded.canonical() == ledger.canonical() and loaded.last == ledger.last
    assert sorted(loaded.live) == sorted(ledger.live)
    assert all(loaded.jobs[job_id] is job for job_id, job in loaded.live.items())
    # Same state, same future: fold the rest into both.
    assert fold_on(loaded, timeline, cut).digest() == fold_on(ledger, timeline, cut).digest()


def test_damaged_or_foreign_checkpoint_bytes_are_refused_with_the_reason() -> None:
    ledger = Ledger()
    ledger.apply_recorded(1, "g", "grant", 5, {"account": "a", "amount": 3})
    blob = encode_checkpoint(ledger, 1, HASH)
    flipped = blob[:-3] + bytes([blob[-3] ^ 1]) + blob[-2:]
    cases = {
        "own hash": flipped,
        "pickled": pickle.dumps(ledger),
        "not a checkpoint": b"",
    }
    for why, data in cases.items():
        with pytest.raises(CheckpointError, match=why):
            decode_checkpoint(data, position=1, chain_hash=HASH)
    with pytest.raises(CheckpointError, match="chain hash"):
        decode_checkpoint(blob, position=1, chain_hash="cd" * 32)
    with pytest.raises(CheckpointError, match="position"):
        decode_checkpoint(blob, position=2, chain_hash=HASH)


def test_a_state_tree_can_only_build_the_known_classes() -> None:
    for tree in ([3, 99], [7, 1], [4, 0], [3, 0, "too few fields"], {"a": 1}, b"x"):
        with pytest.raises(StateFormatError):
            STATE.decode(tree)


class _Poison:
    """A pickle payload that creates a file when unpickled."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def _journal_with_history(url: str) -> GPUCreditTracker:
    t = GPUCreditTracker(url, account="a")
    for i in range(20):
        t.grant(10, timestamp=2 * i, expiry=2 * i + 30)
        t.consume(7, timestamp=2 * i + 1)
    return t


def test_poisoned_checkpoint_bytes_are_never_executed(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'poison.db'}"
    t = _journal_with_history(url)
    want = t.get_balance(100)
    journal = Journal(url)
    replay(journal, checkpoint=True)
    (good,) = journal.snapshots(CHECKPOINT)
    marker = tmp_path / "pwned"
    bad = pickle.dumps(_Poison(marker))
    # Newer than the good one, at the head: every reader tries it first.
    journal.save_snapshot(CHECKPOINT, good.position, good.event_time, good.digest, bad)
    with caplog.at_level(logging.WARNING, logger="projections.checkpoint"):
        assert GPUCreditTracker(url, account="a").get_balance(100) == want
        assert Scheduler(url).state_digest() == fold_canonical(journal).digest()
        found = latest_valid_checkpoint(journal)
    assert found is not None and found[0].id == good.id  # the good one, not the poison
    assert any("ignored" in r.getMessage() and "\n" not in r.getMessage()
               for r in caplog.records)
    # It names what the reader starts from instead: the older good one here, where it
    # said the journal would be folded (an operator then expected a slow start).
    assert all("starting from an older checkpoint, or the journal's first event"
               in r.getMessage() for r in caplog.records if "ignored" in r.getMessage())
    report = verify(journal)
    assert not report.ok and report.problem is not None and "unreadable" in report.problem
    assert not marker.exists()
    assert not os.path.exists("pwned")


def test_a_checkpoint_from_another_history_is_ignored(tmp_path: Path) -> None:
    """Bytes that are a valid checkpoint, but of another journal with the same positions."""
    first, second = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
    _journal_with_history(first)
    other = GPUCreditTracker(second, account="a")
    for i in range(40):
        other.grant(1, timestamp=i, expiry=1000)
    one, two = Journal(first), Journal(second)
    replay(one, checkpoint=True)
    (info,) = one.snapshots(CHECKPOINT)
    two.save_snapshot(CHECKPOINT, info.position, info.event_time, info.digest,
                      one.load_snapshot(info.id))
    assert latest_valid_checkpoint(two) is None
    assert GPUCreditTracker(second, account="a").get_balance(100) == 40
    assert not verify(two).ok


def _resealed(data: bytes, *, reseal: bool = True, **header_changes: Any) -> bytes:
    """Checkpoint bytes with header fields changed, sealed again (as the code that wrote
    such a header would have sealed it) unless `reseal` is false."""
    end = data.find(b"\n", len(MAGIC))
    header, body = orjson.loads(data[len(MAGIC):end]), data[end + 1:]
    claimed = header.pop("sha256")
    header.update(header_changes)
    seal = hashlib.sha256(_header_bytes(header) + b"\n" + body).hexdigest()
    return MAGIC + _header_bytes({**header, "sha256": seal if reseal else claimed}) + \
        b"\n" + body


def _other_schema() -> dict[str, list[str]]:
    schema = STATE.schema()
    return {**schema, "JobState": list(reversed(schema["JobState"]))}


@pytest.mark.parametrize("changes", [{"version": 1}, {"version": VERSION + 1},
                                     {"schema": "other"}], ids=["older", "newer", "schema"])
def test_verify_passes_over_an_intact_checkpoint_of_another_format_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, changes: dict[str, Any]) -> None:
    """A checkpoint is a cache: one of another format version or state schema, sealed
    and bound to this chain, is out of date, not damage. Queries ignore it; verify too,
    with a warning, and `replay` saves a fresh one that verify then compares."""
    if changes.get("schema") == "other":
        changes = {"schema": _other_schema()}
    url = f"sqlite:///{tmp_path / 'stale.db'}"
    want = _journal_with_history(url).get_balance(100)
    journal = Journal(url)
    replay(journal, checkpoint=True)
    (info,) = journal.snapshots(CHECKPOINT)
    old = _resealed(journal.load_snapshot(info.id), **changes)
    journal.drop_snapshots(CHECKPOINT)
    journal.save_snapshot(CHECKPOINT, info.position, info.event_time, info.digest, old)
    with pytest.raises(StaleCheckpoint):
        decode_checkpoint(old, position=info.position,
                          chain_hash=chain_hash_at(journal, info.position))
    with caplog.at_level(logging.WARNING, logger="projections.checkpoint"):
        assert GPUCreditTracker(url, account="a").get_balance(100) == want
        report = verify(journal)
    assert report.ok, report.problem
    assert report.checked_checkpoints == 0 and len(report.stale_checkpoints) == 1
    assert any("ignored" in r.getMessage() and "\n" not in r.getMessage()
               for r in caplog.records)
    replay(journal, checkpoint=True)
    again = verify(journal)
    assert again.ok and again.checked_checkpoints >= 1 and again.stale_checkpoints == ()


def test_a_checkpoint_of_the_fold_that_dropped_a_paid_off_pool_is_stale(
        tmp_path: Path) -> None:
    """Version 2 checkpoints were saved by a fold that dropped a pool once a grant paid
    its debt: the same digest as the fold now gives, other pools. Read as current, one
    would answer without the pool; it is passed over as stale, and every answer lists it."""
    from projections.queries import accounts, balance

    url = f"sqlite:///{tmp_path / 'pools.db'}"
    t = GPUCreditTracker(url, account="a")
    t.consume(10, 1, pool="h100")
    t.grant(20, 2, 100)
    journal = t.journal
    ledger = fold_canonical(journal)
    del ledger.accounts["a"].book.active["h100"]  # what the version 2 fold left
    assert ledger.digest() == fold_canonical(journal).digest()
    blob = encode_checkpoint(ledger, 2, chain_hash_at(journal, 2))
    journal.save_snapshot(CHECKPOINT, 2, 2, ledger.digest(),
                          _resealed(blob, version=2))
    want = {"general": 10, "h100": 0}
    assert balance(journal, "a").figures.pools == want
    assert [row.figures.pools for row in accounts(journal).rows] == [want]
    assert GPUCreditTracker(url, account="a").pool_balances(2) == want
    report = verify(journal)
    assert report.ok and len(report.stale_checkpoints) == 1
    # The same state under the current version would pass every check, and be wrong.
    journal.drop_snapshots(CHECKPOINT)
    journal.save_snapshot(CHECKPOINT, 2, 2, ledger.digest(), blob)
    assert verify(journal).stale_checkpoints == ()
    assert [row.figures.pools for row in accounts(journal).rows] == [{"general": 10}]
    journal.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", ["version, unsealed", "schema, unsealed",
                                 "version, other chain", "version, other position"])
def test_verify_still_fails_a_checkpoint_of_another_format_that_was_altered(
        tmp_path: Path, how: str) -> None:
    """Another version or schema is no cover: bytes that no longer match their seal, or a
    header bound to another chain or position, are damage, reported as before."""
    url = f"sqlite:///{tmp_path / 'altered.db'}"
    _journal_with_history(url)
    journal = Journal(url)
    replay(journal, checkpoint=True)
    (info,) = journal.snapshots(CHECKPOINT)
    data = journal.load_snapshot(info.id)
    altered = {
        "version, unsealed": lambda: _resealed(data, reseal=False, version=1),
        "schema, unsealed": lambda: _resealed(data, reseal=False, schema=_other_schema()),
        "version, other chain": lambda: _resealed(data, version=1, chain_hash="cd" * 32),
        "version, other position": lambda: _resealed(data, version=1,
                                                     position=info.position - 1),
    }[how]()
    journal.drop_snapshots(CHECKPOINT)
    journal.save_snapshot(CHECKPOINT, info.position, info.event_time, info.digest, altered)
    report = verify(journal)
    assert not report.ok and report.problem is not None
    assert report.first_bad_position == info.position and report.stale_checkpoints == ()
    # A header naming another chain hash is refused before the checkpoints are read: the
    # journal no longer holds the hash its verified point recorded.
    expected = {"unsealed": "unreadable: its own hash", "other chain": "re-hashed",
                "other position": "unreadable: header says position"}[how.split(", ")[1]]
    assert expected in report.problem


def test_upgrading_drops_checkpoints_saved_in_the_old_pickled_format(tmp_path: Path) -> None:
    from alembic import command

    from eventstore.migrate import alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(text(
            "INSERT INTO snapshots (name, position, event_time, digest, state, recorded_at) "
            "VALUES ('ledger', 0, 0, 'd', :state, 0)"), {"state": pickle.dumps(Ledger())})
    engine.dispose()
    journal = Journal(url)  # opening upgrades
    assert journal.snapshots(CHECKPOINT) == []
    journal.close()


def test_a_checkpoint_after_replay_resumes_to_the_same_digest(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    _journal_with_history(url)
    journal = Journal(url)
    replay(journal, checkpoint=True)
    t = GPUCreditTracker(url, account="a")
    assert t._session.projector.position == journal.head()
    assert t.state_digest() == fold_canonical(journal).digest()
    assert verify(journal).ok


def test_a_checkpoint_dropped_while_a_query_opens_it_is_passed_over_quietly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process (a replay replacing its checkpoints, a service thinning them at
    its stop) drops one a query listed before it loads it: a cache gone, not a damaged
    one. The query starts from the next one without telling its user that a checkpoint
    was ignored and to run replay, as `verify` passes over one dropped meanwhile."""
    url = f"sqlite:///{tmp_path / 'dropped.db'}"
    _journal_with_history(url)
    journal = Journal(url)
    replay(journal, checkpoint=True, checkpoint_every=10)
    newest = max(journal.snapshots(CHECKPOINT), key=lambda i: i.position)
    load = journal.load_snapshot

    def dropped_meanwhile(snapshot_id: int) -> bytes:
        if snapshot_id == newest.id:
            journal.drop_snapshots(CHECKPOINT, from_id=newest.id, through_id=newest.id)
        return load(snapshot_id)

    monkeypatch.setattr(journal, "load_snapshot", dropped_meanwhile)
    with caplog.at_level(logging.WARNING, logger="projections.checkpoint"):
        assert ledger_at(journal).digest() == fold_canonical(journal).digest()
    assert not [r for r in caplog.records if "ignored" in r.getMessage()]


def test_a_replay_cut_short_keeps_the_checkpoints_it_would_have_replaced(
        tmp_path: Path) -> None:
    """Saving fresh checkpoints replaces the old ones once they are saved: a replay
    stopped on the way (Ctrl-C, another writer holding the lock) left none, and the next
    process to start folded the whole journal. One that cannot save a checkpoint (the
    lock held elsewhere, a full disk) answers all the same, saying why none was saved."""
    url = f"sqlite:///{tmp_path / 'cut.db'}"
    _journal_with_history(url)
    journal = Journal(url)
    replay(journal, checkpoint=True, checkpoint_every=10)
    before = journal.snapshots(CHECKPOINT)
    assert len(before) > 1

    from eventstore import LockTimeout
    from projections import replay as replay_module

    saved: list[int] = []
    save = replay_module.save_checkpoint

    def held_elsewhere(journal: Any, ledger: Ledger, position: int) -> Any:
        if saved:
            raise LockTimeout("stayed locked by another writer")
        saved.append(position)
        return save(journal, ledger, position)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(replay_module, "save_checkpoint", held_elsewhere)
        cut = replay(journal, checkpoint=True, checkpoint_every=10)
    assert cut.checkpoint_problem == "stayed locked by another writer"
    assert cut.position == journal.head()
    assert saved
    assert set(before) <= set(journal.snapshots(CHECKPOINT))
    # Run whole, it leaves only its own.
    report = replay(journal, checkpoint=True, checkpoint_every=10)
    after = journal.snapshots(CHECKPOINT)
    assert after and not set(before) & set(after)
    assert {info.position for info in after} == {
        info.position for info in before} and report.position == journal.head()
    assert verify(journal).ok
    journal.close()


@settings(max_examples=40, deadline=None)
@given(histories(), st.data())
def test_ledger_at_from_checkpoints_equals_a_fold_at_every_position_and_time(
        events: list[Any], data: st.DataObject) -> None:
    """Checkpoints saved partway (some made stale by events arriving after them, late)
    never change an answer: the state at (time, as known at position) is the fold's."""
    from tests.replay.test_replay import _journal

    order = data.draw(st.permutations(events), label="arrival order")
    cut = data.draw(st.integers(0, len(order)), label="checkpointed prefix")
    journal = _journal(list(order[:cut]))
    replay(journal, checkpoint=True, checkpoint_every=data.draw(st.integers(1, 5)))
    for event_id, kind, time, payload in order[cut:]:
        from eventstore import NewEvent
        from tests.replay.test_replay import _stream

        journal.append([NewEvent(event_id, _stream(payload), kind, time, payload)])
    for _ in range(4):
        position = data.draw(st.integers(0, journal.head()), label="as known at")
        time = data.draw(st.none() | st.integers(0, len(events) + 1), label="at")
        want = fold_canonical(journal, to_position=position, to_time=time)
        got = ledger_at(journal, to_position=position, to_time=time)
        assert got.digest() == want.digest() and got.last == want.last


def test_a_checkpoint_of_a_wholly_reversed_timeline_answers_as_a_fold_does() -> None:
    # Every event reversed: the checkpoint's state holds no event on the timeline, and
    # its event time is the timeline's start, before which nothing can arrive.
    journal = MemoryJournal()
    journal.append([NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 5}),
                    NewEvent("r1", "a", "reverse", 1, {"event": "g1", "reason": "typo"})])
    replay(journal, checkpoint=True)
    assert journal.snapshots("ledger")
    assert ledger_at(journal).digest() == fold_canonical(journal).digest()


def test_a_session_opened_from_a_checkpoint_refolds_a_late_submit_of_an_earlier_start(
        tmp_path: Path) -> None:
    """A start recorded in its job's own stream before the checkpoint found no job; the
    submit arriving after the session opened lands before it: the job runs, in the live
    projection as in a fold (it stayed pending when the session refolded the account
    alone, not knowing of the start)."""
    from projections.session import LedgerSession

    journal = Journal(f"sqlite:///{tmp_path / 'j.db'}")
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 100})])
    journal.append([NewEvent("t", "job:j", "start", 100, {"job": "j"})])
    journal.append([NewEvent("h", "b", "grant", 110, {"account": "b", "amount": 5})])
    replay(journal, checkpoint=True)
    session = LedgerSession(journal)
    assert session.projector.position == journal.head()  # opened from the checkpoint
    journal.append([NewEvent("s", "a", "submit", 50,
                             {"account": "a", "job": "j", "cost": 10, "priority": 0})])
    with session.reading() as ledger:
        assert ledger.jobs["j"].state == "running"
        assert ledger.digest() == fold_canonical(journal).digest()


def _append_in_batches(journal: Any, events: list[Any], data: st.DataObject) -> None:
    """Append `events` in arrival order, in batches of sizes hypothesis draws."""
    from tests.replay.test_replay import _stream

    i = 0
    while i < len(events):
        size = data.draw(st.integers(1, 3), label="batch size")
        journal.append([NewEvent(event_id, _stream(payload), kind, time, payload)
                        for event_id, kind, time, payload in events[i:i + size]])
        i += size


@pytest.mark.parametrize("where", ["memory", "sqlite"])
@settings(max_examples=30, deadline=None)
@given(events=histories(), data=st.data())
def test_a_session_resumes_from_the_newest_checkpoint_though_late_events_land_before_it(
        where: str, events: list[Any], data: st.DataObject,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """A checkpoint that events recorded after it land before is passed over by a query,
    but it is still the state of every event up to its position: a session resumes from
    it and puts those events in their places. Against a fold: the same state on opening
    and after later arrivals; no revisions on opening (it reported nothing), and after
    it the revisions a replay reports for the events recorded since."""
    order = data.draw(st.permutations(events), label="arrival order")
    cut = data.draw(st.integers(0, len(order)), label="checkpointed prefix")
    opened_at = data.draw(st.integers(cut, len(order)), label="opened after")
    if where == "memory":
        journal: Any = MemoryJournal()
    else:
        journal = Journal(f"sqlite:///{tmp_path_factory.mktemp('resume') / 'j.db'}")
    try:
        _append_in_batches(journal, list(order[:cut]), data)
        replay(journal, checkpoint=True, checkpoint_every=data.draw(st.integers(1, 5)))
        _append_in_batches(journal, list(order[cut:opened_at]), data)
        newest = max((info.position for info in journal.snapshots(CHECKPOINT)), default=0)
        session = LedgerSession(journal)
        assert session.projector._started_at == newest
        assert session.digest() == fold_canonical(journal).digest()
        assert session.revisions == []
        head = journal.head()
        _append_in_batches(journal, list(order[opened_at:]), data)
        assert session.digest() == fold_canonical(journal).digest()
        assert session.revisions == [r for r in replay(journal).revisions
                                     if r.late_position > head]
    finally:
        journal.close()


@pytest.mark.parametrize("recorded", ["its own state's", "the journal's"])
def test_verify_fails_a_checkpoint_whose_state_is_not_the_journal_s(
        tmp_path: Path, recorded: str) -> None:
    """Bytes sealed and bound to this chain at this position, but holding the state of
    another history (a grant of 9, not 10): with its own state's digest recorded, replay
    does not reproduce it; with the journal's, the state does not match it. Either way
    `verify` fails at the checkpoint's position, for that reason."""
    url = f"sqlite:///{tmp_path / 'forged.db'}"
    _journal_with_history(url)
    journal = Journal(url)
    other = MemoryJournal()
    t = GPUCreditTracker(other, account="a")
    for i in range(20):
        t.grant(9 if i == 0 else 10, timestamp=2 * i, expiry=2 * i + 30)
        t.consume(7, timestamp=2 * i + 1)
    forged, real = fold_canonical(other), fold_canonical(journal)
    assert forged.digest() != real.digest()
    head = journal.head()
    blob = encode_checkpoint(forged, head, chain_hash_at(journal, head))
    digest = forged.digest() if recorded == "its own state's" else real.digest()
    journal.save_snapshot(CHECKPOINT, head, 2 * 19 + 1, digest, blob)
    report = verify(journal)
    assert not report.ok and report.first_bad_position == head
    says = {"its own state's": f"replay to position {head} gives digest",
            "the journal's": "state does not match its recorded digest"}[recorded]
    assert report.problem is not None and says in report.problem
    journal.close()


def test_jobs_are_listed_in_submit_order_from_a_checkpoint_as_from_a_fold() -> None:
    # A batch whose submit lands before a job known already is re-projected for its
    # account alone, which puts the new job after the known one in the projection's
    # index: a checkpoint of that projection must not make `jobs` list them in that order.
    def submit(event_id: str, job: str, time: int) -> NewEvent:
        return NewEvent(event_id, "a", "submit", time,
                        {"account": "a", "job": job, "cost": 0, "priority": 0})

    journal = MemoryJournal()
    journal.append([submit("s1", "recorded-first", 1)])
    journal.append([NewEvent("o", "a", "account", 0, {"account": "a"}),
                    submit("s2", "submitted-first", 0)])
    folded = [row.job for row in queries.jobs(journal).rows]
    assert folded == ["submitted-first", "recorded-first"]
    replay(journal, checkpoint=True)
    assert [row.job for row in queries.jobs(journal).rows] == folded  # the checkpoint's
    journal.append([NewEvent("u", "a", "consume", 2, {"account": "a", "amount": 1})])
    assert [row.job for row in queries.jobs(journal).rows] == folded  # folded on from it
    assert [row.job for row in queries.jobs(journal, as_known_at=3).rows] == folded
