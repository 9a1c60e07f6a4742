"""`whatif`: the same journal folded under another policy, and what would differ.

Both answers come from the one fold (`Ledger.apply`): the journal's own rules, and the
same events with a `Policy` in place of the rules they carry. Nothing is appended.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from eventstore import JournalLike
from projections.figures import Figures
from projections.ledger import Ledger
from projections.policy import Policy
from projections.projector import apply_recorded
from projections.queries.common import fold_as_known, latest_time, recorded_position


@dataclass(frozen=True, slots=True)
class AccountChange:
    """An account whose figures differ under the policy: both sets of figures."""

    account: str
    actual: Figures
    whatif: Figures

    def pools(self) -> list[tuple[str, int, int]]:
        """(pool, actual, what-if) for every pool whose balance differs."""
        names = sorted(set(self.actual.pools) | set(self.whatif.pools))
        out = [(p, self.actual.pools.get(p, 0), self.whatif.pools.get(p, 0)) for p in names]
        return [(p, a, w) for p, a, w in out if a != w]

    @property
    def difference(self) -> dict[str, int]:
        """What-if minus actual, per figure."""
        return {k: getattr(self.whatif, k) - getattr(self.actual, k)
                for k in ("balance", "reserved", "available", "debt")}

    @property
    def pool_changes(self) -> list[dict[str, Any]]:
        """Every pool whose balance differs: both balances and the difference."""
        return [{"pool": p, "actual": a, "whatif": w, "difference": w - a}
                for p, a, w in self.pools()]

    # The figures both ways, and the pools that differ.
    json_keys: ClassVar[tuple[str, ...]] = ("account", "actual", "whatif", "difference",
                                            "pools=pool_changes")


@dataclass(frozen=True, slots=True)
class JobChange:
    """A job whose state or charge differs under the policy."""

    job: str
    account: str
    actual_state: str | None  # None: the job does not exist that way
    whatif_state: str | None
    actual_charge: int | None
    whatif_charge: int | None

    @property
    def actual(self) -> dict[str, Any]:
        """The job as the journal's own rules leave it."""
        return {"state": self.actual_state, "charged": self.actual_charge}

    @property
    def whatif(self) -> dict[str, Any]:
        """The job under the policy."""
        return {"state": self.whatif_state, "charged": self.whatif_charge}

    json_keys: ClassVar[tuple[str, ...]] = ("job", "account", "actual", "whatif")


@dataclass(slots=True)
class WhatIf:
    """What differs between the journal's own rules and the policy, at event time `at`."""

    policy: Policy
    at: int
    as_known_at: int
    accounts: list[AccountChange] = field(default_factory=list)
    jobs: list[JobChange] = field(default_factory=list)
    totals: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (actual, whatif)
    # Accounts the policy caps that the journal does not hold (as known): a typo?
    unknown_accounts: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether anything at all differs."""
        return bool(self.accounts or self.jobs)

    @property
    def total_changes(self) -> dict[str, dict[str, int]]:
        """Per total: actual, what-if and the difference."""
        return {k: {"actual": a, "whatif": w, "difference": w - a}
                for k, (a, w) in self.totals.items()}

    json_keys: ClassVar[tuple[str, ...]] = ("policy", "at:time", "as_known_at", "changed",
                                            "accounts", "jobs", "totals=total_changes")


def fold_under(journal: JournalLike, policy: Policy, *, position: int,
               excluded: frozenset[str] = frozenset()) -> Ledger:
    """The journal's events up to `position` folded under `policy` (reversed events,
    `excluded`, skipped as in every fold)."""
    ledger = Ledger(excluded=excluded, policy=policy)
    for rec in journal.read(to_position=position, order="canonical"):
        apply_recorded(ledger, rec)
    return ledger


def whatif(journal: JournalLike, policy: Policy, *,
           as_known_at: int | str | None = None) -> WhatIf:
    """Fold the journal as recorded and under `policy`; list balances per account and pool,
    and jobs, that differ, at the journal's latest event time."""
    if not isinstance(policy, Policy):
        raise TypeError("policy must be a projections.policy.Policy (Policy.from_json(data) "
                        f"reads a policy file's JSON), got {type(policy).__name__}")
    position = recorded_position(journal, as_known_at)
    at = latest_time(journal)
    actual = fold_as_known(journal, to_position=position)
    other = fold_under(journal, policy, position=position, excluded=actual.excluded)
    out = WhatIf(policy, at, position)
    for name in sorted(set(actual.accounts) | set(other.accounts)):
        a = Figures.of(actual.accounts.get(name), at)
        w = Figures.of(other.accounts.get(name), at)
        change = AccountChange(name, a, w)
        if (a.balance, a.reserved, a.debt) != (w.balance, w.reserved, w.debt) \
                or change.pools():
            out.accounts.append(change)
    for job_id in _job_ids(actual, other):
        a_job, w_job = actual.jobs.get(job_id), other.jobs.get(job_id)
        a_key = None if a_job is None else (a_job.state, a_job.charge)
        w_key = None if w_job is None else (w_job.state, w_job.charge)
        if a_key != w_key:
            owner = (a_job or w_job).account  # type: ignore[union-attr]
            out.jobs.append(JobChange(job_id, owner,
                                      None if a_key is None else a_key[0],
                                      None if w_key is None else w_key[0],
                                      None if a_key is None else a_key[1],
                                      None if w_key is None else w_key[1]))
    out.totals = _totals(actual, other, at)
    out.unknown_accounts = sorted(set(policy.max_running) - set(actual.accounts))
    return out


def _job_ids(actual: Ledger, other: Ledger) -> list[str]:
    ids = list(actual.jobs)
    ids.extend(j for j in other.jobs if j not in actual.jobs)
    return ids


def _totals(actual: Ledger, other: Ledger, at: int) -> dict[str, tuple[int, int]]:
    def sums(ledger: Ledger) -> dict[str, int]:
        figures = [Figures.of(s, at) for s in ledger.accounts.values()]
        charged = sum(j.charge or 0 for j in ledger.jobs.values())
        return {"balance": sum(f.balance for f in figures),
                "debt": sum(f.debt for f in figures),
                "charged": charged,
                "rejected": sum(1 for j in ledger.jobs.values() if j.state == "rejected"),
                "anomalies": len(ledger.anomalies)}

    a, w = sums(actual), sums(other)
    return {k: (a[k], w[k]) for k in a}
