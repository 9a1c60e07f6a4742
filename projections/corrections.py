"""`Corrections`: single grants and usage reports, and the corrections finance makes.

Every call is one event decided like the facades' (under the lock of the account it
touches, on the caught-up state, so calls are linearizable and a retry under the same
`event_id` appends nothing). A call without `at` is live: it happens now, never earlier
than the latest event recorded. A refused call raises ValueError (or LookupError for an
unknown id: `UnknownEvent`) and appends nothing.

- `grant`, `consume`: one grant or usage report, with the optional fields of the JSON
  Lines format (priority, memo).
- `adjust`: a manual credit (amount > 0, like a grant without expiry: it pays debt
  first) or debit (amount < 0, like a usage report), with its reason.
- `void`: from `at` on, the named grant's unused credits no longer count. It must name a
  grant that is recorded and not voided already.
- `reverse`: the named recorded event leaves every fold, as if it had never happened;
  reversing a reversal restores its event. An event already reversed is refused.
"""

from __future__ import annotations

import time as _time
from collections.abc import Callable

from eventstore import NewEvent, RecordedEvent
from projections import events
from projections.errors import UnknownEvent
from projections.events import (
    DEFAULT_GRANT_PRIORITY,
    GENERAL,
    DomainEvent,
    far_live_time_problem,
)
from projections.importing import far_time_problem
from projections.outcomes import Outcome
from projections.placing import try_in_past
from projections.session import Draft, JournalArg, LedgerSession, SessionFacade
from projections.validation import (
    clock_time,
    require_clock,
    require_expiry_after,
    require_int,
    require_name,
)


def _wall_clock() -> int:
    return int(_time.time())


def _pool(pool: str | None) -> str:
    """The pool an event records: none given is the general pool. Not checked here: the
    event checks it in its place among its fields, so the first bad field is named."""
    return GENERAL if pool is None else pool


