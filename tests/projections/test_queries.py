"""projections.queries: balances, statements and lineage agree with the fold, whatever comes.

Property tests append random events (late ones, anomalies, refills and expiries
included) straight to a MemoryJournal and check that every account's statement adds up:
each line's balance is the running sum of the changes, the closing line equals
`balance`, and `balance` equals what the tracker facade answers.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from eventstore import Journal, MemoryJournal, NewEvent
from projections import GPUCreditTracker, Scheduler
from projections.errors import UnknownAccount, UnknownJob
from projections.importing import import_file
from projections.invariants import violations
from projections.ledger import Ledger
from projections.projector import apply_recorded
from projections.queries import (
    NothingRecorded,
    accounts,
    audit,
    balance,
    expiring,
    explain_account,
    explain_job,
    jobs,
    known_position,
    latest_time,
    revision_rows,
    statement,
    to_dict,
)
from projections.queries.explain import RUNNING_HELD, Waiting, job_account, job_explanation
from projections.queries.statement import (
    CLOSING_DIFFERS,
    SUBTOTALS_DIFFER,
    Mismatch,
    Subtotals,
)
from projections.replay import fold_canonical, replay
from tools import wording

ACCOUNTS = ("a", "b")
POOLS = (None, "h100", "a100")
JOBS = ("j1", "j2", "j3", "j4")
# Job ids as a journal holds them: the command line and the service refuse a job id that
# is in use, so each account submits its own (a job event may still name any of them).
ACCOUNT_JOBS = tuple(f"{a}-{j}" for a in ACCOUNTS for j in JOBS)


def _event(draw: st.DrawFn, n: int, owners: dict[str, str],
           grants: dict[str, str]) -> NewEvent:
    """One event, in the stream the journal's writers put it: its account's, a job event
    its job's account's (as submitted so far), a void its grant's account's, or
    `job:<id>` before any submit of it. `owners` and `grants` map the jobs and the grants
    drawn so far to their accounts."""
    kind = draw(st.sampled_from(["grant", "grant", "consume", "submit", "start", "complete",
                                 "cancel", "account", "adjust", "void"]))
    time = draw(st.integers(0, 40))
    account = draw(st.sampled_from(ACCOUNTS))
    if kind == "void" and not grants:
        kind = "adjust"
    payload: dict[str, Any]
    if kind == "grant":
        payload = {"account": account, "amount": draw(st.integers(1, 60))}
        if draw(st.booleans()):
            payload["expiry"] = time + draw(st.integers(1, 15))
        if draw(st.booleans()):
            # Priorities order what a draw takes, never when credits expire.
            payload["priority"] = draw(st.sampled_from([0, 10, 50, 90]))
        grants[f"e{n}"] = account
    elif kind == "consume":
        payload = {"account": account, "amount": draw(st.integers(1, 60))}
    elif kind == "adjust":  # a credit (+) or a debit (-), in a pool or not
        payload = {"account": account, "amount": draw(st.integers(-40, 40).filter(bool)),
                   "reason": "correction"}
    elif kind == "void":  # of a grant, before or after it (by time) as a late void is
        grant = draw(st.sampled_from(sorted(grants)))
        payload = {"grant": grant}
        account = grants[grant]
    elif kind == "submit":
        job = f"{account}-{draw(st.sampled_from(JOBS))}"
        payload = {"account": account, "job": job,
                   "cost": draw(st.integers(0, 40)), "priority": draw(st.integers(0, 2))}
        owners.setdefault(job, account)
    elif kind == "account":
        payload = {"account": account}
        if draw(st.booleans()):
            payload["max_running"] = draw(st.integers(1, 2))
        if draw(st.booleans()):
            payload.update(refill_rate=draw(st.integers(1, 3600)),
                           refill_cap=draw(st.integers(1, 50)))
    else:
        payload = {"job": draw(st.sampled_from(ACCOUNT_JOBS))}
        if kind == "complete":
            payload["success"] = draw(st.booleans())
            payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    pool = draw(st.sampled_from(POOLS))
    if pool is not None and kind in ("grant", "consume", "adjust", "submit"):
        payload["pool"] = pool
    job = payload.get("job")
    stream = (payload.get("account") or (account if kind == "void" else None)
              or owners.get(str(job)) or f"job:{job}")
    return NewEvent(f"e{n}", str(stream), kind, time, payload)


@st.composite
def journals(draw: st.DrawFn) -> MemoryJournal:
    journal = MemoryJournal()
    count = draw(st.integers(1, 30))
    owners: dict[str, str] = {}
    grants: dict[str, str] = {}
    for n in range(count):
        journal.append([_event(draw, n, owners, grants)])
    return journal


def test_the_generated_journals_hold_credit_and_debit_adjustments_and_voids() -> None:
    """What the properties below are drawn over: adjustments either way and voids, late
    ones (a void recorded before its grant's time) included."""
    def kinds(journal: MemoryJournal) -> set[str]:
        recs = list(journal.read(order="position"))
        found = {r.type for r in recs if r.type == "void"}
        found |= {"credit" if r.payload["amount"] > 0 else "debit"
                  for r in recs if r.type == "adjust"}
        times = {r.id: r.time for r in recs}
        if any(r.type == "void" and r.time < times[r.payload["grant"]] for r in recs):
            found.add("late void")
        return found

    wanted = {"void", "credit", "debit", "late void"}
    found = find(journals(), lambda j: kinds(j) >= wanted,
                 settings=settings(max_examples=150, database=None, phases=[Phase.generate]))
    assert kinds(found) >= wanted


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journals(), st.integers(0, 60))
def test_statements_add_up_to_the_balance(journal: MemoryJournal, extra: int) -> None:
    ledger = fold_canonical(journal)
    to = latest_time(journal) + extra
    for name in ledger.accounts:
        st_ = statement(journal, name, to_time=to)
        running = 0
        for line in st_.lines:
            running += line.change
            assert line.balance == running, line
        figures = balance(journal, name, at=to).figures
        assert st_.closing == (figures.balance, figures.reserved)
        assert sum(figures.pools.values()) == figures.balance
        assert figures.available == figures.balance - figures.reserved
        times = [line.time for line in st_.lines]
        assert times == sorted(times)
        # An opening balance is the running balance just before the first line shown.
        middle = to // 2
        part = statement(journal, name, from_time=middle, to_time=to)
        assert part.opening is not None
        assert all(line.time >= middle for line in part.lines)
        assert part.closing == st_.closing
        assert part.opening.balance + sum(line.change for line in part.lines) == running
        assert st_.subtotals.consistent, st_.subtotals.problems
        assert part.subtotals.consistent, part.subtotals.problems


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journals())
def test_every_state_on_the_timeline_keeps_the_invariants(journal: MemoryJournal) -> None:
    # The generated journals hold what only files can: an account declared again with
    # another cap, job events out of order, starts at the cap.
    ledger = Ledger()
    for rec in journal.read(order="canonical"):
        apply_recorded(ledger, rec)
        assert violations(ledger) == [], rec


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journals())
def test_every_grant_accounts_for_its_credits(journal: MemoryJournal) -> None:
    for name, account in fold_canonical(journal).accounts.items():
        ex = explain_account(journal, name)
        for g in ex.grants:
            accounted = (g.paid_debt + g.used + g.expired + g.remaining
                         + sum(a for _, a in g.held))
            assert accounted <= g.amount, g
            assert g.debt_paid_later == g.amount - accounted
        spent = sum(s.amount for s in ex.spends)
        totals = account.book.totals
        assert spent == totals.consumed + totals.charged_jobs
        assert sum(s.debt_created for s in ex.spends) == totals.debt_created



