"""Accounts with a refill, differentially: every answering surface agrees with a plain
fold of the journal (`fold_canonical`, `Figures.of`), between events too, where the
bucket has accrued without an event to show it.

The journals drawn open accounts with a refill (some untimed, full from the start; some
turning it off, or changing its rate and cap), run them into debt (general and per
pool), hold and release credits in jobs above a lowered cap, and record most events late
and some reversed or voided, with times wide enough for a bucket to fill. Surfaces:
`statement` (its lines, the opening of a statement from a time, debt created less paid),
the explanation (each grant's credits, the bucket's included, accounted for), the web
view's one-fold history (the statement, the explanation and the timeline, kept and
extended as the head moves, and an event's own lines), export and import in both
formats, `whatif`, answers after a checkpoint, and answers as known at a position.
"""

from __future__ import annotations

import io
from typing import Any

from hypothesis import given, note, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal
from eventstore.interface import JournalLike
from projections import importing
from projections.events import TIMELINE_START, from_payload, to_payload
from projections.figures import Figures
from projections.policy import Policy
from projections.queries import (
    accounts,
    balance,
    expiring,
    explain_account,
    jobs,
    statement,
    to_dict,
)
from projections.queries.history import account_history, event_lines, extended_history, lines_of
from projections.queries.whatif import fold_under, whatif
from projections.replay import fold_canonical, replay
from tests.arrivals import in_batches
from tests.replay.test_known_at_differential import (
    Row,
    append,
    assert_agrees,
    without_recorded_at,
)

ACCOUNTS = ("a", "b")
POOLS = (None, "h100")
RATES = (1000, 1800, 3600, 7200)  # credits per hour: a credit every 3.6 s to two a second
UNTIMED = TIMELINE_START  # an `account` line without a time

# Lines no event of the account writes (or whose event did not touch it): the refill
# accrued by their time shows on the account's next event's line, not on theirs.
UNTOUCHED_TYPES = ("expire", "void", "reverse")
UNTOUCHED_STATUSES = ("reversed", "anomaly")


@st.composite
def recorded(draw: st.DrawFn, *, elsewhere: bool = False) -> list[list[Row]]:
    """Events in arrival order, cut into batches. `elsewhere`: some job steps filed in a
    stream of the job's own, and some job ids two submits use."""
    rows: list[Row] = []
    grants: list[tuple[str, str]] = []
    jobs_: list[tuple[str, str]] = []
    for account in ACCOUNTS:
        if draw(st.booleans()):
            rows.append((f"o{account}", "account", draw(st.sampled_from([UNTIMED, 0, 7, 20])),
                         {"account": account, "refill_rate": draw(st.sampled_from(RATES)),
                          "refill_cap": draw(st.integers(1, 15))}, account))
    for i in range(draw(st.integers(1, 20))):
        kind = draw(st.sampled_from(
            ["account", "grant", "consume", "consume", "adjust", "void", "reverse",
             "submit", "submit", "start", "start", "complete", "cancel"]))
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        time = draw(st.integers(0, 40))
        stream = account
        payload: dict[str, Any]
        if kind == "account":
            if draw(st.integers(0, 3)) == 0:
                time = UNTIMED  # a refill full from the start
            payload = {"account": account, "max_running": draw(st.sampled_from([None, 1]))}
            if draw(st.integers(0, 3)):
                payload |= {"refill_rate": draw(st.sampled_from(RATES)),
                            "refill_cap": draw(st.integers(1, 15))}
        elif kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 20)), "pool": pool,
                       "expiry": draw(st.sampled_from([None, time + 1, time + 5])),
                       "priority": draw(st.sampled_from([50, 50, 10, 90]))}
            grants.append((f"e{i}", account))
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 30)), "pool": pool}
        elif kind == "adjust":
            payload = {"account": account, "amount": draw(st.integers(-15, 15).filter(bool)),
                       "reason": "fix", "pool": pool}
        elif kind == "void":
            if not grants:
                continue
            grant, stream = draw(st.sampled_from(grants))
            payload = {"grant": grant}
        elif kind == "reverse":
            if not rows:
                continue
            target = draw(st.sampled_from(rows))
            payload, stream = {"event": target[0], "reason": "wrong"}, target[4]
            time = draw(st.sampled_from([target[2], time]))
        elif kind == "submit":
            job = draw(st.sampled_from([f"j{i}"] * 3 + [j for j, _ in jobs_[:2]])) \
                if elsewhere else f"j{i}"
            jobs_.append((job, account))
            payload = {"account": account, "job": job, "cost": draw(st.integers(0, 15)),
                       "priority": draw(st.integers(0, 2)), "pool": pool}
        elif not jobs_:
            continue
        else:
            job, stream = draw(st.sampled_from(jobs_))
            if elsewhere:
                stream = draw(st.sampled_from([stream, f"job:{job}"]))
            payload = {"job": job}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
                payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
        rows.append((f"e{i}", kind, time, to_payload(from_payload(kind, payload)), stream))
    sizes = draw(st.lists(st.sampled_from([1, 1, 2]), min_size=len(rows), max_size=len(rows)))
    return in_batches(rows, sizes)


