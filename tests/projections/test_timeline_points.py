"""The chart's points: the figures a timeline takes after each event and at each expiry
are what the account's own `pool_balances_at` says at that moment, however the timeline
keeps track of holds, expired credits and debt between points."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections.figures import Figures
from projections.ledger import AccountState, Ledger
from projections.projector import apply_recorded
from projections.queries import to_dict
from projections.timeline import HeldByPool, TimelineBuilder, TimelinePoint, point_of
from tests.projections.draws import add_event, other_event

ACCOUNTS = ("a", "b")
POOLS = (None, "general", "h100", "a100")

# The draws' fixed choices, made once: a strategy built inside a draw is built, validated
# and labelled again at every event of every example, which took most of these tests' time.
HISTORY_KINDS = st.sampled_from(["account", "grant", "grant", "consume", "adjust", "void",
                                 "submit", "submit", "start", "complete", "cancel"])
REFILL_RATES = st.sampled_from([3600, 7200, 900])
PRIORITIES = st.sampled_from([10, 90])
CROWD_KINDS = st.sampled_from(["submit"] * 5 + ["start", "complete", "cancel"] * 2
                              + ["grant", "grant", "consume", "void"])


class Plain(TimelineBuilder):
    """The same points, each summed from the account's state alone."""

    def _point(self, state: AccountState, time: int, position: int | None) -> TimelinePoint:
        return point_of(state, time, position)


@st.composite
def histories(draw: st.DrawFn) -> MemoryJournal:
    """Accounts (some refilled), grants in several pools with expiries and priorities,
    usage past the credits (debt), adjustments, voids, and jobs that hold credits until
    they complete or are cancelled; recorded in event-time order."""
    events: list[tuple[str, str, int, dict[str, Any]]] = []
    grants: list[str] = []
    jobs: list[tuple[str, str]] = []
    time = 0
    for n in range(draw(st.integers(1, 30))):
        time += draw(st.integers(0, 4))
        kind = draw(HISTORY_KINDS)
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        payload: dict[str, Any]
        if kind == "account":
            payload = {"account": account}
            if draw(st.booleans()):
                payload |= {"refill_rate": draw(REFILL_RATES),
                            "refill_cap": draw(st.integers(1, 20))}
        elif kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 40))}
            if draw(st.booleans()):
                payload["expiry"] = time + draw(st.integers(1, 12))
            if draw(st.booleans()):
                payload["priority"] = draw(PRIORITIES)
            grants.append(f"e{n}")
        else:
            drawn = other_event(draw, kind, n, account, grants, jobs, most_used=50)
            if drawn is None:
                continue
            payload, account = drawn
        add_event(events, n, kind, time, payload, pool)
    journal = MemoryJournal()
    for event_id, kind, when, payload in events:
        stream = payload.get("account") or next(
            (acct for job, acct in jobs if job == payload.get("job")), "a")
        journal.append([NewEvent(event_id, str(stream), kind, when, payload)])
    return journal


@st.composite
def crowds(draw: st.DrawFn) -> MemoryJournal:
    """Many jobs of both accounts live at once, holding credits of several pools: grants
    (some expiring, some voided later), consumes, and submits, starts, completions and
    cancels of any job in any order (mostly of jobs in the state that settles them, now
    and then of one that is not: an anomaly); recorded in event-time order."""
    events: list[tuple[str, str, int, dict[str, Any]]] = []
    for account in ACCOUNTS:
        payload: dict[str, Any] = {"account": account}
        if draw(st.booleans()):
            payload |= {"refill_rate": 3600, "refill_cap": draw(st.integers(1, 20))}
        events.append((f"open-{account}", "account", 0, payload))
    grants: list[str] = []
    jobs: list[tuple[str, str]] = []  # every job submitted, with its account
    pending: list[tuple[str, str]] = []
    running: list[tuple[str, str]] = []
    time = 0
    for n in range(draw(st.integers(20, 150))):
        time += draw(st.integers(0, 2))
        kind = draw(CROWD_KINDS)
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        if kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 150))}
            if draw(st.booleans()):
                payload["expiry"] = time + draw(st.integers(1, 60))
            grants.append(f"e{n}")
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 20))}
        elif kind == "void":
            if not grants:
                continue
            payload = {"grant": draw(st.sampled_from(grants))}
        elif kind == "submit":
            job = f"j{n}"
            payload = {"account": account, "job": job, "cost": draw(st.integers(0, 12)),
                       "priority": 1}
            jobs.append((job, account))
            pending.append((job, account))
        else:
            # The job whose state this settles (or starts), else any job.
            among = running if kind == "complete" else pending
            if not jobs:
                continue
            if among and draw(st.integers(0, 9)) > 0:
                job, account = among.pop(draw(st.integers(0, len(among) - 1)))
                if kind == "start":
                    running.append((job, account))
            else:
                job, account = jobs[draw(st.integers(0, len(jobs) - 1))]
            payload = {"job": job}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
        add_event(events, n, kind, time, payload, pool)
    owner = dict(jobs)
    journal = MemoryJournal()
    for event_id, kind, when, payload in events:
        stream = payload.get("account") or owner.get(str(payload.get("job")), "a")
        journal.append([NewEvent(event_id, str(stream), kind, when, payload)])
    return journal