@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journals(), st.integers(0, 20))
def test_each_running_balance_is_the_balance_at_its_time(journal: MemoryJournal,
                                                         extra: int) -> None:
    """The last line at each time shows what `balance --at` that time answers, reserved
    credits too. Accounts with a refill are left out: a refill accrues between events but
    shows on the account's next event's line only (docs/semantics.md, "Refill")."""
    refilled = {rec.payload["account"] for rec in journal.read()
                if rec.type == "account" and "refill_rate" in rec.payload}
    to = latest_time(journal) + extra
    for name in set(fold_canonical(journal).accounts) - refilled:
        lines = statement(journal, name, to_time=to).lines
        for line, after in zip(lines, [*lines[1:], None], strict=True):
            if after is not None and after.time == line.time:
                continue  # not yet all that happened at that time
            figures = balance(journal, name, at=line.time).figures
            assert (line.balance, line.reserved) == (figures.balance, figures.reserved), line

def test_balance_matches_the_tracker() -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    tracker.grant(100, 0, 10)
    tracker.grant(50, 2, 5)
    assert tracker.consume(70, 3) == 0
    assert tracker.consume(90, 8) == 10
    tracker.grant(30, 12, 20)
    for t in range(0, 22):
        assert balance(journal, "a", at=t).figures.balance == tracker.get_balance(t), t
    assert balance(journal, "a", at=8).figures.debt == 10


def test_balance_matches_the_scheduler_view() -> None:
    journal = MemoryJournal()
    scheduler = Scheduler(journal, clock=lambda: 5)
    scheduler.open_account("x", 100, max_running=1)
    assert scheduler.submit("j1", "x", 30, 1)
    assert scheduler.submit("j2", "x", 30, 1)
    scheduler.start_next()
    view = scheduler.accounts["x"]
    figures = balance(journal, "x").figures
    assert (figures.balance, figures.reserved, figures.available) == (
        view.balance, view.reserved, view.available)
    assert figures.pools == dict(view.pools)


def test_as_known_at_shows_the_journal_before_a_late_event() -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    tracker.grant(100, 0, 100)
    tracker.consume(30, 10)
    tracker.consume(20, 5)  # late
    assert balance(journal, "a", at=10, as_known_at=2).figures.balance == 70
    assert balance(journal, "a", at=10).figures.balance == 50
    assert known_position(journal, None) == 3
    assert known_position(journal, "2") == 2
    with pytest.raises(ValueError, match="past the journal's head 3"):
        known_position(journal, 99)
    with pytest.raises(ValueError, match="position"):
        known_position(journal, -1)
    with pytest.raises(ValueError, match="ISO-8601"):
        known_position(journal, "later")


def test_the_known_names_an_error_lists_read_unambiguously() -> None:
    # A name a plain comma-separated list would blur is quoted; the others stay as written.
    # (Names with surrounding spaces arrive only from files: a live call refuses them.)
    journal = MemoryJournal()
    names = ["a", " pad", "team a", "two  spaces", "x, y", "'q", "tail "]
    lines = [json.dumps({"type": "account", "account": name}) for name in names]
    import_file(journal, "\n".join(lines).encode(), "names.jsonl")
    listed = "' pad', \"'q\", a, 'tail ', team a, 'two  spaces', 'x, y'"
    with pytest.raises(UnknownAccount) as raised:
        balance(journal, "z")
    assert str(raised.value) == f"unknown account 'z' (known: {listed})"
    with pytest.raises(UnknownAccount) as refused:
        Scheduler(journal, clock=lambda: 1).submit("j1", "z", 1, 1)
    assert str(refused.value).endswith(f"(known: {listed})")


