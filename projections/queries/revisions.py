"""What late events changed: revisions with the times of both events."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eventstore import JournalLike, RecordedEvent
from projections.outcomes import Revision
from projections.queries.common import json_time


@dataclass(frozen=True, slots=True)
class RevisionRow:
    """A revision with the event times of the late event and of the event it changed."""

    revision: Revision
    late_time: int | None
    late_type: str | None
    time: int | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready revision (integer times)."""
        return {**self.revision.as_dict(), "late_time": json_time(self.late_time),
                "late_type": self.late_type, "time": json_time(self.time)}


def revision_rows(journal: JournalLike, revisions: Iterable[Revision]) -> list[RevisionRow]:
    """Each revision with the times of both events, looked up once per event."""
    cache: dict[str, RecordedEvent | None] = {}

    def get(event_id: str) -> RecordedEvent | None:
        if event_id not in cache:
            cache[event_id] = journal.get(event_id)
        return cache[event_id]

    rows = []
    for r in revisions:
        late, affected = get(r.late_event_id), get(r.event_id)
        rows.append(RevisionRow(r, None if late is None else late.time,
                                None if late is None else late.type,
                                None if affected is None else affected.time))
    return rows


def describe_reported(reported: Mapping[str, Any]) -> str:
    """An outcome as a caller was told it: `ok, debt 10, paid by g1 5`."""
    parts = ["ok" if reported.get("ok", True) else "rejected"]
    if "debt_after" in reported:
        parts.append(f"debt {reported['debt_after']:,}")
    if "charge" in reported:
        parts.append(f"charged {reported['charge']:,}")
    if reported.get("paid_by"):
        paid = ", ".join(f"{g} {a:,}" for g, a in reported["paid_by"])
        parts.append(f"paid by {paid}")
    if "reason" in reported:
        parts.append(str(reported["reason"]))
    return "; ".join(parts)

