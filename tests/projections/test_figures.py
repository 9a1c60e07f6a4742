"""An account's figures have one definition: `Figures.of` at a time is what the fold's
own running figures (`AccountState.balance`, `.reserved`, `.available`, on which it
decides a submit) say at the account's last event."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.figures import Figures
from projections.ledger import Ledger

KINDS = ("grant", "consume", "adjust", "submit", "start", "complete", "cancel", "void")


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[str, int, dict[str, Any]]]:
    """Events of two accounts in time order: expiring grants in two pools, usage past
    the credits, manual credits and debits, jobs run, failed with refunds or cancelled,
    voids."""
    events: list[tuple[str, int, dict[str, Any]]] = [
        ("account", 0, {"account": "a", "max_running": 1}), ("account", 0, {"account": "b"})]
    jobs: list[str] = []
    grants: list[str] = []
    time = 0
    for n in range(draw(st.integers(1, 40))):
        time += draw(st.integers(0, 5))
        kind = draw(st.sampled_from(KINDS))
        account = draw(st.sampled_from(("a", "b")))
        pool = draw(st.sampled_from(("general", "h100")))
        payload: dict[str, Any]
        if kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 50)), "pool": pool,
                       "expiry": time + draw(st.integers(1, 30))}
            grants.append(f"e{n}")
        elif kind in ("consume", "adjust"):
            payload = {"account": account, "amount": draw(st.integers(1, 40)), "pool": pool}
            if kind == "adjust":
                payload.update(amount=draw(st.sampled_from((-1, 1))) * payload["amount"],
                               reason="correction")
        elif kind == "submit":
            payload = {"account": account, "job": f"j{n}", "cost": draw(st.integers(0, 30)),
                       "priority": 1, "pool": pool}
            jobs.append(f"j{n}")
        elif kind == "void":
            if not grants:
                continue
            payload = {"grant": draw(st.sampled_from(grants))}
        else:
            if not jobs:
                continue
            payload = {"job": draw(st.sampled_from(jobs))}
            if kind == "complete":
                payload.update(success=draw(st.booleans()),
                               refund_fraction=draw(st.sampled_from((0.0, 0.5, 1.0))))
        events.append((kind, time, payload))
    return events


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=histories())
def test_figures_at_an_accounts_last_event_are_the_folds_running_figures(
        events: list[tuple[str, int, dict[str, Any]]]) -> None:
    ledger = Ledger()
    for position, (kind, time, payload) in enumerate(events, start=1):
        outcome = ledger.apply_recorded(position, f"e{position}", kind, time, payload)
        if outcome.account is None or outcome.anomaly or kind == "void":
            continue  # an event that did not bring its account to its time
        state = ledger.accounts[outcome.account]
        figures = Figures.of(state, time)
        assert (figures.balance, figures.reserved, figures.available) == (
            state.balance, state.reserved, state.available), (kind, payload)
        assert figures.available == figures.balance - figures.reserved


def test_an_account_with_nothing_recorded_has_every_figure_at_zero() -> None:
    """Nothing yet: balance, reserved, available and debt 0, and `general` listed at 0
    (docs/semantics.md, "Pools"), as a whole and pool by pool."""
    nothing = Figures(balance=0, reserved=0, available=0, debt=0, pools={"general": 0})
    assert Figures.of(None, 5) == nothing
    assert Figures.by_pool(None, 5) == {"general": nothing}


def test_credits_a_job_holds_all_of_end_as_held_none_unused() -> None:
    """A grant of 10 ending at 100 that a pending job holds whole: 0 unused, 10 held."""
    from projections.events import AccountOpened, CreditsGranted, JobSubmitted
    from projections.figures import ending_credits

    ledger = Ledger()
    ledger.apply(1, "open", 0, AccountOpened("a"))
    ledger.apply(2, "g1", 0, CreditsGranted("a", 10, 100))
    assert ledger.apply(3, "s1", 1, JobSubmitted("a", "j1", 10, 0)).ok
    assert ending_credits(ledger.accounts["a"]) == [("general", "g1", 100, 0, 10, False)]