def test_unknown_names() -> None:
    journal = MemoryJournal()
    GPUCreditTracker(journal, account="a").grant(5, 0, 10)
    with pytest.raises(UnknownAccount, match=r"unknown account 'z' \(known: a\)"):
        balance(journal, "z")
    with pytest.raises(UnknownAccount):
        statement(journal, "z")
    with pytest.raises(UnknownJob, match="unknown job 'j'"):
        explain_job(journal, "j")
    # An account that exists only later is known, with nothing in it yet.
    GPUCreditTracker(journal, account="late").grant(5, 50, 60)
    assert balance(journal, "late", at=10).figures.balance == 0


_BAD_TIMES = [(True, "got True (bool)"), (5.0, "got 5.0 (float)"),
              (math.nan, "got nan (float)"), ("5", "got '5' (str)"),
              (10**400, "at most 9007199254740991, got an integer of about 2**1328"),
              (-(2**60), "got -1152921504606846976")]
# Named by hand: a lambda's repr holds its address, which differs between the test
# workers, and xdist refuses a run whose workers collected different test ids.
_TIME_QUERIES = [
    pytest.param("from_time", lambda j, v: statement(j, "a", from_time=v),
                 id="statement-from_time"),
    pytest.param("to_time", lambda j, v: statement(j, "a", to_time=v), id="statement-to_time"),
    pytest.param("at", lambda j, v: balance(j, "a", at=v), id="balance-at"),
    pytest.param("at", lambda j, v: accounts(j, at=v), id="accounts-at"),
    pytest.param("at", lambda j, v: expiring(j, at=v), id="expiring-at"),
    pytest.param("to_time", lambda j, v: replay(j, to_time=v), id="replay-to_time"),
]


@pytest.mark.parametrize(("value", "shown"), _BAD_TIMES,
                         ids=["bool", "float", "nan", "str", "huge", "negative"])
@pytest.mark.parametrize(("name", "ask"), _TIME_QUERIES)
def test_a_query_names_its_bad_time_argument_and_what_it_takes(
        name: str, ask: Any, value: object, shown: str) -> None:
    """A time or position a script passes to a query is checked as the facades check
    theirs: a ValueError naming the argument and the value (shortened when huge), never
    a TypeError from deep inside, another argument's name, or an answer for `True`."""
    journal = MemoryJournal()
    GPUCreditTracker(journal, account="a").grant(5, 0, 10)
    with pytest.raises(ValueError) as refused:
        ask(journal, value)
    assert str(refused.value).startswith(f"{name} must be ")
    assert shown in str(refused.value) and len(str(refused.value)) < 200
    assert journal.head() == 1


def test_a_statement_from_after_its_end_is_refused_as_the_command_line_refuses_it() -> None:
    """Not an opening line at 50 and nothing after it, for a range that holds nothing."""
    journal = MemoryJournal()
    GPUCreditTracker(journal, account="a").grant(5, 0, 100)
    with pytest.raises(ValueError, match=r"^from_time 50 is after to_time 10: a statement "
                                         r"runs from from_time to to_time, both included"):
        statement(journal, "a", from_time=50, to_time=10)
    assert statement(journal, "a", from_time=10, to_time=10).opening is not None


@pytest.mark.parametrize(("value", "shown"), [
    (True, "as_known_at must be an integer, got True (bool)"),
    (1.0, "as_known_at must be an integer, got 1.0 (float)"),
    (10**400, "as_known_at must be at most 9007199254740991, got an integer of about"),
])
def test_a_query_names_a_bad_as_known_at_position(value: object, shown: str) -> None:
    """`as_known_at` is a position or ISO-8601 text: `True` is not position 1."""
    journal = MemoryJournal()
    GPUCreditTracker(journal, account="a").grant(5, 0, 10)
    with pytest.raises(ValueError) as refused:
        balance(journal, "a", as_known_at=value)
    assert str(refused.value).startswith(shown)


def test_explain_job_for_events_of_a_job_never_submitted() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("s", "job:ghost", "start", 3, {"job": "ghost"})])
    ex = explain_job(journal, "ghost")
    assert ex.state == "never submitted"
    assert [e.ok for e in ex.events] == [False]
    assert "unknown job" in wording.text(ex.events[0].effect)


def test_revision_rows_carry_both_times() -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    tracker.grant(100, 0, 100)
    tracker.consume(30, 10)
    tracker.grant(10, 5, 8)  # late: the consume at 10 is unchanged (it expired at 8)
    tracker.grant(10, 6, 50)  # late: now the consume at 10 draws from it first
    report = replay(journal)
    rows = revision_rows(journal, report.revisions)
    assert [(r.late_time, r.time, r.late_type, r.revision.type) for r in rows] == [
        (6, 10, "grant", "consume")]
    assert to_dict(rows[0])["late_time"] == 6


def test_audit_totals() -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    tracker.grant(100, 0, 10)
    tracker.consume(30, 5)
    scheduler = Scheduler(journal, clock=lambda: 6)
    assert not scheduler.submit("big", "a", 500, 1)
    # An imported submit naming an account that does not exist is rejected too.
    journal.append([NewEvent("ghost-1", "ghost", "submit", 7,
                             {"account": "ghost", "job": "g1", "cost": 1, "priority": 0})])
    report = replay(journal)
    totals = audit(report.ledger, events=report.events, revisions=0, at=20)
    assert (totals.granted, totals.expired, totals.debt, totals.rejected) == (100, 70, 0, 2)
    assert totals.digest == report.digest