class Corrections(SessionFacade):
    """Record single events and corrections in one journal (the command line's writer,
    and the HTTP service's for grants and usage reports).

    `journal` may be a live `LedgerSession` (the service's): the calls then decide on its
    projection, under its locks, instead of opening a second one.
    """

    def __init__(self, journal: JournalArg | LedgerSession = None,
                 clock: Callable[[], int] | None = None, *,
                 allow_far_times: bool = False) -> None:
        self._clock = require_clock(clock) or _wall_clock
        self._session = (journal if isinstance(journal, LedgerSession)
                         else LedgerSession(journal))
        self.allow_far_times = allow_far_times

    # -- deciding ------------------------------------------------------------------------

    def _time(self, draft: Draft, at: int | None) -> int:
        if at is not None:
            given = require_int("at", at)
            # Decided now (`decision(..., live=True)`): recorded at the latest event time
            # if `at` is earlier, so checked there.
            when = draft.now(given) if draft.live else given
        else:
            given = clock_time(self._clock)
            when = draft.now(given)
        # A retry rebuilds a decision the journal holds: the rule was for taking it (under
        # whatever a caller allowed then), not for answering it again.
        why = None if self.allow_far_times or draft.replaying else (
            far_time_problem("time", when) if when == given
            else far_live_time_problem(when, draft.ledger.last[1]))
        if why is not None:
            raise ValueError(why)
        return when

    def _decide(self, stream: str, at: int | None, make: Callable[[Draft], DomainEvent],
                event_id: str | None, *, tried: bool = False) -> Outcome:
        """Record what `make` builds at `at` (else now). `tried`: a decision refused if
        placed in the past where it would invalidate a recorded event: one that takes
        credits away, and a credit too, which can make a submit affordable that then
        holds what a later started job was accepted against (a usage report is a fact
        and is taken wherever it falls)."""
        def build(draft: Draft) -> list[tuple[NewEvent, DomainEvent]]:
            event = make(draft)
            built = [draft.event(self._time(draft, at), event, stream)]
            if tried:
                try_in_past(self._session, draft, built)
            return built

        return self._session.decide([stream], build, event_id=event_id).outcome

    def _recorded(self, event_id: str, what: str) -> RecordedEvent:
        require_name(what, event_id)
        rec = self._session.journal.get(event_id)
        if rec is None:
            raise UnknownEvent(f"no event {event_id!r} in the journal: {what} must be the id "
                              "of a recorded event")
        return rec

    # -- the calls -------------------------------------------------------------------------

    def grant(self, account: str, amount: int, *, at: int | None = None,
              expiry: int | None = None, pool: str | None = None,
              priority: int = DEFAULT_GRANT_PRIORITY, memo: str | None = None,
              event_id: str | None = None) -> Outcome:
        """Record a grant of `amount` (valid until `expiry`, if given)."""
        # The event checks its fields in their declared order (account, then amount, ...).
        event = events.CreditsGranted(account, amount, expiry, _pool(pool), priority, memo)

        def make(draft: Draft) -> DomainEvent:
            when = self._time(draft, at)
            if expiry is not None:
                require_expiry_after(expiry, when)
            return event

        return self._decide(account, at, make, event_id, tried=True)

    def consume(self, account: str, amount: int, *, at: int | None = None,
                pool: str | None = None, memo: str | None = None,
                event_id: str | None = None, user: str | None = None) -> Outcome:
        """Record a usage report; the outcome's `debt_after` is the debt right after it.
        `user` and `memo` are personal: kept apart so that they can be erased."""
        event = events.CreditsConsumed(account, amount, _pool(pool), memo, user)
        return self._decide(account, at, lambda _: event, event_id)

    def adjust(self, account: str, amount: int, reason: str, *, at: int | None = None,
               pool: str | None = None, memo: str | None = None,
               event_id: str | None = None) -> Outcome:
        """Record a manual credit (amount > 0) or debit (amount < 0) with its reason."""
        event = events.CreditsAdjusted(account, amount, reason, _pool(pool), memo)
        return self._decide(account, at, lambda _: event, event_id, tried=True)

    def void(self, grant_id: str, *, at: int | None = None, reason: str | None = None,
             memo: str | None = None, event_id: str | None = None) -> Outcome:
        """From `at` on, the unused credits of grant `grant_id` no longer count."""
        target = self._recorded(grant_id, "grant")
        if target.type != "grant":
            raise ValueError(f"event {grant_id!r} is a {target.type}, not a grant: only a "
                             "grant can be voided (reverse other events)")
        event = events.GrantVoided(grant_id, reason, memo)

        def make(draft: Draft) -> DomainEvent:
            ledger = draft.ledger
            if ledger.excluded and grant_id in ledger.excluded:
                raise ValueError(f"grant {grant_id!r} is reversed: there is nothing to void")
            voided = ledger.voids.get(grant_id)
            if voided is not None:
                raise ValueError(f"grant {grant_id!r} is already voided from {voided}")
            return event

        return self._decide(target.stream, at, make, event_id, tried=True)

    def reverse(self, target_id: str, reason: str, *, memo: str | None = None,
                event_id: str | None = None) -> Outcome:
        """Take the recorded event `target_id` out of every fold (a reversal of a reversal
        puts its event back). Recorded at the reversed event's time."""
        target = self._recorded(target_id, "event")
        if target.type == events.PersonalDataErased.type:
            # It changes no figure, and what it deleted is gone: a reversal would say the
            # erasure no longer counts while the fields stay erased. (A file may still
            # carry one: import takes it, so every export imports back.)
            raise ValueError(
                f"event {target_id!r} is an erasure, which cannot be reversed: the fields it "
                "erased are deleted from the journal and no reversal brings them back (it "
                "changes no figure either); record them again in a new event if they were "
                "erased by mistake")
        event = events.EventReversed(target_id, reason, memo)

        def build(draft: Draft) -> list[tuple[NewEvent, DomainEvent]]:
            ledger = draft.ledger
            if ledger.excluded and target_id in ledger.excluded:
                raise ValueError(f"event {target_id!r} is already reversed")
            # At the reversed event's own time: from there on (the whole life of the
            # event) it no longer counts, and a retry rebuilds the same event.
            return [draft.event(target.time, event, target.stream)]

        return self._session.decide([target.stream], build, event_id=event_id).outcome
