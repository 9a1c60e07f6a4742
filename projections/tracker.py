"""`GPUCreditTracker`: the expiring-credit facade of the contract, over any journal."""

from __future__ import annotations

from eventstore import NewEvent
from projections.events import (
    DEFAULT_GRANT_PRIORITY,
    CreditsConsumed,
    CreditsGranted,
    DomainEvent,
    normalise_pool,
    require_int,
    require_name,
)
from projections.session import Draft, JournalArg, LedgerSession, SessionFacade
from projections.validation import require_expiry_after


class GPUCreditTracker(SessionFacade):
    """Grant, consume and query one account's expiring credits; every call is an event.

    Calls may come out of time order: a call earlier than recorded events is placed on
    the timeline by its timestamp and everything after it is re-projected. `event_id`
    (optional) makes a call safe to retry: the same id returns the original outcome.
    """

    def __init__(self, journal: JournalArg = None, account: str = "default") -> None:
        self.account = require_name("account", account)
        self._session = LedgerSession(journal)

    def grant(self, amount: int, timestamp: int, expiry: int, *,
              pool: str | None = None, event_id: str | None = None,
              priority: int = DEFAULT_GRANT_PRIORITY, memo: str | None = None) -> None:
        """Grant `amount` credits valid for timestamp <= t < expiry (in `pool`, if named).

        `priority` (0-100): lower numbers are used first; `memo`: free text (a PO number).
        A late grant is recorded wherever it falls, as the contract has it, and what
        follows is re-projected, even where a job that started then turns out to have
        been unaffordable (an anomaly, listed; `Corrections.grant` refuses that case).
        """
        require_int("timestamp", timestamp)
        require_int("expiry", expiry)  # the event takes None (no expiry); this call does not
        event = CreditsGranted(self.account, amount, expiry, normalise_pool(pool), priority,
                               memo)
        require_expiry_after(expiry, timestamp, "timestamp")

        def build(draft: Draft) -> list[tuple[NewEvent, DomainEvent]]:
            # Decided now, it is recorded at the latest event time if that is later: its
            # expiry must come after that time, or the journal would hold a grant no
            # file may (its export would not import back).
            when = draft.now(timestamp) if draft.live else timestamp
            if when != timestamp:
                require_expiry_after(expiry, when, "live time")
            return [draft.event(when, event, self.account)]

        self._session.decide([self.account], build, event_id=event_id, reads_state=False)

    def consume(self, amount: int, timestamp: int, *, pool: str | None = None,
                event_id: str | None = None, memo: str | None = None,
                user: str | None = None) -> int:
        """Consume `amount` at `timestamp`; return the account's outstanding debt right after.

        `user`, `memo`: who used the credits and a note, kept apart so they can be erased."""
        require_int("timestamp", timestamp)
        event = CreditsConsumed(self.account, amount, normalise_pool(pool), memo, user)
        outcome = self._session.decide(
            [self.account], lambda draft: [draft.event(timestamp, event, self.account)],
            event_id=event_id, reads_state=False,
        ).outcome
        assert outcome.debt_after is not None
        return outcome.debt_after

    def get_balance(self, timestamp: int, *, pool: str | None = None,
                    as_known_at: int | None = None) -> int:
        """Credits at `timestamp` (active, and held for jobs) minus debt, from events <= it.

        All pools unless `pool` names one (``"general"`` for unrestricted credits).
        `as_known_at`: answer from only the events recorded at positions <= it.
        """
        require_int("timestamp", timestamp)
        wanted = None if pool is None else normalise_pool(pool)
        session = self._session
        with session.reading():
            if as_known_at is None:
                account = session.account_at(self.account, timestamp)
            else:
                known = session.ledger_as_known(as_known_at, timestamp)
                account = known.accounts.get(self.account)
            figures = session.figures(account, timestamp)
        if wanted is None:
            return figures.balance
        return figures.pools.get(wanted, 0)

    def pool_balances(self, timestamp: int) -> dict[str, int]:
        """Per pool (``"general"`` for unrestricted credits), credits minus debt."""
        require_int("timestamp", timestamp)
        with self._session.reading():
            account = self._session.account_at(self.account, timestamp)
            return self._session.figures(account, timestamp).pools

