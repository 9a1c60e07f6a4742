"""One facade's connection to a journal: catch up, decide, append, in one transaction.

Both facades decide the same way: under the journal's lock for the accounts involved,
ingest every event other writers recorded since we last looked, let the caller build the
events from that state (raising, and so appending nothing, when the call is invalid),
append them in the same transaction, then ingest them. The fold decides their outcomes.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from eventstore import JournalLike, MemoryJournal, NewEvent, RecordedEvent
from projections.events import DomainEvent, to_payload
from projections.ledger import AccountState, Ledger
from projections.outcomes import Outcome, Revision
from projections.projector import Projector

JournalArg = JournalLike | str | None


def open_journal(journal: JournalArg) -> JournalLike:
    """None: a plain in-memory journal; a string: a database URL; else the journal itself."""
    if journal is None:
        return MemoryJournal()
    if isinstance(journal, str):
        from eventstore import Journal  # type: ignore[attr-defined,unused-ignore]

        opened: JournalLike = Journal(journal)
        return opened
    return journal


class LedgerSession:
    """A projection kept current with one journal, and the way decisions are appended."""

    def __init__(self, journal: JournalArg) -> None:
        self.journal = open_journal(journal)
        # Only this process writes an in-memory journal, so its head tells all.
        self._in_memory = self.journal.url is None
        self.projector = Projector(self._read_canonical)
        self.lock = threading.RLock()
        # Event ids: unique per session without a random draw per call.
        self._ids = itertools.count(1)
        self._id_prefix = os.urandom(8).hex()
        if self.journal.url is not None:
            self._resume_from_checkpoint()
        self.catch_up()

    def _resume_from_checkpoint(self) -> None:
        # A large journal opens from its newest valid checkpoint instead of a full replay.
        from projections.replay import latest_valid_checkpoint

        found = latest_valid_checkpoint(self.journal)
        if found is not None:
            info, ledger = found
            self.projector.start_from(ledger, info.position)

    def _read_canonical(self, after: tuple[int, int], to_position: int,
                        to_time: int | None) -> Iterable[RecordedEvent]:
        return self.journal.read(after=after, to_position=to_position, to_time=to_time,
                                 order="canonical")

    @property
    def ledger(self) -> Ledger:
        return self.projector.ledger

    def new_id(self) -> str:
        return f"{self._id_prefix}-{next(self._ids)}"

    def event(self, time: int, event: DomainEvent,
              stream: str) -> tuple[NewEvent, DomainEvent]:
        """A new journal event for `event` at `time`, paired with the event itself."""
        return NewEvent(self.new_id(), stream, event.type, time, to_payload(event)), event

    def catch_up(self) -> dict[int, Outcome]:
        """Ingest everything recorded since the last look (other writers included)."""
        with self.lock:
            if self._in_memory and self.journal.head() == self.projector.position:
                return {}
            return self.projector.catch_up(
                self.journal.read(after_position=self.projector.position, order="position")
            )

    def decide(self, locks: Iterable[str],
               build: Callable[[Ledger], Sequence[tuple[NewEvent, DomainEvent]]]
               ) -> list[Outcome]:
        """Build events from the caught-up state and append them atomically; their outcomes.

        `build` returns each new journal event with its domain event; it raises (and so
        nothing is appended) when the call is not valid on the caught-up state.
        """
        with self.lock:
            with self.journal.transaction(sorted(set(locks))) as tx:
                if not (self._in_memory and tx.head() == self.projector.position):
                    self.projector.catch_up(
                        tx.read(after_position=self.projector.position, order="position")
                    )
                built = build(self.projector.ledger)
                if not built:
                    return []
                recorded = tx.append([new for new, _ in built])
            fresh = [rec.position for rec in recorded]
            start = self.projector.position
            if fresh == list(range(start + 1, start + 1 + len(recorded))):
                # Nobody wrote in between: apply the events we hold, without re-reading.
                outcomes = {
                    rec.position: self.projector.ingest(rec, event)
                    for rec, (_, event) in zip(recorded, built, strict=True)
                }
            else:
                outcomes = self.catch_up()
            self._invalidate_stale_checkpoints()
            return [self._outcome(rec, outcomes) for rec in recorded]

    def _invalidate_stale_checkpoints(self) -> None:
        late = self.projector.late_times
        if late and self.journal.url is not None:
            from projections.replay import invalidate_after

            invalidate_after(self.journal, min(late))
        late.clear()

    def _outcome(self, rec: RecordedEvent, fresh: dict[int, Outcome]) -> Outcome:
        if rec.position in fresh:
            return fresh[rec.position]
        # An idempotent retry returned an event recorded before: recompute its outcome.
        return self.outcome_of(rec)

    def outcome_of(self, rec: RecordedEvent) -> Outcome:
        """The outcome of an already-recorded event on the current timeline."""
        ledger = self.projector.state_at(rec.time - 1) if rec.time > -(2**62) else Ledger()
        for later in self.journal.read(after=ledger.last, to_position=self.projector.position,
                                       to_time=rec.time, order="canonical"):
            outcome = ledger.apply_recorded(later.position, later.id, later.type, later.time,
                                            later.payload)
            if later.position == rec.position:
                return outcome
        raise LookupError(f"event {rec.id!r} at position {rec.position} is not on the timeline")

    def now(self, clock_time: int) -> int:
        """Event time of a live decision: never before anything already recorded."""
        return max(clock_time, self.ledger.last[0])

    def account_at(self, name: str, time: int) -> AccountState | None:
        """The account as it stood at `time` (live state when nothing of it came later)."""
        account = self.ledger.accounts.get(name)
        if account is None or account.last_time <= time:
            return account
        return self.projector.state_at(time).accounts.get(name)

    def known_position(self, as_known_at: int) -> int:
        """Validate an as-known-at position: 0..head."""
        from projections.events import require_non_negative_int

        require_non_negative_int("as_known_at", as_known_at)
        return min(as_known_at, self.journal.head())

    def ledger_as_known(self, as_known_at: int, time: int | None) -> Ledger:
        """The ledger from only the events recorded at positions <= as_known_at (and with
        event time <= `time`, if given): what was known then."""
        from projections.replay import fold_canonical

        return fold_canonical(self.journal, to_position=self.known_position(as_known_at),
                              to_time=time)

    @property
    def revisions(self) -> list[Revision]:
        return list(self.projector.revisions)

    def digest(self) -> str:
        with self.lock:
            self.catch_up()
            return self.ledger.digest()


def payload_summary(outcome: Outcome) -> dict[str, Any]:
    """A JSON-ready summary of an outcome, for facades' callers."""
    return {"position": outcome.position, "event_id": outcome.event_id, **outcome.reported()}
