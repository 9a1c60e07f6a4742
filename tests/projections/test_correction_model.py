"""The fold with priorities, adjustments, voids and reversals against a plain model.

Events arrive in random time order (many are late) and reversals name random earlier
events, reversals included. After each arrival the live projection, a replay and a
straight fold must give the model's balances at several times.
"""

from __future__ import annotations

from typing import Any

from correction_model import Event, fold, pools
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import GPUCreditTracker
from projections.replay import fold_canonical, replay

times = st.integers(0, 12)
pool_names = st.sampled_from(["general", "general", "h100"])


@st.composite
def histories(draw: st.DrawFn) -> list[Event]:
    events: list[Event] = []
    for index in range(draw(st.integers(1, 16))):
        kind = draw(st.sampled_from(["grant", "grant", "consume", "consume", "adjust",
                                     "void", "reverse"]))
        event_id = f"e{index}"
        time = draw(times)
        if kind == "grant":
            expiry = draw(st.sampled_from([None, 6, 12, 20]))
            events.append(Event(event_id, kind, index, time, draw(st.integers(1, 30)),
                                draw(pool_names), None if expiry is None else max(expiry, time + 1),
                                draw(st.sampled_from([50, 50, 10, 90]))))
        elif kind == "consume":
            events.append(Event(event_id, kind, index, time, draw(st.integers(1, 30)),
                                draw(pool_names)))
        elif kind == "adjust":
            events.append(Event(event_id, kind, index, time,
                                draw(st.integers(-20, 20).filter(bool)), draw(pool_names)))
        elif kind == "void":
            grants = [e.id for e in events if e.kind == "grant"]
            if grants:
                events.append(Event(event_id, kind, index, time,
                                    target=draw(st.sampled_from(grants))))
        elif events:
            events.append(Event(event_id, kind, index, time,
                                target=draw(st.sampled_from([e.id for e in events]))))
    return events


def recorded(event: Event) -> NewEvent:
    payload: dict[str, Any]
    if event.kind in ("grant", "consume", "adjust"):
        payload = {"account": "a", "amount": event.amount}
        if event.pool != "general":
            payload["pool"] = event.pool
        if event.kind == "adjust":
            payload["reason"] = "correction"
        if event.expiry is not None:
            payload["expiry"] = event.expiry
        if event.kind == "grant" and event.priority != 50:
            payload["priority"] = event.priority
    elif event.kind == "void":
        payload = {"grant": event.target}
    else:
        payload = {"event": event.target, "reason": "mistake"}
    return NewEvent(event.id, "a", event.kind, event.time, payload)


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories())
def test_the_fold_agrees_with_the_plain_model(history: list[Event]) -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, "a")
    for n, event in enumerate(history, start=1):
        journal.append([recorded(event)])
        known = history[:n]
        for at in (0, 5, 6, 12, 30):
            expected = fold(known, up_to=at).balance(at)
            assert tracker.get_balance(at) == expected, f"after {event}, at {at}"
            # Every pool used is listed, however it came to 0 ("general" when none is).
            assert set(tracker.pool_balances(at)) == (pools(known, at) or {"general"}), (
                f"pools after {event}, at {at}")
    final = fold(history).balance(100)
    for ledger in (replay(journal).ledger, fold_canonical(journal)):
        account = ledger.accounts.get("a")
        got = 0 if account is None else account.pool_balances_at(100)
        assert (got if isinstance(got, int) else sum(got.values())) == final
        assert (set() if isinstance(got, int) else set(got)) == pools(history)