def _points_alike(journal: MemoryJournal, after: int, joined: int = 0) -> None:
    """The points of each account's timeline, kept and plain, are the same (values and pool
    order); the builders start taking points at event number `joined`, with the holds
    made before then already in the book."""
    events = list(journal.read(order="canonical"))
    until = max((rec.time for rec in events), default=0) + after
    for account in ACCOUNTS:
        ledger = Ledger()
        kept, plain = TimelineBuilder(), Plain()
        for i, rec in enumerate(events):
            if i >= joined:
                for builder in (kept, plain):
                    builder.before(rec.time, ledger.accounts.get(account))
            outcome = apply_recorded(ledger, rec)
            if outcome.account == account and i >= joined:
                for builder in (kept, plain):
                    builder.after(rec, ledger.accounts.get(account))
        state = ledger.accounts.get(account)
        points, expected = kept.finish(until, state), plain.finish(until, state)
        assert [to_dict(p) for p in points] == [to_dict(p) for p in expected]
        assert [list(p.pools) for p in points] == [list(p.pools) for p in expected]  # order


@settings(max_examples=150, deadline=None)
@given(journal=histories(), after=st.integers(0, 15))
def test_every_point_is_what_the_accounts_state_says_then(journal: MemoryJournal,
                                                          after: int) -> None:
    _points_alike(journal, after)


@settings(max_examples=100, deadline=None)
@given(journal=crowds(), after=st.integers(0, 60), joined=st.integers(0, 60))
def test_every_point_is_what_the_state_says_with_many_jobs_held_and_settled_in_any_order(
        journal: MemoryJournal, after: int, joined: int) -> None:
    _points_alike(journal, after, joined)


@settings(max_examples=100, deadline=None)
@given(journal=crowds(), joined=st.integers(0, 60))
def test_held_by_pool_followed_hold_by_hold_is_the_books_own_sum(journal: MemoryJournal,
                                                                joined: int) -> None:
    ledger = Ledger()
    followed = {account: HeldByPool() for account in ACCOUNTS}
    for i, rec in enumerate(journal.read(order="canonical")):
        outcome = apply_recorded(ledger, rec)
        state = ledger.accounts.get(str(outcome.account))
        if state is None or i < joined:
            continue
        job = rec.payload.get("job")
        if isinstance(job, str):
            followed[state.name].follow(state.book, job)
        held = followed[state.name].of(state.book)
        assert held == state.book.held_by_pool()


class CountedPortions(list[tuple[Any, int]]):
    """A hold's portions that count how often they are walked."""

    walks = 0

    def __iter__(self) -> Any:
        CountedPortions.walks += 1
        return super().__iter__()


@pytest.mark.pure_python  # a hold's portions swapped for a counting list
def test_a_timeline_walks_each_hold_a_few_times_not_every_hold_at_every_event() -> None:
    jobs = 300
    events = [NewEvent("open", "a", "account", 0, {"account": "a"})]
    events += [NewEvent(f"g-{pool}", "a", "grant", 1, {"account": "a", "amount": 10 * jobs,
                                                         "pool": pool, "expiry": 10 * jobs})
               for pool in ("h100", "a100", "general")]
    events += [NewEvent(f"s{i}", "a", "submit", 2 + i,
                        {"account": "a", "job": f"j{i}", "cost": 3, "priority": 1,
                         "pool": ("h100", "a100", "general")[i % 3]}) for i in range(jobs)]
    events += [NewEvent(f"c{i}", "a", "cancel", 2 + jobs + i, {"job": f"j{(i * 7) % jobs}"})
               for i in range(jobs)]
    journal = MemoryJournal()
    journal.append(events)
    ledger = Ledger()
    builder = TimelineBuilder()
    CountedPortions.walks = 0
    for rec in journal.read(order="canonical"):
        builder.before(rec.time, ledger.accounts.get("a"))
        apply_recorded(ledger, rec)
        book = ledger.accounts["a"].book
        if rec.type == "submit":
            hold = book.holds[rec.payload["job"]]
            hold.portions = CountedPortions(hold.portions)
        builder.after(rec, ledger.accounts["a"])
    assert not ledger.accounts["a"].book.holds
    # The fold walks a hold twice as it settles it; the timeline, once as it is made and
    # once as it is dropped.
    assert CountedPortions.walks <= 4 * jobs, CountedPortions.walks


@settings(max_examples=100, deadline=None)
@given(journal=histories(), after=st.integers(0, 15))
def test_figures_per_pool_add_up_to_the_accounts_figures(journal: MemoryJournal,
                                                         after: int) -> None:
    ledger = Ledger()
    events = list(journal.read(order="canonical"))
    for rec in events:
        apply_recorded(ledger, rec)
    at = max((rec.time for rec in events), default=0) + after
    for account in (*ACCOUNTS, "nobody"):
        state = ledger.accounts.get(account)
        total, pools = Figures.of(state, at), Figures.by_pool(state, at)
        assert list(pools) == sorted(total.pools)
        for field in ("balance", "reserved", "available", "debt"):
            assert sum(getattr(f, field) for f in pools.values()) == getattr(total, field)
        for pool, f in pools.items():
            assert f.pools == {pool: total.pools[pool]}
            assert f.available == f.balance - f.reserved and f.reserved >= 0
