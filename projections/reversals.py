"""Which events are reversed, given every reversal known: a pure function of their graph.

A reversal names one recorded event; that event is out of every fold while the reversal
itself is in. Reversing a reversal puts its target back, reversing that one takes it out
again, and so on. The answer depends on the reversals known (recorded up to a position),
never on where they lie on the timeline: a reversal undoes an event as if it had never
happened, at every event time.
"""

from __future__ import annotations

from collections.abc import Mapping


def reversed_ids(reversals: Mapping[str, str]) -> frozenset[str]:
    """The ids out of the fold, given every known reversal as {reversal id: target id}.

    An event is out when some reversal of it is itself in. A reversal can only name an
    event recorded before it, so the graph has no rings; should a hand-made journal hold
    one anyway (reversals naming each other round to the first), the ring is a
    contradiction and is not read: what a reversal on it says of the next one on it
    counts for nothing, so nothing is dropped by it. A reversal from outside the ring
    still counts, as anywhere. The answer is the graph's, whatever order the reversals
    come in.
    """
    if not reversals:
        return frozenset()
    by_target: dict[str, list[str]] = {}
    for reversal, target in reversals.items():
        by_target.setdefault(target, []).append(reversal)
    out: dict[str, bool] = {}
    # Tarjan's strongly connected components, from each event to its reversals: a
    # component is complete once everything its events' reversals lead to is, so each is
    # decided after the reversals it depends on. Each reversal names one event, so a
    # component of more than one event (or of one naming itself) is a plain ring.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(event_id: str) -> None:
        # Recursive: chains of reversals of reversals are short in practice.
        index[event_id] = low[event_id] = len(index)
        stack.append(event_id)
        on_stack.add(event_id)
        for r in by_target.get(event_id, ()):
            if r not in index:
                visit(r)
                low[event_id] = min(low[event_id], low[r])
            elif r in on_stack:
                low[event_id] = min(low[event_id], index[r])
        if low[event_id] != index[event_id]:
            return
        component: set[str] = set()
        while True:
            member = stack.pop()
            on_stack.discard(member)
            component.add(member)
            if member == event_id:
                break
        for member in component:
            out[member] = any(not out[r] for r in by_target.get(member, ())
                              if r not in component)

    for target in by_target:
        if target not in index:
            visit(target)
    return frozenset(target for target in by_target if out[target])
