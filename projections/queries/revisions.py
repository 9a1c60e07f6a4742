"""What late events changed: revisions with the times of both events."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from eventstore import JournalLike, RecordedEvent
from projections.outcomes import Revision


@dataclass(frozen=True, slots=True)
class RevisionRow:
    """A revision with the event times of the late event and of the event it changed."""

    revision: Revision
    late_time: int | None
    late_type: str | None
    time: int | None

    # The revision's own fields, then the times of both events.
    json_keys: ClassVar[tuple[str, ...]] = ("*revision", "late_time:time", "late_type",
                                            "time:time")


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

