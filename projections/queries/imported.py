"""What an import did beyond appending: late events, revisions, anomalies among the new."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eventstore import JournalLike
from projections.replay import Progress, replay


@dataclass(slots=True)
class ImportEffects:
    """Of the events recorded after `after` (one import): how many landed before events
    already recorded (late), which reported outcomes they changed (revisions), and which
    of them the fold keeps without effect (anomalies: time, event id, why)."""

    appended: int
    late: int
    revisions: int
    anomalies: list[tuple[int, str, str]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready effects."""
        return {"appended": self.appended, "late": self.late, "revisions": self.revisions,
                "anomalies": [list(a) for a in self.anomalies]}


def import_effects(journal: JournalLike, *, after: int, latest_before: int | None,
                   progress: Progress | None = None) -> ImportEffects:
    """The effects of the events recorded at positions after `after`; `latest_before`
    is the latest event time the journal held before them (None: it was empty)."""
    new_ids: set[str] = set()
    late = 0
    for rec in journal.read(after_position=after, order="position"):
        new_ids.add(rec.id)
        if latest_before is not None and rec.time < latest_before:
            late += 1
    if not new_ids:
        return ImportEffects(0, 0, 0)
    report = replay(journal, progress=progress)
    revisions = sum(1 for r in report.revisions if r.late_event_id in new_ids)
    anomalies = [a for a in report.anomalies if a[1] in new_ids]
    return ImportEffects(len(new_ids), late, revisions, anomalies)