def test_audit_debt_is_what_balance_says_after_the_refill_accrued_since() -> None:
    """An account refilled a credit a minute, 30 in debt at 0: by 20 minutes the refill
    has paid 20 of it, though no event has brought the account there."""
    journal = MemoryJournal()
    journal.append([
        NewEvent("open", "r", "account", 0, {"account": "r", "refill_rate": 60,
                                             "refill_cap": 100}),
        NewEvent("u", "r", "consume", 0, {"account": "r", "amount": 30}),
        NewEvent("g", "other", "grant", 1200, {"account": "other", "amount": 5})])
    report = replay(journal)
    totals = audit(report.ledger, events=report.events, revisions=0, at=1200)
    assert totals.debt == -GPUCreditTracker(journal, account="r").get_balance(1200) == 10


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journals(), st.integers(0, 60), st.data())
def test_a_statement_from_the_account_stream_is_the_one_from_the_whole_journal(
        journal: MemoryJournal, extra: int, data: st.DataObject) -> None:
    import importlib

    statement_module = importlib.import_module("projections.queries.statement")

    events = list(journal.read(order="position"))
    if data.draw(st.booleans()):  # a reversal, in the stream of the event it names
        target = data.draw(st.sampled_from(events))
        journal.append([NewEvent("r1", target.stream, "reverse", data.draw(st.integers(0, 50)),
                                 {"event": target.id, "reason": "wrong"})])
    to = latest_time(journal) + extra
    whole = pytest.MonkeyPatch()
    for name in fold_canonical(journal).accounts:
        quick = statement(journal, name, to_time=to, from_time=to // 3)
        with whole.context() as patch:  # the statement of a fold of every event
            patch.setattr(statement_module, "account_events", lambda *a, **k: None)
            slow = statement(journal, name, to_time=to, from_time=to // 3)
        assert to_dict(quick) == to_dict(slow)


def test_an_event_of_another_account_in_the_stream_means_a_whole_fold() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g1", "a", "grant", 0, {"account": "a", "amount": 10}),
                    NewEvent("s1", "b", "submit", 1, {"account": "b", "job": "x", "cost": 1,
                                                     "priority": 1}),
                    # written by hand into a's stream, though job x is b's
                    NewEvent("c1", "a", "cancel", 2, {"job": "x"})])
    from projections.owners import account_events

    assert account_events(journal, "a") is None
    assert [line.event_id for line in statement(journal, "a").lines] == ["g1"]
    assert account_events(journal, "b") is not None


def test_expiries_are_listed_when_they_lapse_whatever_the_grants_priorities() -> None:
    # The first grant is drawn first (priority 0) but lapses last: its expiry line
    # comes after the other's, and a statement from between them opens at the balance
    # there.
    journal = MemoryJournal()
    journal.append([
        NewEvent("gA", "a", "grant", 0, {"account": "a", "amount": 50, "expiry": 100,
                                         "priority": 0}),
        NewEvent("gB", "a", "grant", 10, {"account": "a", "amount": 43, "expiry": 50}),
        NewEvent("u1", "a", "consume", 200, {"account": "a", "amount": 5})])
    whole = statement(journal, "a")
    assert [(line.time, line.type, line.balance) for line in whole.lines] == [
        (0, "grant", 50), (10, "grant", 93), (50, "expire", 50), (100, "expire", 0),
        (200, "consume", -5)]
    part = statement(journal, "a", from_time=60)
    assert part.opening is not None and part.opening.balance == 50
    assert balance(journal, "a", at=59).figures.balance == 50
    assert part.subtotals.expired == 50  # the 43 that lapsed at 50 is before it


def test_a_job_charged_nothing_counts_its_full_cost_as_used_and_refunded() -> None:
    # A failure refunded in full and a job that cost nothing are charged 0: `used`
    # still counts each one's cost, `refunded` what it was not charged.
    journal = MemoryJournal()
    s = Scheduler(journal, clock=lambda: 100)
    s.open_account("a", 50, at=0)
    assert s.submit("fails", "a", 10, 1, at=1)
    assert s.submit("free", "a", 0, 1, at=1)
    s.start_next(at=2)
    s.start_next(at=2)
    s.complete("fails", False, refund_fraction=1.0, at=3)
    s.complete("free", True, at=3)
    st_ = statement(journal, "a")
    completes = [(line.job, line.cost, line.released) for line in st_.lines
                 if line.type == "complete"]
    assert sorted(completes) == [("fails", 10, 10), ("free", 0, 0)]
    totals = st_.subtotals
    assert (totals.used, totals.refunded, totals.closing) == (10, 10, 50)
    assert totals.consistent, totals.problems


def test_explain_job_says_a_running_job_holds_its_cost_until_it_completes() -> None:
    journal = MemoryJournal()
    s = Scheduler(journal, clock=lambda: 100)
    s.open_account("a", 50, at=0)
    assert s.submit("j", "a", 12, 1, at=1)
    s.start_next(at=2)
    explained = explain_job(journal, "j")
    assert explained.state == "running"
    assert explained.waiting == Waiting(RUNNING_HELD, held=12)
    s.complete("j", True, at=3)
    assert explain_job(journal, "j").waiting is None


@pytest.mark.parametrize("void_at", [0, 3])
def test_explain_counts_a_voided_grants_unused_credits_as_expired_at_the_void(
        void_at: int) -> None:
    # docs/semantics.md "Void": what a void stopped counting shows in `explain` as expired,
    # marked voided (from the void on, or from the grant when the void came first).
    journal = MemoryJournal()
    journal.append([
        NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 100}),
        NewEvent("u", "a", "consume", 2, {"account": "a", "amount": 30}),
        NewEvent("v", "a", "void", void_at, {"grant": "g"})])
    (grant,) = explain_account(journal, "a").grants
    assert (grant.used, grant.expired, grant.remaining) == (
        (30, 70, 0) if void_at == 3 else (0, 100, 0))
    assert grant.voided_at == (3 if void_at == 3 else 1)


