"""What an event did to an account, in words (statement and job explanations)."""

from __future__ import annotations

from eventstore import RecordedEvent
from projections.events import GENERAL
from projections.ledger import Ledger
from projections.outcomes import Outcome
from projections.queries.common import describe_lineage
from projections.timefmt import format_time


def pool_text(pool: object) -> str:
    return "" if pool in (None, GENERAL) else f" {pool}"


def event_detail(rec: RecordedEvent, outcome: Outcome, ledger: Ledger) -> tuple[str, int]:
    """(what the event did, its change to the balance)."""
    p = rec.payload
    if outcome.anomaly:
        return f"anomaly, no effect: {outcome.reason}", 0
    if rec.type == "account":
        cap = p.get("max_running")
        return "account opened" + (f" (at most {cap} running)" if cap else ""), 0
    if rec.type == "grant":
        amount = int(p["amount"])
        expiry = p.get("expiry")
        text = f"grant of {amount:,}{pool_text(p.get('pool'))} credits"
        text += f", expires {format_time(expiry)}" if expiry is not None else ", no expiry"
        paid = sum(a for _, a in outcome.paid_debt)
        if paid:
            text += f"; {paid:,} paid debt first"
        return text, amount
    if rec.type == "consume":
        amount = int(p["amount"])
        text = f"consumed {amount:,}{pool_text(p.get('pool'))}, paid by "
        text += describe_lineage(outcome.paid_by)
        if outcome.debt_created:
            text += (f"; {outcome.debt_created:,} became debt (debt now "
                     f"{outcome.debt_after or 0:,})")
        return text, -amount
    job = str(p.get("job"))
    if rec.type == "submit":
        head = f"job {job}, cost {int(p['cost']):,}, priority {p['priority']}"
        if p.get("pool") not in (None, GENERAL):
            head += f", pool {p['pool']}"
        if not outcome.ok:
            return f"{head}: rejected: {outcome.reason}", 0
        return f"{head}: reserved from {describe_lineage(outcome.paid_by)}", 0
    if rec.type == "start":
        return f"job {job}", 0
    if rec.type == "complete":
        state = ledger.jobs[job].state
        charge = outcome.charge or 0
        text = f"job {job} {state}: charged {charge:,}"
        if charge:
            text += f" (paid by {describe_lineage(outcome.paid_by)})"
        if outcome.released:
            text += f", released {outcome.released:,}"
        return text, -charge
    if rec.type == "cancel":
        if outcome.reason:
            return f"job {job}: {outcome.reason}", 0
        return f"job {job} cancelled: released {outcome.released or 0:,}", 0
    return rec.type, 0  # pragma: no cover - every event type is handled above