def _plain(answer: Any) -> Any:
    return without_recorded_at(to_dict(answer))


def _figures(journal: JournalLike, account: str, at: int, *, before: bool = False) -> Figures:
    """A plain fold's figures at `at` (`before`: of the events before `at` only)."""
    folded = fold_canonical(journal, to_time=at - 1 if before else at)
    return Figures.of(folded.accounts.get(account), at)


def _last_of_each_time(lines: list[Any]) -> list[Any]:
    return [line for i, line in enumerate(lines)
            if i + 1 == len(lines) or lines[i + 1].time != line.time]


@settings(max_examples=30, deadline=None)
@given(recorded(elsewhere=True), st.data())
def test_statement_lines_opening_and_debt_are_the_folds(batches: list[list[Row]],
                                                        data: st.DataObject) -> None:
    note(f"batches: {batches!r}")
    journal = append(MemoryJournal(), batches)
    for account in ACCOUNTS:
        if account not in fold_canonical(journal).accounts:
            continue
        to = data.draw(st.integers(0, 50), label="to")
        whole = statement(journal, account, to_time=to)
        assert whole.subtotals.consistent, whole.subtotals.problems
        for line in _last_of_each_time(whole.lines):
            if line.type not in UNTOUCHED_TYPES and line.status not in UNTOUCHED_STATUSES:
                assert line.balance == _figures(journal, account, line.time).balance, line
        debt = _figures(journal, account, to).debt
        assert sum(line.debt_created - line.debt_paid for line in whole.lines) == debt
        start = data.draw(st.integers(0, to), label="from")
        part = statement(journal, account, from_time=start, to_time=to)
        assert part.subtotals.consistent, part.subtotals.problems
        assert part.opening is not None
        opening = _figures(journal, account, start, before=True)
        if not any(line.time == start and line.type in UNTOUCHED_TYPES for line in part.lines):
            # The balance before the events at `start` (and before what expires then),
            # with the refill accrued by then.
            assert part.opening.balance == opening.balance, (part.opening, opening)
        assert opening.debt + sum(line.debt_created - line.debt_paid
                                  for line in part.lines) == debt
        for line in _last_of_each_time(part.lines):
            if line.type not in UNTOUCHED_TYPES and line.status not in UNTOUCHED_STATUSES:
                assert line.balance == _figures(journal, account, line.time).balance, line