@pytest.mark.parametrize("void_at", [0, 3])
def test_voided_credits_are_their_own_subtotal_and_the_subtotals_add_up(void_at: int) -> None:
    # A void after the grant takes its unused 70; one before it on the timeline takes
    # all 100 (docs/semantics.md "Void"), and the usage then is debt.
    journal = MemoryJournal()
    journal.append([
        NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 100}),
        NewEvent("u", "a", "consume", 2, {"account": "a", "amount": 30}),
        NewEvent("v", "a", "void", void_at, {"grant": "g"})])
    totals = statement(journal, "a").subtotals
    assert (totals.granted, totals.used, totals.voided) == (
        100, 30, 70 if void_at == 3 else 100)
    assert totals.consistent, totals.problems


@pytest.mark.parametrize("opening", [5, 10, 15, 20, 25, 30, 40])
def test_a_statement_opens_with_the_refill_accrued_by_then(opening: int) -> None:
    # Refill accrues between events: a statement opening between two of them starts
    # from the balance at that moment, and the next refill line shows only the rest.
    journal = MemoryJournal()
    journal.append([
        NewEvent("open", "a", "account", 0, {"account": "a", "refill_rate": 3600,
                                             "refill_cap": 100}),
        NewEvent("u1", "a", "consume", 10, {"account": "a", "amount": 1}),
        NewEvent("u2", "a", "consume", 20, {"account": "a", "amount": 1})])
    whole = statement(journal, "a", to_time=40)
    part = statement(journal, "a", from_time=opening, to_time=40)
    assert part.opening is not None
    if opening not in (10, 20):
        assert part.opening.balance == balance(journal, "a", at=opening).figures.balance
    assert part.opening.balance + sum(line.change for line in part.lines) == whole.closing[0]
    assert part.subtotals.consistent
    granted = sum(line.change for line in part.lines if line.type == "refill")
    assert granted == 40 - opening  # one credit a second, none twice, none lost
    # Every other line as the whole statement has it (a refill line whose accrual all
    # came before the opening is in the opening instead).
    assert [line.balance for line in part.lines if line.type != "refill"] == [
        line.balance for line in whole.lines if line.time >= opening and line.type != "refill"]


@pytest.mark.parametrize("resubmitted", [True, False])
def test_a_reversed_submit_is_listed_but_explains_nothing(resubmitted: bool) -> None:
    """A reversed submit takes part in no fold: the job's submit, acceptance and reason are
    the submit that stands, or none (and its text renders)."""
    from tools import render

    journal = MemoryJournal()
    events = [
        NewEvent("ga", "a", "grant", 0, {"account": "a", "amount": 100}),
        NewEvent("s1", "a", "submit", 1, {"account": "a", "job": "j1", "cost": 5,
                                           "priority": 1}),
        NewEvent("rv", "a", "reverse", 1, {"event": "s1", "reason": "entered twice"}),
    ]
    if resubmitted:
        events.append(NewEvent("s2", "a", "submit", 2, {"account": "a", "job": "j1",
                                                        "cost": 500, "priority": 1}))
    journal.append(events)
    ex = explain_job(journal, "j1")
    assert [e.event_id for e in ex.events] == [e.id for e in events if e.id != "rv" and
                                               e.id != "ga"]
    if resubmitted:
        assert (ex.state, ex.submitted_at, ex.accepted) == ("rejected", 2, False)
        assert ex.reason is not None and "costs 500" in ex.reason
    else:
        assert (ex.state, ex.submitted_at, ex.accepted, ex.held_from) == (
            "never submitted", None, None, ())
    render.explain_job(ex)  # renders without a value it cannot format


def test_an_account_whose_submit_reuses_another_accounts_job_id_is_explained_whole(
        tmp_path: Any) -> None:
    """b submits jx first; a's later submit of jx is an anomaly of the whole fold, which
    a's events alone would take as accepted (holding 95 of a's credits). explain, its job
    explanation (also from a checkpoint) and the web's history answer as balance does."""
    from eventstore import Journal
    from projections.queries.history import account_history

    journal = Journal(f"sqlite:///{tmp_path / 'dup.db'}")
    journal.append([
        NewEvent("ga1", "a", "grant", 0, {"account": "a", "amount": 100, "expiry": 50}),
        NewEvent("ga2", "a", "grant", 0, {"account": "a", "amount": 100, "expiry": 60}),
        NewEvent("gb", "b", "grant", 0, {"account": "b", "amount": 100}),
        NewEvent("s1", "b", "submit", 1, {"account": "b", "job": "jx", "cost": 5,
                                           "priority": 1}),
        NewEvent("s2", "a", "submit", 2, {"account": "a", "job": "jx", "cost": 95,
                                           "priority": 1}),
        NewEvent("s3", "a", "submit", 3, {"account": "a", "job": "j2", "cost": 10,
                                           "priority": 1}),
        NewEvent("r3", "a", "start", 4, {"job": "j2"}),
        NewEvent("f3", "a", "complete", 5, {"job": "j2", "success": True}),
    ])
    for checkpointed in (False, True):
        if checkpointed:
            replay(journal, checkpoint=True)
        ex = explain_account(journal, "a")
        assert (ex.figures.balance, ex.figures.reserved) == (190, 0)
        job = explain_job(journal, "j2")
        assert (job.state, list(job.paid_by)) == ("succeeded", [("ga1", 10)])
    history = account_history(journal.read(order="position"), "a", at=5)
    assert history.explanation.figures.reserved == 0
    journal.close()


@pytest.mark.parametrize("text", ["+1", "\uff11", "\u0661", "1" * 5000])
def test_a_position_is_ascii_digits(text: str) -> None:
    """As every integer a ledger reads: int() would take each of these (or fail with a
    message about Python)."""
    from projections.queries import known_position

    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 1})])
    with pytest.raises(ValueError, match="not a position"):
        known_position(journal, text)
    assert known_position(journal, " 1 ") == 1


