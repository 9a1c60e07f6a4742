"""Replay and verification: rebuild every projection from the journal, prove it matches.

`replay` ingests the journal in arrival order through a `Projector`, so late events are
re-projected and the same revisions are found every time; `verify` checks the hash
chain and that replay reproduces the digests recorded with the saved checkpoints.
Checkpoints (the journal's `snapshots` table, name `CHECKPOINT`) are a cache: a facade
opening a large journal starts from the newest one that is still valid.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from eventstore import JournalLike, RecordedEvent, SnapshotInfo
from projections.bulk import paused_gc
from projections.ledger import Ledger
from projections.outcomes import Revision
from projections.projector import Projector, apply_recorded

CHECKPOINT = "ledger"
"""Snapshot name under which the ledger's checkpoints are saved."""

Progress = Callable[[int, int], None]


@dataclass(slots=True)
class ReplayReport:
    """What a replay rebuilt."""

    digest: str
    events: int
    revisions: list[Revision]
    anomalies: list[tuple[int, str, str]]
    ledger: Ledger = field(repr=False)
    position: int = 0


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The verdict of `verify`: ok, or the first position found wrong and why."""

    ok: bool
    first_bad_position: int | None = None
    problem: str | None = None
    checked_events: int = 0
    checked_checkpoints: int = 0


def journal_reader(journal: JournalLike, to_time: int | None = None) -> Callable[
        [tuple[int, int], int, int | None], Iterable[RecordedEvent]]:
    """A projector reader over `journal`, optionally limited to event times <= to_time."""

    def read(after: tuple[int, int], to_position: int,
             limit: int | None) -> Iterable[RecordedEvent]:
        bound = limit if to_time is None else (to_time if limit is None else min(limit, to_time))
        return journal.read(after=after, to_position=to_position, to_time=bound,
                            order="canonical")

    return read


def replay(journal: JournalLike, *, to_time: int | None = None,
           to_position: int | None = None, progress: Progress | None = None,
           checkpoint: bool = False) -> ReplayReport:
    """Rebuild the ledger from the journal (events with time <= to_time, position <=
    to_position), in arrival order, re-projecting late events as they came.

    `checkpoint`: save the rebuilt state of a whole journal as a checkpoint (and drop the
    ones a late event made stale), so facades and the next replay start from it.
    """
    head = journal.head() if to_position is None else min(to_position, journal.head())
    # A replay pays for snapshots on every event but needs them only for late events,
    # and then once: sparse snapshots and no remembered outcomes (a late event folds the
    # old timeline beside the new one) make the common, in-order journal fast.
    projector = Projector(journal_reader(journal, to_time), min_snapshot_every=20_000,
                          snapshot_factor=8, recent_outcomes=0)
    done = 0
    with paused_gc():
        for rec in journal.read(to_position=head, order="position"):
            if to_time is None or rec.time <= to_time:
                projector.ingest(rec)
            done += 1
            if progress is not None and done % 5000 == 0:
                progress(done, head)
    if progress is not None:
        progress(done, head)
    ledger = projector.ledger
    if checkpoint and to_time is None and to_position is None:
        # One checkpoint is enough to resume from, and verify re-derives every one kept.
        journal.drop_snapshots(CHECKPOINT)
        save_checkpoint(journal, ledger, head)
    return ReplayReport(ledger.digest(), ledger.applied, list(projector.revisions),
                        list(ledger.anomalies), ledger, head)


def fold_canonical(journal: JournalLike, *, to_position: int | None = None,
                   to_time: int | None = None) -> Ledger:
    """Fold the journal straight in canonical order (no revisions): the state at to_time as
    known at to_position."""
    ledger = Ledger()
    with paused_gc():
        for rec in journal.read(to_position=to_position, to_time=to_time, order="canonical"):
            apply_recorded(ledger, rec)
    return ledger


# -- checkpoints ---------------------------------------------------------------------------


def save_checkpoint(journal: JournalLike, ledger: Ledger, position: int) -> SnapshotInfo:
    """Save `ledger`, which holds every event recorded up to `position`, as a checkpoint."""
    state = pickle.dumps(ledger, protocol=pickle.HIGHEST_PROTOCOL)
    return journal.save_snapshot(CHECKPOINT, position, ledger.last[0], ledger.digest(), state)


def checkpoint_is_valid(journal: JournalLike, info: SnapshotInfo) -> bool:
    """Valid while no event recorded after it lands before its last event on the timeline."""
    for _ in journal.read(after_position=info.position, to_time=info.event_time - 1,
                          order="position", batch_size=1):
        return False
    return True


def latest_valid_checkpoint(journal: JournalLike) -> tuple[SnapshotInfo, Ledger] | None:
    """The newest checkpoint still valid, loaded; invalid newer ones are dropped."""
    for info in sorted(journal.snapshots(CHECKPOINT), key=lambda s: s.position, reverse=True):
        if checkpoint_is_valid(journal, info):
            ledger: Ledger = pickle.loads(journal.load_snapshot(info.id))
            return info, ledger
    return None


def invalidate_after(journal: JournalLike, late_time: int) -> int:
    """A late event at `late_time` makes every checkpoint after that time stale."""
    return journal.drop_snapshots(CHECKPOINT, from_time=late_time + 1)


def verify(journal: JournalLike, *, progress: Progress | None = None) -> VerifyReport:
    """Check the hash chain, then that replay reproduces every checkpoint's digest."""
    bad = journal.verify()
    if bad is not None:
        return VerifyReport(False, bad, f"hash chain broken at position {bad}")
    checkpoints = sorted(journal.snapshots(CHECKPOINT), key=lambda s: (s.position, s.id))
    checked = 0
    for info in checkpoints:
        try:
            stored: Ledger = pickle.loads(journal.load_snapshot(info.id))
            stored_digest = stored.digest()
        except Exception as exc:  # a damaged cache entry is a finding, not a crash
            return VerifyReport(False, info.position,
                                f"checkpoint {info.id} at position {info.position} is "
                                f"unreadable: {exc}")
        if stored_digest != info.digest:
            return VerifyReport(False, info.position,
                                f"checkpoint {info.id} state does not match its recorded digest")
        rebuilt = fold_canonical(journal, to_position=info.position)
        if rebuilt.digest() != info.digest:
            return VerifyReport(False, info.position,
                                f"replay to position {info.position} gives digest "
                                f"{rebuilt.digest()[:16]}…, checkpoint {info.id} recorded "
                                f"{info.digest[:16]}…")
        checked += 1
    report = replay(journal, progress=progress)
    return VerifyReport(True, None, None, report.events, checked)
