"""What late events changed in a journal, kept up to date as it grows.

`gpu-credits revisions` replays the whole journal once. A process that answers again and
again (the service's `GET /v1/revisions`, the web view's pages) keeps the projector such a
replay folds with and feeds it only what was recorded since it last asked: after the
first pass, an answer costs the events recorded since, not the journal.
"""

from __future__ import annotations

import threading

from eventstore import JournalLike, RecordedEvent
from projections.bulk import paused_gc
from projections.outcomes import Revision
from projections.owners import event_account, former_job_account
from projections.projector import LeanRow, Projector, as_lean
from projections.queries.revisions import RevisionRow, revision_rows
from projections.replay import HeldWhileSmall, batch_parts, lean_rows, replay_projector


class RevisionLog:
    """Every revision of a journal's outcomes, in the order they came, as `replay` finds
    them; safe to call from several threads (one catches up at a time)."""

    def __init__(self, journal: JournalLike) -> None:
        self.journal = journal
        self._lock = threading.Lock()
        self._projector: Projector | None = None
        # The rows the projector reads back for late events, held while the journal is
        # small (`HeldWhileSmall`): set with the projector.
        self._held: HeldWhileSmall | None = None
        self._started = False  # set once the first pass is done, not when it begins
        self._rows: list[RevisionRow] = []
        # The revised events, by id: a recorded event never changes.
        self._revised: dict[str, RecordedEvent | None] = {}

    @property
    def started(self) -> bool:
        """Whether the journal was folded once already (later calls fold what is new).
        False while a first pass runs: a caller that would not wait for one (the web
        view's pages) then does not wait for it either."""
        return self._started

    def revisions(self) -> list[Revision]:
        """Every revision up to the journal's head."""
        with self._lock:
            return list(self._caught_up().revisions)

    def rows(self) -> tuple[list[RevisionRow], dict[str, str | None]]:
        """Every revision with the times of both its events (`revision_rows`), and the
        account each revised event belongs to by its id (`owners.revision_accounts`
        says which)."""
        with self._lock:
            projector = self._caught_up()
            revisions = projector.revisions
            # Rows never change once made (the events they name never do): only the new
            # revisions' are made.
            self._rows.extend(revision_rows(self.journal, revisions[len(self._rows):]))
            return list(self._rows), self._accounts(projector)

    def accounts(self) -> dict[str, str | None]:
        """The account of each event a revision found so far revised, by its id, as
        `rows` gives them, from this log's own fold (as far as the revisions it found,
        whatever a live projection beside it has read yet), without catching up."""
        with self._lock:
            projector = self._projector or self._caught_up()
            return self._accounts(projector)

    def _accounts(self, projector: Projector) -> dict[str, str | None]:
        wanted = sorted({r.event_id for r in projector.revisions} - self._revised.keys())
        if wanted:
            found = self.journal.get_many(wanted)
            self._revised.update((event_id, found.get(event_id)) for event_id in wanted)
        # The account is the fold's at the head, asked anew each time: a submit
        # recorded since may have given a job (and so its steps) to an account.
        jobs = projector.ledger.jobs
        former = former_job_account(self.journal, projector.ledger)
        return {event_id: None if rec is None
                else event_account(rec, jobs, self.journal.get, former)
                for event_id, rec in self._revised.items()}

    def _caught_up(self) -> Projector:
        if self._projector is None:
            # The projector `replay` folds with, per-account re-projection included: a
            # batch with late events of two accounts then names each account's own
            # earliest event as the cause of its revisions, as `replay` does.
            self._held = HeldWhileSmall(self.journal)
            self._projector = replay_projector(self.journal, held=self._held)
        projector = self._projector
        held = self._held
        assert held is not None  # set with the projector
        position = projector.position
        # Up to the head as it is now, batches and rows alike: a batch appended while they
        # are read is taken whole next time, not an event at a time now.
        head = self.journal.head()
        # Events appended together are one step of knowledge, as `replay` takes them: an
        # import's late events revise only what was known before the import, never
        # each other.
        recorded = getattr(self.journal, "batches", None)
        batches = {} if recorded is None or head <= position else {
            b.first: min(b.last, head)
            for b in recorded(after_position=position, to_position=head)}
        # Plain rows, as `replay` hands them over: an in-order batch is folded straight
        # from them until the first late event (half the cost of a first pass).
        rows = lean_rows(self.journal, after_position=position, to_position=head,
                         order="position")

        def hand_over(part: list[LeanRow], begin: int, more: bool) -> bool:
            # Held before a part that may read its own rows back (as `replay` holds them);
            # a part that folds straight reads nothing, and is held once it has.
            if more:
                if not projector.ingest_rows(part, known_before=begin, only_straight=True):
                    return False
                held.add_all(list(map(as_lean, part)))
                return True
            held.add_all(list(map(as_lean, part)))
            return projector.ingest_rows(part, known_before=begin)

        with paused_gc():
            # Cut where `replay` cuts: a late event's revisions name its part's earliest
            # event, so other cuts would name other causes.
            for _ in batch_parts(rows, batches, hand_over):
                pass
        self._started = True
        return projector