# -- a pending job's place in the queue ------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_jobs_ahead_of_a_pending_job_are_those_start_next_starts_before_it(
        data: st.DataObject) -> None:
    """`explain --job` counts the jobs that start before a pending one: start_next called
    until it starts it, nothing ending meanwhile. A job ahead of it in the queue whose
    account reached its cap waits, and does not count, unless it is of the job's own
    account (which starts its jobs in order whenever it has room). Some accounts take
    part in fair share, with usage from a job run first: among equal priorities, the
    lower usage per share starts first."""
    caps = data.draw(st.lists(st.sampled_from([None, 1, 2]), min_size=1, max_size=3))
    shares = data.draw(st.lists(st.sampled_from([None, 1, 3]), min_size=len(caps),
                                max_size=len(caps)))
    used = data.draw(st.lists(st.integers(0, 6), min_size=len(caps), max_size=len(caps)))
    submits = data.draw(st.lists(st.tuples(st.integers(0, len(caps) - 1), st.integers(0, 3)),
                                 min_size=1, max_size=9))
    starts = data.draw(st.integers(0, len(submits)))

    def scheduler() -> tuple[MemoryJournal, Scheduler]:
        journal = MemoryJournal()
        s = Scheduler(journal, clock=lambda: 10)
        for i, cap in enumerate(caps):
            s.open_account(f"a{i}", 100, max_running=cap, share=shares[i])
            if used[i]:  # usage, under the account's share if it has one
                assert s.submit(f"used{i}", f"a{i}", used[i], 0)
                assert s.start_next() is not None
                s.complete(f"used{i}", success=True)
        for n, (account, priority) in enumerate(submits):
            assert s.submit(f"j{n}", f"a{account}", 1, priority)
        for _ in range(starts):
            s.start_next()
        return journal, s

    journal, _ = scheduler()
    pending = [j for j, job in fold_canonical(journal).jobs.items() if job.state == "pending"]
    for job in pending:
        ahead = explain_job(journal, job).ahead
        _, s = scheduler()
        started = []
        while (picked := s.start_next()) is not None and picked.id != job:
            started.append(picked.id)
        if picked is not None:  # it starts, after those
            assert ahead == len(started), (job, caps, submits, starts)
        else:  # its account filled up: the jobs started before it, and its account's rest
            def key(j: str) -> tuple[int, float, int]:
                # The queue's order: priority, then usage per share (all charged at one
                # time: no decay between them; none counted without a share), then age.
                account, priority = submits[int(j[1:])]
                share = shares[account]
                fair = used[account] / share if share and used[account] else -math.inf
                return (-priority, fair, int(j[1:]))

            own = submits[int(job[1:])][0]
            rest = [j for j in pending if j not in started and j != job
                    and submits[int(j[1:])][0] == own and key(j) < key(job)]
            assert ahead == len([j for j in started if key(j) < key(job)]) + len(rest)


def test_a_submit_refused_in_debt_says_the_available_figure_balance_says() -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    tracker.grant(5, 0, 100)
    tracker.consume(20, 1)  # 15 in debt
    assert not Scheduler(journal, clock=lambda: 2).submit("free-probe", "a", 0, 1)
    reason = explain_job(journal, "free-probe").reason
    assert reason is not None and "costs 0, only -15 available" in reason
    assert balance(journal, "a", at=2).figures.available == -15


def _checkpointed(url: str, before: list[NewEvent], after: list[NewEvent]) -> Journal:
    journal = Journal(url)
    journal.append(before)
    replay(journal, checkpoint=True)
    journal.append(after)
    return journal


GRANTS = [NewEvent(f"g-{name}", name, "grant", 0, {"account": name, "amount": 100})
          for name in ("a", "b")]


def _submit(event_id: str, account: str, time: int) -> NewEvent:
    return NewEvent(event_id, account, "submit", time,
                    {"account": account, "job": "j", "cost": 5, "priority": 1})


@pytest.mark.parametrize(("before", "after", "owner"), [
    # Submitted and started in its account's stream after the checkpoint: that account.
    ([], [_submit("s1", "a", 1), NewEvent("st", "a", "start", 2, {"job": "j"})], "a"),
    # Submitted again, by another account, after the checkpoint that indexes it.
    ([_submit("s1", "a", 1)], [_submit("s2", "b", 2)], None),
    # A step of it in another account's stream.
    ([_submit("s1", "a", 1)], [NewEvent("st", "b", "start", 2, {"job": "j"})], None),
    # Pending behind another account's job: its place is the whole queue's.
    ([NewEvent("k", "b", "submit", 0, {"account": "b", "job": "k", "cost": 5,
                                       "priority": 2})],
     [_submit("s1", "a", 1)], "a"),
    # Submitted twice before the checkpoint: its anomalies name the clash.
    ([_submit("s1", "a", 1), _submit("s2", "b", 2)], [], None),
    # Submitted after the checkpoint in a stream not its account's.
    ([], [NewEvent("s1", "b", "submit", 1, {"account": "a", "job": "j", "cost": 5,
                                            "priority": 1})], None),
    # A step in the job's own stream: still its account's.
    ([_submit("s1", "a", 1)], [NewEvent("st", "job:j", "start", 2, {"job": "j"})], "a"),
    # A step before any submit, even in the job's own stream: only the whole fold tells.
    ([], [NewEvent("st", "job:j", "start", 1, {"job": "j"}), _submit("s1", "a", 2)], None),
], ids=["own stream", "submitted twice", "step elsewhere", "behind another account",
        "submitted twice before", "submit elsewhere", "step in its stream", "step first"])
