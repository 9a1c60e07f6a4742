"""One account's stretch of the timeline, folded apart from the rest of the ledger.

The credit book is exactly partitionable by account: an account's balances, holds, jobs,
fair-share usage and refill depend only on the events of that account. So a late event
needs the state of *its* account before it, and that account's events after it, not the
whole journal. This module builds such a one-account ledger from a saved snapshot of the
whole ledger, and splices the refolded account back into the live ledger.

What crosses accounts is checked, never assumed: a job id another account uses, a void
naming a grant, a reversal, an event whose stream is not the account it affects. Any of
those makes the caller fall back to refolding the whole timeline, which is always right.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from projections.ledger import STATE, JobState, Ledger, Saved


class JobsAsOf(dict[str, JobState]):
    """The job index as it stood at a snapshot, for one account's refold.

    Writes land in this dict; a read of any other id falls through to the snapshot's
    shared, insert-only index, minus the ids inserted after the snapshot was taken.
    """

    __slots__ = ("_base", "_hidden")

    def __init__(self, base: dict[str, JobState], hidden: set[str]) -> None:
        super().__init__()
        self._base = base
        self._hidden = hidden

    def __missing__(self, key: str) -> JobState:
        if key in self._hidden:
            raise KeyError(key)
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or (key not in self._hidden and key in self._base)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


def account_ledger(saved: Saved | None, account: str,
                   excluded: frozenset[str]) -> Ledger:
    """A ledger holding only `account`, as it stood at the snapshot `saved` (None: the
    start of the timeline), ready to fold that account's events after it."""
    if saved is None:
        ledger = Ledger()
        ledger.excluded = excluded
        return ledger
    kept, (jobs, _anomalies), count, _ = saved
    hidden = set(itertools.islice(reversed(jobs), len(jobs) - count))
    view = JobsAsOf(jobs, hidden)
    # `voids` and `reversals` are written by the voids and reversals the stretch holds:
    # dicts of its own, so the snapshot's stay as they were. The fold never reads
    # `reversals` (which events are reversed is `excluded`, given): it starts empty.
    ledger = Ledger(jobs=view, last=kept.last, excluded=excluded, reversals={},
                    voids=dict(kept.voids))
    state = kept.accounts.get(account)
    if state is not None:
        own = STATE.copy(state)
        own.head_key = None
        ledger.accounts[account] = own
        for job_id in own.book.holds:
            # A held job is a live one (pending or running): the snapshot's copy is
            # the job as it was then, not as the shared index shows it now.
            job = kept.live.get(job_id)
            if job is not None:
                live = STATE.copy(job)
                view[job_id] = live
                ledger.live[job_id] = live
    return ledger


def splice(ledger: Ledger, part: Ledger, account: str, candidates: Iterable[str],
           folded_ids: set[str], had_anomalies: bool, applied: int, rejected: int) -> None:
    """Put the refolded `account` of `part` into `ledger`, in place.

    `candidates`: ids of jobs that may be live for the account in `ledger` (those held
    at the snapshot and those submitted in the stretch); `folded_ids`: the events the
    stretch folded again (their old anomalies are replaced by `part`'s); `applied`,
    `rejected`: how much the refold changed those counters.
    """
    for job_id in candidates:
        job = ledger.live.get(job_id)
        if job is not None and job.account == account:
            del ledger.live[job_id]
    state = part.accounts.get(account)
    if state is not None:  # None: no event so far opened it (a submit to it is rejected)
        ledger.accounts[account] = state
    jobs = ledger.jobs
    for job_id, job in dict.items(part.jobs):
        jobs[job_id] = job  # an id already there keeps its place: snapshots count on it
    ledger.live.update(part.live)
    if had_anomalies:
        # A new list: older snapshots keep the old one, whose prefix they count on.
        kept = [a for a in ledger.anomalies if a[1] not in folded_ids]
        kept.extend(part.anomalies)
        ledger.anomalies = kept
    else:
        ledger.anomalies.extend(part.anomalies)
    ledger.applied += applied
    ledger.rejected += rejected
    if state is not None:
        ledger.requeue(account)
