"""The chart's points: the figures a timeline takes after each event and at each expiry
are what the account's own `pool_balances_at` says at that moment, however the timeline
keeps track of holds, expired credits and debt between points."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections.figures import Figures
from projections.ledger import AccountState, Ledger
from projections.projector import apply_recorded
from projections.queries import to_dict
from projections.timeline import TimelineBuilder, TimelinePoint, point_of
from tests.projections.draws import add_event, other_event

ACCOUNTS = ("a", "b")
POOLS = (None, "general", "h100", "a100")


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
        kind = draw(st.sampled_from(["account", "grant", "grant", "consume", "adjust", "void",
                                     "submit", "submit", "start", "complete", "cancel"]))
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        payload: dict[str, Any]
        if kind == "account":
            payload = {"account": account}
            if draw(st.booleans()):
                payload |= {"refill_rate": draw(st.sampled_from([3600, 7200, 900])),
                            "refill_cap": draw(st.integers(1, 20))}
        elif kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 40))}
            if draw(st.booleans()):
                payload["expiry"] = time + draw(st.integers(1, 12))
            if draw(st.booleans()):
                payload["priority"] = draw(st.sampled_from([10, 90]))
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


@settings(max_examples=300, deadline=None)
@given(journal=histories(), after=st.integers(0, 15))
def test_every_point_is_what_the_accounts_state_says_then(journal: MemoryJournal,
                                                          after: int) -> None:
    events = list(journal.read(order="canonical"))
    until = max((rec.time for rec in events), default=0) + after
    for account in ACCOUNTS:
        ledger = Ledger()
        kept, plain = TimelineBuilder(), Plain()
        for rec in events:
            for builder in (kept, plain):
                builder.before(rec.time, ledger.accounts.get(account))
            outcome = apply_recorded(ledger, rec)
            if outcome.account == account:
                for builder in (kept, plain):
                    builder.after(rec, ledger.accounts.get(account))
        state = ledger.accounts.get(account)
        points, expected = kept.finish(until, state), plain.finish(until, state)
        assert [to_dict(p) for p in points] == [to_dict(p) for p in expected]
        assert [list(p.pools) for p in points] == [list(p.pools) for p in expected]  # order


@settings(max_examples=200, deadline=None)
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
