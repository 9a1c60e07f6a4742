"""Questions answered from parts of a checkpoint give what a fold of the journal gives."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import queries
from projections.checkpoint import (
    CHECKPOINT,
    MAGIC,
    CheckpointError,
    chain_hash_at,
    decode_checkpoint,
    encode_checkpoint,
    latest_valid_checkpoint,
    open_checkpoint,
)
from projections.digest import canonical_job
from projections.figures import Figures
from projections.ledger import Ledger
from projections.partial import account_ledger_at
from projections.queries import to_dict
from projections.queries.explain import job_explanation
from projections.replay import excluded_as_known, fold_canonical, replay
from tests.arrivals import arrival
from tests.arrivals import histories as histories_in_files
from tests.replay.test_replay import ACCOUNTS, _journal, _stream, fold_on, histories

HASH = "ab" * 32


def _checkpointed(order: list[Any], cut: int, every: int) -> MemoryJournal:
    """A journal of `order[:cut]` with checkpoints, then the rest appended after them."""
    journal = _journal(list(order[:cut]))
    replay(journal, checkpoint=True, checkpoint_every=every)
    for event_id, kind, time, payload in order[cut:]:
        journal.append([NewEvent(event_id, _stream(payload), kind, time, payload)])
    return journal


def _drawn_checkpointed(events: list[Any], data: st.DataObject) -> MemoryJournal:
    """`_checkpointed` with a drawn arrival order, checkpointed prefix and spacing."""
    order = data.draw(st.permutations(events), label="arrival order")
    cut = data.draw(st.integers(0, len(order)), label="checkpointed prefix")
    return _checkpointed(list(order), cut, data.draw(st.integers(1, 5)))


@settings(max_examples=40, deadline=None)
@given(histories(), st.data())
def test_each_section_decodes_to_the_part_of_the_ledger_it_holds(
        events: list[Any], data: st.DataObject) -> None:
    timeline = sorted(events, key=lambda e: e[2])
    ledger = fold_on(Ledger(), timeline)
    view = open_checkpoint(encode_checkpoint(ledger, len(timeline), HASH),
                           position=len(timeline), chain_hash=HASH)
    assert view.names == list(ledger.accounts)
    for name, state in view.accounts().items():
        assert Ledger(accounts={name: state}).canonical()["accounts"] == \
            Ledger(accounts={name: ledger.accounts[name]}).canonical()["accounts"]
    columns, live = view.job_columns()
    assert columns["id"] == list(ledger.jobs) and live == list(ledger.live)
    assert columns["state"] == [j.state for j in ledger.jobs.values()]
    account = data.draw(st.sampled_from(ACCOUNTS))
    jobs, own_live = view.jobs(account)
    assert list(jobs) == [j for j, job in ledger.jobs.items() if job.account == account]
    assert all(jobs[j] is job for j, job in own_live.items())


@settings(max_examples=50, deadline=None)
@given(histories(), st.data())
def test_one_account_from_its_section_and_its_own_events_equals_a_fold(
        events: list[Any], data: st.DataObject) -> None:
    journal = _drawn_checkpointed(events, data)
    position = data.draw(st.integers(0, journal.head()), label="as known at")
    time = data.draw(st.none() | st.integers(0, len(events) + 1), label="at")
    want = fold_canonical(journal, to_position=position, to_time=time)
    for account in ACCOUNTS:
        got = account_ledger_at(journal, account, to_position=position, to_time=time)
        if got is None:
            continue
        assert set(got.accounts) <= {account}
        assert (got.canonical()["accounts"].get(account)
                == want.canonical()["accounts"].get(account))
        mine = {j: canonical_job(want, j) for j, job in want.jobs.items()
                if job.account == account}
        # Its jobs are read only when an event after the checkpoint needs them.
        assert not got.jobs or {j: canonical_job(got, j) for j in got.jobs} == mine


@settings(max_examples=150, deadline=None)
@given(histories(), st.data())
def test_one_account_from_a_checkpoint_leaves_out_what_later_reversals_take_out(
        events: list[Any], data: st.DataObject) -> None:
    """A reversal recorded after the checkpoint takes its event out at every time, also
    one timed after the time asked (a balance at T once took the reversed grant)."""
    journal = _drawn_checkpointed(events, data)
    for n in range(data.draw(st.integers(1, 3), label="reversals") if events else 0):
        target = data.draw(st.sampled_from(list(journal.read())), label="reversed")
        when = data.draw(st.integers(0, 2 * len(events) + 5), label="reversal time")
        journal.append([NewEvent(f"rev{n}", target.stream, "reverse", when,
                                 {"event": target.id, "reason": "wrong"})])
    time = data.draw(st.integers(0, len(events) + 1), label="at")
    want = fold_canonical(journal, to_time=time)
    for account in ACCOUNTS:
        got = account_ledger_at(journal, account, to_position=journal.head(), to_time=time)
        if got is not None:
            assert (got.canonical()["accounts"].get(account)
                    == want.canonical()["accounts"].get(account))
        if account in want.accounts:
            figures = queries.balance(journal, account, at=time).figures
            assert figures == Figures.of(want.accounts[account], time)


@settings(max_examples=30, deadline=None)
@given(histories(), st.data())
def test_reports_and_explanations_from_checkpoints_equal_those_from_a_fold(
        events: list[Any], data: st.DataObject) -> None:
    journal = _drawn_checkpointed(events, data)
    plain = _journal([])  # the same events, no checkpoint: every answer is a fold
    for rec in journal.read(order="position"):
        plain.append([NewEvent(rec.id, rec.stream, rec.type, rec.time, rec.payload)])
    at = data.draw(st.none() | st.integers(0, len(events) + 1), label="at")
    for ask in (lambda j: queries.accounts(j, at=at), lambda j: queries.expiring(j, at=at)):
        assert to_dict(ask(journal)) == to_dict(ask(plain))
    for state in (None, "pending"):
        # The same jobs with the same figures; their order may differ: a projection lists a
        # job where it became known, a fold where it was submitted (docs/architecture.md,
        # "The order of the jobs report").
        got, want = (to_dict(queries.jobs(j, state=state)) for j in (journal, plain))
        assert sorted(got.pop("jobs"), key=_by_job) == sorted(want.pop("jobs"), key=_by_job)
        assert got == want
    for account in ACCOUNTS:
        try:
            want = to_dict(queries.balance(plain, account, at=at))
        except queries.NothingRecorded:
            continue
        except LookupError:
            with pytest.raises(LookupError):
                queries.balance(journal, account, at=at)
            continue
        assert to_dict(queries.balance(journal, account, at=at)) == want
        try:
            explained = to_dict(queries.explain_account(plain, account))
        except LookupError:
            continue
        assert to_dict(queries.explain_account(journal, account)) == explained
    for job in sorted({p["job"] for _, _, _, p in events if "job" in p}):
        head = journal.head()
        whole = job_explanation(journal.read(order="canonical"), job,
                                excluded=excluded_as_known(journal, head))
        assert to_dict(queries.explain_job(journal, job)) == to_dict(whole)


def _by_job(row: dict[str, Any]) -> str:
    return str(row["job"])


def _with_version(blob: bytes, version: int) -> bytes:
    """`blob` re-labelled as another format version, its own hash made to match."""
    end = blob.index(b"\n", len(MAGIC))
    header = orjson.loads(blob[len(MAGIC):end])
    body = blob[end + 1:]
    header.pop("sha256")
    header["version"] = version
    plain = orjson.dumps(header, option=orjson.OPT_SORT_KEYS)
    header["sha256"] = hashlib.sha256(plain + b"\n" + body).hexdigest()
    return MAGIC + orjson.dumps(header, option=orjson.OPT_SORT_KEYS) + b"\n" + body


def test_a_checkpoint_of_an_older_format_version_is_ignored_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    journal = _journal([("e1", "grant", 5, {"account": "a", "amount": 3}),
                        ("e2", "consume", 6, {"account": "a", "amount": 1})])
    replay(journal, checkpoint=True)
    (info,) = journal.snapshots(CHECKPOINT)
    old = _with_version(journal.load_snapshot(info.id), 1)
    with pytest.raises(CheckpointError, match="version 1"):
        decode_checkpoint(old, position=info.position,
                          chain_hash=chain_hash_at(journal, info.position))
    journal.drop_snapshots(CHECKPOINT)
    journal.save_snapshot(CHECKPOINT, info.position, info.event_time, info.digest, old)
    with caplog.at_level(logging.WARNING, logger="projections.checkpoint"):
        assert latest_valid_checkpoint(journal) is None
        assert queries.balance(journal, "a").figures.balance == 2
    assert any("ignored" in r.getMessage() and "version 1" in r.getMessage()
               for r in caplog.records)


@pytest.mark.parametrize("checkpoint_after", [2, 4])
def test_a_reversal_in_a_jobs_own_stream_timed_after_the_time_asked_is_not_missed(
        checkpoint_after: int) -> None:
    # The job's steps sit in a stream of their own (`job:j1`, as an import files steps
    # whose submit it does not know), and so does the reversal of its completion, timed
    # after the time asked: the completion is out at every time, so nothing is charged.
    events = [NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 10}),
              NewEvent("s", "a", "submit", 1, {"account": "a", "job": "j1", "cost": 5,
                                               "priority": 0}),
              NewEvent("st", "job:j1", "start", 2, {"job": "j1"}),
              NewEvent("c", "job:j1", "complete", 3, {"job": "j1", "success": True}),
              NewEvent("r", "job:j1", "reverse", 10, {"event": "c", "reason": "wrong"})]
    journal = MemoryJournal()
    for n, event in enumerate(events, start=1):
        journal.append([event])
        if n == checkpoint_after:
            replay(journal, checkpoint=True)
    want = Figures.of(fold_canonical(journal, to_time=5).accounts["a"], 5)
    assert (want.balance, want.reserved) == (10, 5)  # running, holding its cost
    assert queries.balance(journal, "a", at=5).figures == want


def test_a_job_id_another_account_submitted_first_since_the_checkpoint_is_not_the_accounts(
        ) -> None:
    # b submits j1 after the checkpoint, then a submits j1 later on the timeline: a's is
    # a second submit of the id (an anomaly), which holds none of a's credits.
    journal = MemoryJournal()
    journal.append([NewEvent("ga", "a", "grant", 0, {"account": "a", "amount": 10}),
                    NewEvent("gb", "b", "grant", 0, {"account": "b", "amount": 10})])
    replay(journal, checkpoint=True)
    journal.append([NewEvent("sb", "b", "submit", 1, {"account": "b", "job": "j1", "cost": 3,
                                                      "priority": 0})])
    journal.append([NewEvent("sa", "a", "submit", 2, {"account": "a", "job": "j1", "cost": 5,
                                                      "priority": 0})])
    want = Figures.of(fold_canonical(journal).accounts["a"], 2)
    assert (want.balance, want.reserved) == (10, 0)
    assert queries.balance(journal, "a", at=2).figures == want


@pytest.mark.parametrize("timed", [1, 5])
def test_a_reversal_since_the_checkpoint_bringing_back_another_accounts_submit_of_the_id_is_seen(
        timed: int) -> None:
    # b's submit of j1 was reversed before a submitted j1; after the checkpoint, the
    # reversal is reversed (in b's stream): b's submit is back, first on the timeline,
    # and a's is a second submit of the id, which holds nothing (at any reversal time).
    journal = MemoryJournal()
    journal.append([NewEvent("ga", "a", "grant", 0, {"account": "a", "amount": 10}),
                    NewEvent("gb", "b", "grant", 0, {"account": "b", "amount": 10})])
    journal.append([NewEvent("sb", "b", "submit", 1, {"account": "b", "job": "j1", "cost": 3,
                                                      "priority": 0})])
    journal.append([NewEvent("r1", "b", "reverse", 1, {"event": "sb", "reason": "wrong"})])
    journal.append([NewEvent("sa", "a", "submit", 2, {"account": "a", "job": "j1", "cost": 5,
                                                      "priority": 0})])
    replay(journal, checkpoint=True)
    journal.append([NewEvent("r2", "b", "reverse", timed, {"event": "r1", "reason": "right"})])
    want = Figures.of(fold_canonical(journal, to_time=9).accounts["a"], 9)
    assert (want.balance, want.reserved) == (10, 0)
    assert queries.balance(journal, "a", at=9).figures == want


@pytest.mark.parametrize(("since", "reserved"), [
    (None, 0),
    ({"type": "consume", "account": "a", "amount": 1, "time": 4}, 0),
    ({"type": "submit", "account": "a", "job": "k", "cost": 2, "priority": 1, "time": 4}, 2),
], ids=["nothing of its own since", "a usage report since", "a submit since"])
def test_a_step_of_the_accounts_job_filed_in_another_accounts_stream_is_seen(
        since: dict[str, Any] | None, reserved: int) -> None:
    # a's job j holds 3 at the checkpoint. A file brings b's submit of j (a second submit
    # of the id, an anomaly) and a cancel of j: an import files the cancel with the submit
    # it holds, in b's stream (docs/semantics.md, "Import ids"), yet it is a's job's and
    # releases a's 3. (`since`: what a's own stream gains after it.)
    from projections.importing import import_file

    def imported(*lines: dict[str, Any]) -> None:
        import_file(journal, b"\n".join(orjson.dumps(line) for line in lines), "f.jsonl")

    journal = MemoryJournal()
    imported({"type": "grant", "account": "a", "amount": 10, "time": 0},
             {"type": "grant", "account": "b", "amount": 10, "time": 0},
             {"type": "submit", "account": "a", "job": "j", "cost": 3, "priority": 1,
              "time": 1})
    replay(journal, checkpoint=True)
    imported({"type": "submit", "account": "b", "job": "j", "cost": 4, "priority": 1,
              "time": 2},
             {"type": "cancel", "job": "j", "time": 3, "id": "stop"})
    if since is not None:
        imported(since)
    assert journal.get("stop").stream == "b"
    want = Figures.of(fold_canonical(journal).accounts["a"], 4)
    assert want.reserved == reserved
    assert queries.balance(journal, "a", at=4).figures == want


@settings(max_examples=150, deadline=None)
@given(histories_in_files(), st.data())
def test_one_accounts_balance_from_a_checkpoint_is_its_row_of_accounts(
        events: list[dict[str, Any]], data: st.DataObject) -> None:
    """Imported in batches, as the ledger files them (both accounts often submit one job
    id, a job's steps filed with whichever submit was known), with a checkpoint after
    a drawn batch: each account's balance, read from its checkpoint section and its own
    events, is its row of `accounts` and its statement's closing figures."""
    from projections.importing import import_file

    batches = arrival(events, data, "files")
    journal = MemoryJournal()
    cut = data.draw(st.integers(1, len(batches)), label="checkpoint after batch")
    for n, batch in enumerate(batches, start=1):
        import_file(journal, b"\n".join(orjson.dumps(line) for line in batch), "f.jsonl")
        if n == cut:
            replay(journal, checkpoint=True)
    for row in queries.accounts(journal).rows:
        figures = queries.balance(journal, row.account).figures
        assert figures == row.figures, row.account
        assert (figures.balance, figures.reserved) == queries.statement(
            journal, row.account).closing
