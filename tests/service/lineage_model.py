"""A small, obviously-correct model of one account's lineage: which grant paid which
usage report or job charge, and what became of every grant.

No checkpoints, no incremental state: every answer folds every recorded event known at
the position asked, in canonical order (event time, then position), with plain lists.

- A reversal in effect takes its event out of every fold; a reversal of a reversal puts
  the event back.
- Credits are valid for time <= t < expiry. A draw in pool P takes from P's batches and
  the general ones (a general draw only from general ones) by the lowest grant priority
  number, then the earliest expiry, then pool-specific before general, then the earlier
  grant; what is missing becomes P's debt.
- A grant (or a positive adjustment) to P pays P's debt first; a general one pays general
  debt, then each pool's in pool-name order; only the rest becomes a batch.
- A submit is accepted when cost <= min(usable(P), active - debt); it holds its cost from
  the batches in draw order. A completion charges the cost (success) or
  floor(cost * (1 - refund_fraction)), spent from the hold in draw order; the rest is
  released: to an expired or voided batch it lapses, else it pays debt first, as a grant
  of the batch's pool would, and the rest goes back to its batch.
- A void takes the grant's remaining credits away from its time on (all of them when it
  comes before the grant, which then pays no debt either); held credits stay with their job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

GENERAL = "general"
NEVER = 2**62


@dataclass
class Batch:
    grant: str
    pool: str
    expiry: int | None
    priority: int
    order: tuple[int, int]
    amount: int = 0
    voided: bool = False

    def key(self) -> tuple[int, int, bool, tuple[int, int]]:
        return (self.priority, NEVER if self.expiry is None else self.expiry,
                self.pool == GENERAL, self.order)

    def live(self, t: int) -> bool:
        return self.expiry is None or t < self.expiry


@dataclass
class GrantFate:
    amount: int
    paid_debt: int = 0
    used: int = 0
    expired: int = 0  # voided included


@dataclass
class Job:
    job: str
    cost: int
    pool: str
    state: str = "pending"
    holds: list[tuple[Batch, int]] = field(default_factory=list)
    charge: int | None = None
    paid_by: list[tuple[str, int]] = field(default_factory=list)
    held_from: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class Spend:
    event_id: str
    amount: int
    paid_by: list[tuple[str, int]]
    debt_created: int
    job: str | None


@dataclass
class Folded:
    grants: dict[str, GrantFate]
    batches: dict[str, Batch]
    jobs: dict[str, Job]
    spends: list[Spend]
    debt_after: dict[str, int]
    debt: dict[str, int]


def in_effect(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events a fold takes (reversals themselves excluded), in position order."""
    out: set[str] = set()
    for e in reversed(events):  # a reversal names an event recorded before it
        if e["type"] == "reverse" and e["id"] not in out:
            out.add(e["event"])
    return [e for e in events if e["id"] not in out and e["type"] != "reverse"]


def _pay_debt(debt: dict[str, int], pool: str, amount: int) -> int:
    """Pay `pool`'s way of debt with up to `amount`; returns what it paid."""
    order = [GENERAL, *sorted(p for p in debt if p != GENERAL)] if pool == GENERAL else [pool]
    paid = 0
    for p in order:
        pay = min(debt.get(p, 0), amount - paid)
        if pay:
            debt[p] -= pay
            paid += pay
    return paid


