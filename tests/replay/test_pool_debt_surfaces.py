"""Pools and debt, differentially: a linear model of per-pool credits and debt
(`tests.projections.pool_debt_model`) against every answering surface, as known at any
position and at any event time, from journals with and without checkpoints.

The journals drawn spread credits and usage over several pools (general credits named
and unnamed, pools sorting before and after "general", one differing from it only in
case), run them into debt and pay it with grants of the pool, general grants and
credit adjustments, and correct them with voids (some before their grant) and
reversals (of reversals too), most of it arriving late and in batches.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from eventstore.interface import JournalLike
from projections import GPUCreditTracker, importing
from projections.events import from_payload, to_payload
from projections.figures import Figures
from projections.invariants import violations
from projections.policy import Policy
from projections.queries import accounts, balance, explain_account, explain_job, statement
from projections.queries.history import account_history
from projections.queries.whatif import fold_under
from projections.replay import fold_canonical, replay
from tests.arrivals import in_batches
from tests.projections import pool_debt_model as model

ACCOUNTS = ("a", "b")
POOLS = (None, "general", "a100", "h100", "General")
Row = tuple[str, str, int, dict[str, Any], str]  # id, type, time, payload, stream


CREDIT_KINDS = ("grant", "grant", "consume", "consume", "consume", "adjust", "void", "reverse")
JOB_KINDS = ("account", "submit", "submit", "start", "start", "complete", "cancel")


@st.composite
def recorded(draw: st.DrawFn, *, jobs: bool = False) -> list[list[Row]]:
    """Grants, usage, adjustments, voids and reversals in arrival order, cut into the
    batches they were appended in; times in a small range, so most arrive late. `jobs`:
    jobs in every pool too (holding credits, giving them back to pay debt), caps and
    refills."""
    rows: list[Row] = []
    grants: list[tuple[str, str]] = []
    submitted: list[tuple[str, str]] = []
    kinds = CREDIT_KINDS + JOB_KINDS if jobs else CREDIT_KINDS
    for i in range(draw(st.integers(1, 30 if jobs else 24))):
        kind = draw(st.sampled_from(kinds))
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        time = draw(st.integers(0, 12))
        stream = account
        payload: dict[str, Any]
        if kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool,
                       "expiry": draw(st.sampled_from([None, time + 1, time + 4])),
                       "priority": draw(st.sampled_from([50, 50, 10, 90]))}
            grants.append((f"e{i}", account))
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool}
        elif kind == "adjust":
            payload = {"account": account, "amount": draw(st.integers(-12, 12).filter(bool)),
                       "reason": "fix", "pool": pool}
        elif kind == "void":
            if not grants:
                continue
            grant, stream = draw(st.sampled_from(grants))
            payload = {"grant": grant}
        elif kind == "account":
            payload = {"account": account, "max_running": draw(st.sampled_from([None, 1]))}
            if draw(st.booleans()):
                # A refill: it pays debt between events, general first, then each pool's.
                payload |= {"refill_rate": draw(st.sampled_from([1800, 3600, 7200])),
                            "refill_cap": draw(st.integers(1, 12))}
        elif kind == "submit":
            submitted.append((f"j{i}", account))
            payload = {"account": account, "job": f"j{i}", "cost": draw(st.integers(0, 15)),
                       "priority": draw(st.integers(0, 2)), "pool": pool}
        elif kind in ("start", "complete", "cancel"):
            if not submitted:
                continue
            job, stream = draw(st.sampled_from(submitted))
            payload = {"job": job}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
                payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
        else:
            if not rows:
                continue
            target = draw(st.sampled_from(rows))
            payload, stream = {"event": target[0], "reason": "wrong"}, target[4]
            time = draw(st.sampled_from([target[2], time]))
        rows.append((f"e{i}", kind, time, to_payload(from_payload(kind, payload)), stream))
    sizes = draw(st.lists(st.sampled_from([1, 1, 2, 3]), min_size=len(rows),
                          max_size=len(rows)))
    return in_batches(rows, sizes)


def append(journal: JournalLike, batches: list[list[Row]]) -> JournalLike:
    for batch in batches:
        journal.append([NewEvent(event_id, stream, kind, time, payload)
                        for event_id, kind, time, payload, stream in batch])
    return journal


def _events(batches: list[list[Row]], position: int) -> list[model.Event]:
    rows = [row for batch in batches for row in batch][:position]
    return [(event_id, kind, time, payload) for event_id, kind, time, payload, _ in rows]


def _check(journal: JournalLike, batches: list[list[Row]], position: int, at: int) -> None:
    want = model.fold(_events(batches, position), at)
    folded = fold_canonical(journal, to_position=position, to_time=at)
    report = accounts(journal, at=at, as_known_at=position)
    rows = {row.account: row.figures for row in report.rows}
    for account in ACCOUNTS:
        expected = want.get(account)
        if expected is None:
            continue
        label = (account, at, position)
        state = folded.accounts.get(account)
        figures = Figures.of(state, at)
        assert (figures.pools, figures.debt) == (expected.pools,
                                                  sum(expected.debt.values())), label
        by_pool = Figures.by_pool(state, at)
        assert {p: f.debt for p, f in by_pool.items() if f.debt} == expected.debt, label
        assert balance(journal, account, at=at, as_known_at=position).figures == figures, label
        assert rows.get(account) == figures, label
        tracker = GPUCreditTracker(journal, account)
        assert tracker.get_balance(at, as_known_at=position) == expected.balance, label
        for pool, amount in expected.pools.items():
            assert tracker.get_balance(at, pool=pool, as_known_at=position) == amount, label
        whole = statement(journal, account, to_time=at, as_known_at=position)
        assert whole.subtotals.consistent, (label, whole.subtotals.problems)
        assert whole.closing.balance == expected.balance, label
        assert sum(line.debt_created - line.debt_paid
                   for line in whole.lines) == sum(expected.debt.values()), label
        for line in whole.lines:
            if line.debt_created:
                assert line.pool is not None, line
        start = max(0, at - 4)
        part = statement(journal, account, from_time=start, to_time=at, as_known_at=position)
        assert part.subtotals.consistent, (label, part.subtotals.problems)
        opening = model.fold(_events(batches, position), start - 1).get(account)
        assert part.opening is not None
        opened_debt = sum(opening.debt.values()) if opening is not None else 0
        assert opened_debt + sum(line.debt_created - line.debt_paid
                                 for line in part.lines) == sum(expected.debt.values()), label


@settings(max_examples=75, deadline=None)
@given(recorded().filter(bool), st.data())
def test_every_surface_is_the_model_as_known_at_any_position(batches: list[list[Row]],
                                                             data: st.DataObject) -> None:
    note(f"batches: {batches!r}")
    journal = append(MemoryJournal(), batches)
    position = data.draw(st.integers(1, journal.head()), label="as known at")
    at = data.draw(st.integers(-1, 16), label="at")
    _check(journal, batches, position, at)
    _check(journal, batches, journal.head(), at)


@settings(max_examples=50, deadline=None)
@given(recorded().filter(bool), st.data())
def test_answers_from_checkpoints_are_the_model(batches: list[list[Row]],
                                                data: st.DataObject) -> None:
    note(f"batches: {batches!r}")
    cut = data.draw(st.integers(1, len(batches)), label="checkpointed batches")
    journal = append(MemoryJournal(), batches[:cut])
    replay(journal, checkpoint=True, checkpoint_every=data.draw(st.integers(1, 4)))
    append(journal, batches[cut:])
    position = data.draw(st.integers(1, journal.head()), label="as known at")
    for at in (data.draw(st.integers(-1, 16), label="at"), journal.max_time() or 0):
        _check(journal, batches, position, at)
        _check(journal, batches, journal.head(), at)


@settings(max_examples=40, deadline=None)
@given(recorded().filter(bool))
def test_explanation_accounts_for_every_debt_paid(batches: list[list[Row]]) -> None:
    """The explanation's debt per pool is the model's, and what each grant or credit
    paid of debt on arrival is what its statement line says it paid."""
    note(f"batches: {batches!r}")
    journal = append(MemoryJournal(), batches)
    latest = journal.max_time() or 0
    want = model.fold(_events(batches, journal.head()), latest)
    for account in ACCOUNTS:
        if account not in want:
            continue
        explanation = explain_account(journal, account)
        assert explanation.figures.pools == want[account].pools, account
        assert explanation.debt == want[account].debt, account
        paid = {g.grant_id: g.debt_paid for g in explanation.grants}
        for line in statement(journal, account).lines:
            if line.type in ("grant", "adjust") and line.status == "ok" and line.change > 0:
                assert paid[line.event_id] == line.debt_paid, line


@settings(max_examples=50, deadline=None)
@given(recorded().filter(bool), st.data())
def test_live_projections_follow_the_model_batch_by_batch(batches: list[list[Row]],
                                                          data: st.DataObject) -> None:
    """Trackers open before the events arrive and re-project each late batch; a tracker
    opened after a checkpoint saved mid-history resumes from it. After every batch each
    answers what the model says of the journal then."""
    note(f"batches: {batches!r}")
    for i, journal, at, trackers in _arriving(batches, data):
        want = model.fold(_events(batches, journal.head()), at)
        for account in ACCOUNTS:
            expected = want.get(account)
            pools = expected.pools if expected is not None else {model.GENERAL: 0}
            for tracker in trackers[account]:
                assert tracker.get_balance(at) == sum(pools.values()), (account, at, i)
                for pool, amount in pools.items():
                    assert tracker.get_balance(at, pool=pool) == amount, (account, pool, at)
                assert tracker.pool_balances(at) == pools, (account, at, i)


def _arriving(batches: list[list[Row]], data: st.DataObject
              ) -> Iterator[tuple[int, MemoryJournal, int, dict[str, list[GPUCreditTracker]]]]:
    """The batches appended one by one to a journal that trackers of every account have
    open from the start; after a drawn batch a checkpoint is saved and another tracker
    of each account opened on it. After each batch: (its number, the journal, a drawn
    time to ask at, each account's trackers)."""
    journal = MemoryJournal()
    trackers = {account: [GPUCreditTracker(journal, account)] for account in ACCOUNTS}
    saved_after = data.draw(st.integers(0, len(batches)), label="checkpoint after batch")
    for i, batch in enumerate(batches, start=1):
        append(journal, [batch])
        if i == saved_after:
            replay(journal, checkpoint=True, checkpoint_every=data.draw(
                st.integers(1, 4), label="every"))
            for account in ACCOUNTS:
                trackers[account].append(GPUCreditTracker(journal, account))
        yield i, journal, data.draw(st.integers(-1, 16), label="at"), trackers


def _last_of_each_time(lines: list[Any]) -> list[Any]:
    return [line for i, line in enumerate(lines)
            if i + 1 == len(lines) or lines[i + 1].time != line.time]


@settings(max_examples=40, deadline=None)
@given(recorded(jobs=True).filter(bool), st.data())
def test_jobs_in_pools_every_surface_is_the_fold(batches: list[list[Row]],
                                                 data: st.DataObject) -> None:
    """With jobs holding credits of several pools and giving them back (paying debt on the
    way), each surface agrees with a plain fold: the explanation accounts for every
    credit of every grant and for the debt per pool, the statement's debt created less
    paid is the debt, pools add up, and a journal exported and imported, checkpointed
    or folded live answers the same."""
    note(f"batches: {batches!r}")
    journal = append(MemoryJournal(), batches)
    folded = fold_canonical(journal)
    assert not violations(folded), violations(folded)
    latest = journal.max_time() or 0
    for account, state in folded.accounts.items():
        figures = Figures.of(state, latest)
        by_pool = Figures.by_pool(state, latest)
        assert sum(f.balance for f in by_pool.values()) == figures.balance
        assert sum(f.reserved for f in by_pool.values()) == figures.reserved
        assert sum(f.debt for f in by_pool.values()) == figures.debt
        explanation = explain_account(journal, account)
        assert explanation.figures == figures, account
        assert explanation.debt == {p: d for p, d in sorted(state.debt_at(latest).items())
                                    if d}
        for g in explanation.grants:
            if g.voided_at is None:
                assert g.amount == g.debt_paid + g.used + g.expired + sum(
                    held for _, held in g.held) + g.remaining, g
        # What the refill accrued since the account's last event pays as well, by then.
        accrued, _ = state.refill_settlement(latest)
        assert sum(g.debt_paid for g in explanation.grants) == \
            state.book.totals.debt_paid + sum(accrued.values())
        lines = statement(journal, account).lines
        assert sum(line.debt_created - line.debt_paid for line in lines) == figures.debt
        for line in _last_of_each_time(lines):
            if line.type not in ("expire", "void", "reverse") and line.status not in (
                    "reversed", "anomaly"):
                at = Figures.of(fold_canonical(journal, to_time=line.time).accounts.get(
                    account), line.time)
                assert line.balance == at.balance, line
        # The web view's timeline: each point's pools are the fold's there.
        history = account_history(journal.read(), account, at=latest, as_known_at=journal.head())
        for point in _last_of_each_time(history.timeline):
            at = Figures.of(fold_canonical(journal, to_time=point.time).accounts.get(account),
                            point.time)
            assert (point.pools, point.held, point.debt) == (at.pools, at.reserved,
                                                             at.debt), point
    for job_id, job in folded.jobs.items():
        if job.charge:
            explained = explain_job(journal, job_id)
            assert sum(a for _, a in explained.paid_by) == job.charge, explained
    # Export and import, both formats: the same state, the same figures per pool.
    for write, fmt in ((importing.write_jsonl, "jsonl"), (importing.write_csv, "csv")):
        out = io.StringIO()
        write(importing.export_records(journal), out)
        copy = MemoryJournal()
        importing.import_file(copy, out.getvalue().encode(), "export", fmt=fmt)
        assert fold_canonical(copy).digest() == folded.digest(), fmt
        for account in folded.accounts:
            assert balance(copy, account).figures == Figures.of(
                folded.accounts[account], latest), (fmt, account)
    # Whatif by expiry alone: the same events with every grant at the default priority.
    flat = [[(event_id, kind, time, {k: v for k, v in payload.items() if k != "priority"}
              if kind == "grant" else payload, stream)
             for event_id, kind, time, payload, stream in batch] for batch in batches]
    under = fold_under(journal, Policy(grant_order="expiry"), position=journal.head(),
                       excluded=folded.excluded)
    same = fold_canonical(append(MemoryJournal(), flat))
    for account in folded.accounts:
        assert Figures.of(under.accounts.get(account), latest) == \
            Figures.of(same.accounts.get(account), latest), account
    # A checkpoint mid-history: the reports over every account read from it.
    cut = data.draw(st.integers(1, len(batches)), label="checkpointed batches")
    checkpointed = append(MemoryJournal(), batches[:cut])
    replay(checkpointed, checkpoint=True, checkpoint_every=data.draw(st.integers(1, 4)))
    append(checkpointed, batches[cut:])
    replay(checkpointed, checkpoint=True, checkpoint_every=data.draw(st.integers(1, 4)))
    for at in (data.draw(st.integers(-1, 16), label="at"), latest):
        plain = fold_canonical(journal, to_time=at)
        assert {row.account: row.figures for row in accounts(checkpointed, at=at).rows} == {
            name: Figures.of(state, at) for name, state in plain.accounts.items()}, at
        for account in plain.accounts:
            assert balance(checkpointed, account, at=at).figures == Figures.of(
                plain.accounts[account], at), (account, at)
            assert explain_account(checkpointed, account).debt == explain_account(
                journal, account).debt


@settings(max_examples=30, deadline=None)
@given(recorded(jobs=True).filter(bool), st.data())
def test_live_projections_with_jobs_in_pools_are_the_fold(batches: list[list[Row]],
                                                          data: st.DataObject) -> None:
    """Jobs holding and giving back credits of several pools, late: trackers open while
    the batches arrive, and one opened on a checkpoint saved mid-history, answer per
    pool what a plain fold of the journal then does."""
    note(f"batches: {batches!r}")
    for i, journal, at, trackers in _arriving(batches, data):
        folded = fold_canonical(journal, to_time=at)
        for account in ACCOUNTS:
            want = Figures.of(folded.accounts.get(account), at)
            for tracker in trackers[account]:
                assert tracker.get_balance(at) == want.balance, (account, at, i)
                for pool, amount in want.pools.items():
                    assert tracker.get_balance(at, pool=pool) == amount, (account, pool, at)
        digest = fold_canonical(journal).digest()
        for tracker in trackers["a"]:
            assert tracker._session.digest() == digest, i


@settings(max_examples=40, deadline=None)
@given(recorded().filter(bool))
def test_revisions_of_debt_are_what_each_batch_changed_in_the_model(
        batches: list[list[Row]]) -> None:
    """A late batch revises the debt a usage report or a debit was reported to leave
    exactly where the model's debt right after it changed (a reversed one reports
    none), whether the debt was made or paid in its own pool or another."""
    note(f"batches: {batches!r}")
    journal = append(MemoryJournal(), batches)
    want: set[tuple[int, str, int | None, int | None]] = set()
    batch_of: dict[int, int] = {}
    end = 0
    before = model.debt_after([])
    for n, batch in enumerate(batches):
        known = [event_id for event_id, _, _, _ in _events(batches, end)]
        batch_of.update(dict.fromkeys(range(end + 1, end + len(batch) + 1), n))
        end += len(batch)
        after = model.debt_after(_events(batches, end))
        want |= {(n, event_id, before.get(event_id), after.get(event_id)) for event_id in known
                 if before.get(event_id) != after.get(event_id)}
        before = after
    got = {(batch_of[r.late_position], r.event_id, r.before.get("debt_after"),
            r.after.get("debt_after")) for r in replay(journal).revisions
           if r.before.get("debt_after") != r.after.get("debt_after")}
    assert got == want
