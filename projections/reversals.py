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
    event recorded before it, so the graph has no cycles; should a hand-made journal hold
    one anyway, the events on it count as in (nothing is dropped on a contradiction).
    """
    if not reversals:
        return frozenset()
    by_target: dict[str, list[str]] = {}
    for reversal, target in reversals.items():
        by_target.setdefault(target, []).append(reversal)
    memo: dict[str, bool] = {}
    visiting: set[str] = set()

    def out(event_id: str) -> bool:
        if event_id in memo:
            return memo[event_id]
        if event_id in visiting:
            return False
        visiting.add(event_id)
        # Iterative in spirit: chains of reversals of reversals are short in practice.
        result = any(not out(r) for r in by_target.get(event_id, ()))
        visiting.discard(event_id)
        memo[event_id] = result
        return result

    return frozenset(target for target in by_target if out(target))
