"""Histories drawn for arrival-order tests: grants, submits (two accounts often submit one
job id), job steps, usage and reversals, each at an event time of its own, and arrival
orders of them cut into import batches."""

from __future__ import annotations

from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

ACCOUNTS = ("a", "b")
JOBS = ("j1", "j2")  # few ids: both accounts often submit one
Event = dict[str, Any]


@st.composite
def histories(draw: st.DrawFn) -> list[Event]:
    """Grants, submits (both accounts may submit one id), job steps, usage and
    reversals, each at an event time of its own."""
    events: list[Event] = [{"type": "grant", "account": name,
                            "amount": draw(st.integers(10, 100))} for name in ACCOUNTS]
    for _ in range(draw(st.integers(1, 4))):
        events.append({"type": "submit", "account": draw(st.sampled_from(ACCOUNTS)),
                       "job": draw(st.sampled_from(JOBS)), "cost": draw(st.integers(0, 40)),
                       "priority": 1})
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["start", "start", "complete", "complete", "cancel"]))
        step: Event = {"type": kind, "job": draw(st.sampled_from(JOBS))}
        if kind == "complete":
            step["success"] = draw(st.booleans())
        events.append(step)
    for _ in range(draw(st.integers(0, 2))):
        events.append({"type": "consume", "account": draw(st.sampled_from(ACCOUNTS)),
                       "amount": draw(st.integers(1, 30))})
    for i, event in enumerate(events):
        event["id"] = f"e{i}"
    reversed_ = draw(st.lists(st.sampled_from([e["id"] for e in events]), max_size=2,
                              unique=True))
    for target in reversed_:
        events.append({"type": "reverse", "event": target, "reason": "wrong",
                       "id": f"r-{target}"})
    times = draw(st.permutations(range(1, len(events) + 1)))
    for event, time in zip(events, times, strict=True):
        event["time"] = time * 10
    return events


def arrival(events: list[Event], data: st.DataObject, label: str) -> list[list[Event]]:
    """The events in an arrival order drawn by `data` (a reversal after the event it
    names, as it must be), cut into import batches."""
    shuffled = data.draw(st.permutations(events), label=f"{label}: order")
    order: list[Event] = []
    waiting = list(shuffled)
    while waiting:  # the first event whose target, if any, has arrived
        i = next(i for i, e in enumerate(waiting) if e["type"] != "reverse"
                 or any(o["id"] == e["event"] for o in order))
        order.append(waiting.pop(i))
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=len(order), max_size=len(order)),
                      label=f"{label}: batches")
    return in_batches(order, sizes)


def in_batches(items: list[T], sizes: list[int]) -> list[list[T]]:
    """`items` cut into consecutive batches of `sizes` (sizes past the end unused)."""
    batches, i = [], 0
    for size in sizes:
        if i < len(items):
            batches.append(items[i:i + size])
            i += size
    return batches