def fold(events: list[dict[str, Any]], known_at: int | None = None) -> Folded:
    """Fold `events` (each with its "position") known at `known_at` (all if None)."""
    known = [e for e in events if known_at is None or e["position"] <= known_at]
    timeline = sorted((e for e in in_effect(known) if e["type"] != "account"),
                      key=lambda e: (e["time"], e["position"]))
    grants: dict[str, GrantFate] = {}
    batches: dict[str, Batch] = {}
    jobs: dict[str, Job] = {}
    seen_jobs: set[str] = set()
    voided_before: set[str] = set()
    spends: list[Spend] = []
    debt: dict[str, int] = {}
    debt_after: dict[str, int] = {}

    def draw(pool: str, t: int) -> list[Batch]:
        usable = [b for b in batches.values() if b.amount and b.live(t)
                  and b.pool in (pool, GENERAL)]
        return sorted(usable, key=Batch.key)

    def take(pool: str, t: int, amount: int) -> list[tuple[Batch, int]]:
        parts = []
        for b in draw(pool, t):
            if amount == 0:
                break
            n = min(b.amount, amount)
            b.amount -= n
            amount -= n
            parts.append((b, n))
        return parts

    for e in timeline:
        t = e["time"]
        for b in batches.values():  # expiry at the start of t
            if b.amount and not b.live(t):
                grants[b.grant].expired += b.amount
                b.amount = 0
        kind = e["type"]
        credit = kind == "grant" or (kind == "adjust" and e["amount"] > 0)
        if credit:
            pool = e.get("pool") or GENERAL
            fate = grants[e["id"]] = GrantFate(e["amount"])
            b = batches[e["id"]] = Batch(e["id"], pool, e.get("expiry"),
                                         e.get("priority", 50), (t, e["position"]))
            if e["id"] in voided_before:  # voided whole: it pays no debt either
                fate.expired = e["amount"]
                b.voided = True
            else:
                fate.paid_debt = _pay_debt(debt, pool, e["amount"])
                b.amount = e["amount"] - fate.paid_debt
        elif kind in ("consume", "adjust"):
            pool = e.get("pool") or GENERAL
            amount = abs(e["amount"])
            parts = take(pool, t, amount)
            for b, n in parts:
                grants[b.grant].used += n
            paid = sum(n for _, n in parts)
            if amount > paid:
                debt[pool] = debt.get(pool, 0) + amount - paid
            debt_after[e["id"]] = sum(debt.values())
            spends.append(Spend(e["id"], amount, [(b.grant, n) for b, n in parts],
                                amount - paid, None))
        elif kind == "void":
            g = e["grant"]
            if g in batches:
                b = batches[g]
                if not b.voided:
                    grants[g].expired += b.amount
                    b.amount = 0
                    b.voided = True
            else:
                voided_before.add(g)
        elif kind == "submit":
            if e["job"] in seen_jobs:
                continue
            seen_jobs.add(e["job"])
            pool = e.get("pool") or GENERAL
            job = Job(e["job"], e["cost"], pool)
            active = sum(b.amount for b in batches.values() if b.live(t))
            usable = sum(b.amount for b in draw(pool, t))
            if e["cost"] <= min(usable, active - sum(debt.values())):
                job.holds = take(pool, t, e["cost"])
                job.held_from = [(b.grant, n) for b, n in job.holds]
            else:
                job.state = "rejected"
            jobs[e["job"]] = job
        elif kind == "start":
            job = jobs.get(e["job"])
            if job and job.state == "pending":
                job.state = "running"
        elif kind in ("complete", "cancel"):
            job = jobs.get(e["job"])
            if job is None:
                continue
            if kind == "complete":
                if job.state != "running":
                    continue
                rf = Fraction(str(e.get("refund_fraction", 1.0)))
                charge = job.cost if e["success"] else int(job.cost * (1 - rf))
                job.state = "succeeded" if e["success"] else "failed"
                job.charge = charge
            else:
                if job.state != "pending":
                    continue
                job.state = "cancelled"
                charge = 0
            left = charge
            for b, n in sorted(job.holds, key=lambda part: part[0].key()):
                spent = min(n, left)
                left -= spent
                if spent:
                    job.paid_by.append((b.grant, spent))
                    grants[b.grant].used += spent
                back = n - spent
                if not back:
                    continue
                if b.voided or not b.live(t):
                    grants[b.grant].expired += back
                    continue
                paid = _pay_debt(debt, b.pool, back)
                grants[b.grant].paid_debt += paid
                b.amount += back - paid
            if kind == "complete":
                spends.append(Spend(e["id"], charge, job.paid_by, 0, job.job))
            job.holds = []
        debt = {p: d for p, d in debt.items() if d}
    return Folded(grants, batches, jobs, spends, debt_after, debt)
