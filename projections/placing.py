"""Decisions placed in the past: tried on the corrected timeline before they are recorded.

A decision timed before the latest recorded event lands inside history. It may revise
what is still open after it (a pending job's acceptance: that is what late events do,
and the revisions say so), but it must not make a recorded event invalid: a job handed
to a worker would become rejected, its charge vanish, its place go to another job.
Usage reports are facts and are never refused for this; decisions are, and the caller
can make them at a later time instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventstore import NewEvent
from projections.errors import InvalidTransition
from projections.outcomes import Outcome
from projections.session import Draft, LedgerSession


@dataclass(frozen=True, slots=True)
class _Trial:
    """An event not yet recorded, as the projector's trial fold reads it."""

    position: int
    id: str
    type: str
    time: int
    payload: Any


def try_in_past(session: LedgerSession, draft: Draft, built: Sequence[tuple[NewEvent, Any]]
                ) -> list[Outcome] | None:
    """For events placed before the latest recorded one: their outcomes on the
    corrected timeline; raise `InvalidTransition` if any is invalid there or would make
    a recorded event invalid. None when nothing is in the past, or for a retry.

    A retry's events were tried when first decided: the timeline now holds them already,
    so trying them again would find the job submitted, started or settled by themselves.
    A live decision's events are recorded at the latest event time or later, whatever
    time they were built with: none is in the past."""
    if draft.replaying or draft.live or not built \
            or min(new.time for new, _ in built) >= draft.ledger.last[0]:
        return None
    head = session.projector.position
    trial = [_Trial(head + 1 + i, new.id, new.type, new.time, new.payload)
             for i, (new, _) in enumerate(built)]
    outcomes, conflicts = session.projector.trial(trial)
    for outcome in outcomes:
        if outcome.anomaly:
            raise InvalidTransition(f"at time {outcome.time}: {outcome.reason}")
    if conflicts:
        c = conflicts[0]
        raise InvalidTransition(
            f"placing this at time {built[0][0].time} would invalidate the {c.type} "
            f"{c.event_id!r} recorded at position {c.position} (time {c.time}): "
            f"{c.reason}; record it at a later time, or now (give no time)")
    return outcomes