def test_a_jobs_account_is_the_one_whose_events_alone_tell_its_life(
        db: str, before: list[NewEvent], after: list[NewEvent], owner: str | None) -> None:
    with _checkpointed(db, GRANTS + before, after) as journal:
        assert job_account(journal, "j", journal.head()) == owner
        assert to_dict(explain_job(journal, "j")) == to_dict(
            job_explanation(journal.read(order="canonical"), "j"))


def test_subtotals_that_do_not_add_up_name_both_figures() -> None:
    """The check every statement carries (`statement` warns and exits 1 on it): subtotals
    that do not add up to the closing balance, and a closing balance other than the
    account's, each named with the figure found and the one expected."""
    good = Subtotals(opening=10, granted=5, used=3, refunded=1, expired=2, adjusted=-1,
                     voided=0, closing=10, balance=10)
    assert good.consistent and good.problems == []
    assert dataclasses.replace(good, balance=9).problems == [
        Mismatch(CLOSING_DIFFERS, 10, 9)]
    off = dataclasses.replace(good, closing=11, balance=12)
    assert off.problems == [Mismatch(SUBTOTALS_DIFFER, 10, 11),
                            Mismatch(CLOSING_DIFFERS, 11, 12)]
    assert not off.consistent


def test_a_statement_line_carries_the_pool_memo_and_refund_of_its_event() -> None:
    """An adjustment's line names its pool as a grant's and a usage report's do (general
    when it names none); a job's lines name the job's pool, so that a pool's lines hold
    the jobs charged in it; a memo in the event is on its line; only a completion refunds:
    a cancel gives back a reservation that was never charged, so the lines' `released`
    add up to the statement's refunded subtotal."""
    journal = MemoryJournal()
    journal.append([
        NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 100, "memo": "PO 7"}),
        NewEvent("x1", "a", "adjust", 2, {"account": "a", "amount": -5, "reason": "fix",
                                          "pool": "h100"}),
        NewEvent("x2", "a", "adjust", 2, {"account": "a", "amount": 5, "reason": "fix"}),
        NewEvent("s1", "a", "submit", 3, {"account": "a", "job": "j", "cost": 30,
                                          "priority": 1}),
        NewEvent("cx", "a", "cancel", 4, {"job": "j"}),
        NewEvent("s2", "a", "submit", 5, {"account": "a", "job": "k", "cost": 20,
                                          "priority": 1, "pool": "h100"}),
        NewEvent("st", "a", "start", 5, {"job": "k"}),
        NewEvent("ck", "a", "complete", 6, {"job": "k", "success": False,
                                            "refund_fraction": 0.5})])
    st_ = statement(journal, "a")
    assert [(line.event_id, line.pool, line.memo, line.released) for line in st_.lines] == [
        ("g1", "general", "PO 7", 0), ("x1", "h100", None, 0), ("x2", "general", None, 0),
        ("s1", "general", None, 0), ("cx", "general", None, 0), ("s2", "h100", None, 0),
        ("st", "h100", None, 0), ("ck", "h100", None, 10)]
    assert st_.subtotals.refunded == sum(line.released for line in st_.lines) == 10


def test_refill_paid_before_the_opening_leaves_no_empty_line_and_is_general() -> None:
    """A bucket full by the opening: the refill the next event would pay is all in the
    opening balance, so the statement shows no refill line of 0. Refilled credits are
    general credits, and their lines say so."""
    journal = MemoryJournal()
    journal.append([
        NewEvent("open", "a", "account", 0, {"account": "a", "refill_rate": 3600,
                                             "refill_cap": 10}),
        NewEvent("u1", "a", "consume", 100, {"account": "a", "amount": 4})])
    whole = statement(journal, "a", to_time=120)
    assert [(line.time, line.type, line.change, line.pool) for line in whole.lines] == [
        (0, "account", 0, None), (100, "refill", 10, "general"),
        (100, "consume", -4, "general"), (120, "refill", 4, "general")]
    part = statement(journal, "a", from_time=50, to_time=120)
    assert part.opening is not None and part.opening.balance == 10
    assert [(line.type, line.change) for line in part.lines] == [("consume", -4),
                                                                  ("refill", 4)]


def test_an_account_recorded_only_later_has_a_statement_of_nothing_yet() -> None:
    """Before its first event (in event time, or as known at an earlier position) an
    account has a statement of zeros and no lines; a name never recorded is unknown.
    An adjustment or a usage report makes an account as a grant does."""
    journal = MemoryJournal()
    journal.append([
        NewEvent("g1", "a", "grant", 10, {"account": "a", "amount": 5}),
        NewEvent("g2", "b", "grant", 50, {"account": "b", "amount": 7}),
        NewEvent("x1", "d", "adjust", 60, {"account": "d", "amount": -3, "reason": "fix"}),
        NewEvent("u1", "e", "consume", 60, {"account": "e", "amount": 2})])
    for early in (statement(journal, "b", to_time=40), statement(journal, "b", as_known_at=1),
                  statement(journal, "d", to_time=40), statement(journal, "e", to_time=40)):
        assert early.lines == [] and early.closing == (0, 0)
        assert early.subtotals.consistent
    with pytest.raises(UnknownAccount):
        statement(journal, "c")


def test_a_question_as_known_before_anything_was_recorded_is_refused() -> None:
    """Position 0 of a journal that holds events is before the first one: there is
    nothing to answer from, said as a position; a negative one is no position at all."""
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 1})])
    with pytest.raises(NothingRecorded,
                       match=r"^nothing was recorded yet at position 0 \(before the first "
                             r"event\); known positions are 1 to 1$"):
        statement(journal, "a", as_known_at="0")
    with pytest.raises(ValueError, match=r"^a position is not negative, got -1; known "
                                         r"positions are 1 to 1$"):
        known_position(journal, "-1")


