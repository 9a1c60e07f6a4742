"""Journal-wide totals for a summary (the demo's audit table)."""

from __future__ import annotations

from dataclasses import dataclass

from projections.ledger import Ledger


@dataclass(frozen=True, slots=True)
class Audit:
    """Journal-wide totals for a summary."""

    events: int
    accounts: int
    jobs: int
    granted: int
    expired: int
    debt: int
    rejected: int
    anomalies: int
    revisions: int
    digest: str


def audit(ledger: Ledger, *, events: int, revisions: int, at: int) -> Audit:
    """Totals of a replayed ledger: credits expired (by `at`, no earlier than its last
    event), debt (after what refills accrued by then pay, as `balance` says), rejected
    submits..."""
    accounts = list(ledger.accounts.values())
    books = [a.book for a in accounts]
    expired = sum(b.totals.expired + sum(b.expiring_by(at).values()) for b in books)
    return Audit(
        events=events, accounts=sum(1 for a in accounts if a.opened),
        jobs=len(ledger.jobs), granted=sum(b.totals.granted for b in books), expired=expired,
        debt=sum(a.debt_total_at(at) for a in accounts), rejected=ledger.rejected,
        anomalies=len(ledger.anomalies), revisions=revisions, digest=ledger.digest())
