"""What an import did beyond appending: late events, revisions, anomalies among the new."""

from __future__ import annotations

from dataclasses import dataclass, field

from eventstore import JournalLike
from projections.replay import Progress, replay


@dataclass(slots=True)
class ImportEffects:
    """Of the events recorded after `after` (one import): how many landed before events
    already recorded (late), which reported outcomes they changed (revisions), and which
    events the fold now keeps without effect because of them (anomalies: time, event id,
    why): new events, and earlier ones a late event among them turned into an anomaly."""

    appended: int
    late: int
    revisions: int
    anomalies: list[tuple[int, str, str]] = field(default_factory=list)


def import_effects(journal: JournalLike, *, after: int, latest_before: int | None,
                   progress: Progress | None = None, count: int | None = None
                   ) -> ImportEffects:
    """The effects of the events recorded at positions after `after` (the next `count`
    of them; None: every one); `latest_before` is the latest event time the journal held
    before them (None: it was empty)."""
    # Counted, not collected: an import of a million lines would otherwise hold a
    # million ids here while the replay below holds the whole state.
    appended = late = 0
    last = after
    until = None if count is None else after + count
    if count == 0:
        return ImportEffects(0, 0, 0)
    for rec in journal.read(after_position=after, to_position=until, order="position"):
        appended += 1
        last = rec.position
        if latest_before is not None and rec.time < latest_before:
            late += 1
    if not appended:
        return ImportEffects(0, 0, 0)
    report = replay(journal, to_position=last, progress=progress)
    ours = [r for r in report.revisions if r.late_position > after]
    revised = {r.event_id for r in ours}
    # The new events among those with an anomaly: read the new ones again, keeping only
    # the ids that have one (few). An earlier event is the import's doing when one of
    # its late events revised it.
    flagged = {a[1] for a in report.anomalies}
    new = {rec.id for rec in journal.read(after_position=after, to_position=last,
                                          order="position") if rec.id in flagged}
    anomalies = [a for a in report.anomalies if a[1] in new or a[1] in revised]
    return ImportEffects(appended, late, len(ours), anomalies)