@pytest.mark.parametrize("count", [20, 21])
def test_an_unknown_name_lists_the_first_twenty_known_and_counts_the_rest(
        count: int) -> None:
    journal = MemoryJournal()
    names = [f"acct{n:02}" for n in range(count)]
    journal.append([NewEvent(f"g{n}", name, "grant", 0, {"account": name, "amount": 1})
                    for n, name in enumerate(names)])
    with pytest.raises(UnknownAccount) as raised:
        statement(journal, "z")
    shown = ", ".join(names[:20])
    assert str(raised.value) == "unknown account 'z' (known: " + (
        f"{shown})" if count == 20 else f"{shown}, and 1 more)")


def test_an_unknown_name_in_an_empty_journal_lists_none() -> None:
    with pytest.raises(UnknownAccount, match=r"^unknown account 'z' \(known: none\)$"):
        balance(MemoryJournal(), "z")


def test_jobs_of_an_unknown_account_name_the_known_ones() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 1})])
    with pytest.raises(UnknownAccount, match=r"^unknown account 'z' \(known: a\)$"):
        jobs(journal, account="z")


def test_reports_of_an_empty_journal_name_no_time() -> None:
    """An empty journal has no latest event time: its reports say none, never a time 0
    that a script would read as a real one."""
    empty = MemoryJournal()
    assert to_dict(accounts(empty))["at"] is None
    window = to_dict(expiring(empty))
    assert (window["at"], window["until"]) == (None, None)


def test_an_account_declared_again_says_what_it_changed_not_that_it_opened() -> None:
    journal = MemoryJournal()
    journal.append([
        NewEvent("open", "a", "account", 0, {"account": "a", "max_running": 2}),
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 10}),
        NewEvent("more", "a", "account", 10, {"account": "a", "max_running": 3, "share": 2,
                                              "refill_rate": 60, "refill_cap": 100}),
        NewEvent("same", "a", "account", 20, {"account": "a", "max_running": 3, "share": 2,
                                              "refill_rate": 60, "refill_cap": 100}),
        NewEvent("less", "a", "account", 30, {"account": "a", "half_life": 3600}),
        NewEvent("b", "b", "grant", 0, {"account": "b", "amount": 10}),
        NewEvent("open-b", "b", "account", 5, {"account": "b"}),  # opened by a grant first
    ])
    said = {line.event_id: wording.text(line.effect)
            for account in ("a", "b") for line in statement(journal, account).lines
            if line.type == "account"}
    assert said == {
        "open": "account opened (at most 2 running)",
        "more": "account changed: max_running 2 -> 3, share none -> 2, refill_rate none -> 60, "
                "refill_cap none -> 100",
        "same": "account declared again, nothing changed",
        "less": "account changed: max_running 3 -> none, share 2 -> none, half_life 604800 -> "
                "3600, refill_rate 60 -> none, refill_cap 100 -> none",
        "open-b": "account opened",
    }


def _opening(event_id: str, kind: str, time: int) -> NewEvent:
    fields: dict[str, Any] = {
        "usage": {"account": "a", "amount": 3},
        "account": {"account": "a"},
        "grant": {"account": "a", "amount": 50, "expiry": 1_000},
        "credit": {"account": "a", "amount": 50, "reason": "goodwill"},
        "debit": {"account": "a", "amount": -5, "reason": "billed twice"},
    }[kind]
    kind = {"usage": "consume", "credit": "adjust", "debit": "adjust"}.get(kind, kind)
    return NewEvent(event_id, "a", kind, time, fields)


@pytest.mark.parametrize(("later", "opened"), [
    ((), None),
    ((("u", "usage", 20), ("d", "debit", 25)), None),  # neither opens the account
    ((("o", "account", 30),), 30),
    ((("g", "grant", 40),), 40),
    ((("c", "credit", 45),), 45),
    ((("u", "usage", 20), ("g", "grant", 40), ("o", "account", 50)), 40),
    ((("o", "account", 30), ("r", "reverse o", 31)), None),  # taken out of the timeline
    ((("o", "account", 30), ("r", "reverse o", 31), ("g", "grant", 60)), 60),
], ids=["never", "usage-and-debit", "account", "grant", "credit", "first-of-three",
        "reversed", "reversed-then-granted"])
def test_a_submit_refused_before_its_account_opened_says_when_it_is_opened(
        later: tuple[tuple[str, str, int], ...], opened: int | None) -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("s", "a", "submit", 10,
                             {"job": "j", "account": "a", "cost": 5, "priority": 1})])
    for event_id, kind, time in later:
        if kind.startswith("reverse "):
            target = kind.split()[1]
            journal.append([NewEvent(event_id, "a", "reverse", 30,
                                     {"event": target, "reason": "recorded by mistake"})])
        else:
            journal.append([_opening(event_id, kind, time)])
    ex = explain_job(journal, "j")
    assert (ex.accepted, ex.reason) == (False, "unknown account 'a'")
    assert ex.account_opened_at == opened
    assert explain_job(journal, "j", as_known_at=1).account_opened_at is None


def test_a_submit_refused_for_its_cost_has_no_opening_to_name() -> None:
    journal = MemoryJournal()
    journal.append([_opening("o", "account", 5),
                    NewEvent("s", "a", "submit", 10,
                             {"job": "j", "account": "a", "cost": 5, "priority": 1}),
                    _opening("g", "grant", 20)])
    ex = explain_job(journal, "j")
    assert ex.accepted is False and ex.reason != "unknown account 'a'"
    assert ex.account_opened_at is None