@settings(max_examples=20, deadline=None)
@given(recorded(), st.data())
def test_history_explanation_and_timeline_are_the_folds(batches: list[list[Row]],
                                                        data: st.DataObject) -> None:
    note(f"batches: {batches!r}")
    journal = append(MemoryJournal(), batches)
    head, latest = journal.head(), journal.max_time()
    for account in ACCOUNTS:
        if account not in fold_canonical(journal).accounts:
            continue
        want = _plain(statement(journal, account))
        explanation = explain_account(journal, account)
        assert explanation.figures == _figures(journal, account, latest)
        state = fold_canonical(journal).accounts[account]
        for g in explanation.grants:
            if g.grant_id == f"refill:{account}":
                # What the bucket holds at the latest time, accrued since its last event too.
                _, credited = state.refill_settlement(latest)
                bucket = state.refill_batch.amount if state.refill_batch is not None else 0
                assert g.remaining == bucket + credited, g
            if g.voided_at is None:
                assert g.amount == g.debt_paid + g.used + g.expired + sum(
                    held for _, held in g.held) + g.remaining, g
        # The web view's fold of the stream, kept from an earlier head and extended.
        stream = [rec for rec in journal.read(order="position") if rec.stream == account]
        cut = data.draw(st.integers(0, head), label="kept at")
        kept_at = max((rec.time for rec in journal.read(to_position=cut)), default=0)
        fold, _ = extended_history(None, [rec for rec in stream if rec.position <= cut],
                                   account, at=kept_at)
        _, extended = extended_history(fold, stream, account, at=latest, as_known_at=head)
        whole = account_history(journal.read(), account, at=latest, as_known_at=head)
        for history in (whole, extended):
            assert _plain(history.statement) == want
            assert _plain(history.explanation) == _plain(explanation)
            for point in _last_of_each_time(history.timeline):
                folded = _figures(journal, account, point.time)
                assert (point.balance, point.held, point.debt) == (
                    folded.balance, folded.reserved, folded.debt), point
        lines = statement(journal, account).lines
        for rec in stream:
            assert event_lines(stream, account, rec.position) == lines_of(lines, rec.position)


@settings(max_examples=30, deadline=None)
@given(recorded(), st.data())
def test_export_import_whatif_and_checkpoints_keep_the_folds(batches: list[list[Row]],
                                                            data: st.DataObject) -> None:
    note(f"batches: {batches!r}")
    journal = append(MemoryJournal(), batches)
    digest = fold_canonical(journal).digest()
    times = range(0, 50, 7)
    for write, fmt in ((importing.write_jsonl, "jsonl"), (importing.write_csv, "csv")):
        out = io.StringIO()
        write(importing.export_records(journal), out)
        copy = MemoryJournal()
        importing.import_file(copy, out.getvalue().encode(), "export", fmt=fmt)
        assert fold_canonical(copy).digest() == digest, fmt
        for account in fold_canonical(journal).accounts:
            for at in times:
                assert balance(copy, account, at=at).figures == \
                    _figures(journal, account, at), (fmt, account, at)
    assert not whatif(journal, Policy()).changed
    fraction = data.draw(st.sampled_from([0.0, 0.5, 1.0]), label="refund fraction")
    rewritten = [[(event_id, kind, time, payload | {"refund_fraction": fraction}
                   if kind == "complete" else payload, stream)
                  for event_id, kind, time, payload, stream in batch] for batch in batches]
    under = fold_under(journal, Policy(refund_fraction=fraction), position=journal.head(),
                       excluded=fold_canonical(journal).excluded)
    same = fold_canonical(append(MemoryJournal(), rewritten))
    latest = journal.max_time()
    for account in ACCOUNTS:
        assert Figures.of(under.accounts.get(account), latest) == \
            Figures.of(same.accounts.get(account), latest), account
    plain = append(MemoryJournal(), batches)
    replay(journal, checkpoint=True, checkpoint_every=data.draw(st.integers(1, 4)))
    for at in times:
        assert _plain(accounts(journal, at=at)) == _plain(accounts(plain, at=at)), at
        assert _plain(expiring(journal, at=at, within=5)) == \
            _plain(expiring(plain, at=at, within=5)), at
        for account in fold_canonical(plain).accounts:
            assert balance(journal, account, at=at).figures == \
                _figures(plain, account, at), (account, at)
    assert _plain(jobs(journal)) == _plain(jobs(plain))


@settings(max_examples=20, deadline=None)
@given(recorded().filter(bool), st.data())
def test_as_known_at_is_a_fold_of_the_journal_then(batches: list[list[Row]],
                                                   data: st.DataObject) -> None:
    journal = append(MemoryJournal(), batches)
    if data.draw(st.booleans(), label="checkpointed"):
        cut = data.draw(st.integers(1, len(batches)), label="checkpointed batches")
        journal = append(MemoryJournal(), batches[:cut])
        replay(journal, checkpoint=True, checkpoint_every=data.draw(st.integers(1, 4)))
        append(journal, batches[cut:])
    position = data.draw(st.integers(1, journal.head()), label="as known at")
    assert_agrees(journal, batches, position, data.draw(st.integers(-1, 50), label="at"))
