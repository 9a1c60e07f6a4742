"""Partial ledgers read from a checkpoint: one account, or every account without its jobs.

A question about one account needs that account's state, not the journal's: a
checkpoint keeps each account in a section of its own (`projections.checkpoint`), and
the credit book partitions by account, so the account's section plus the account's own
events recorded after the checkpoint give its state, at a cost that does not grow with
the journal (also after a late event: the newest checkpoint still valid is older then,
and only the account's events after it are folded).

What would reach across accounts makes these functions answer None, and the caller
folds the whole ledger (`projections.replay.ledger_at`), which is always right: no
valid checkpoint, a reversal or a void after it, a job event whose job the account did
not submit, a submit whose job id another account used first. The account's events are
found the way `statement` finds them (`projections.queries.walk.account_events`: its
stream, and the streams of its jobs' events recorded before their submit); an event of
the account recorded in another account's stream is not seen, as there, so both look
for one after the checkpoint naming a job it could change: `account_jobs_at` (it
answers whether the account's job ids are its own, which is the question such events
change), and `account_ledger_at` for the jobs it submitted since or that hold its
credits at the checkpoint.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Set
from typing import Any

import orjson

from eventstore import JournalLike, RecordedEvent
from projections.checkpoint import CheckpointError, CheckpointView, log
from projections.ledger import Ledger
from projections.owners import job_stream, submitted_elsewhere
from projections.replay import lean_rows, rows_of_type, view_at

_JOB_EVENTS = frozenset({"start", "complete", "cancel"})
_CROSSING = frozenset({"void", "reverse"})
_CREDITS = frozenset({"grant", "consume", "adjust"})
"""Event types that change an account's credits and never its jobs or its queue."""


def account_ledger_at(journal: JournalLike, account: str, *, to_position: int,
                      to_time: int | None = None) -> Ledger | None:
    """A ledger holding `account` alone at event time `to_time` as known at
    `to_position`, as `ledger_at` would hold it (with the account's jobs when an event
    after the checkpoint needs them; its queue is not kept); None when a checkpoint and
    the account's own events cannot say (see the module's docstring)."""
    if not account:
        return None  # no account has an empty name: the fold says it is unknown
    found = view_at(journal, to_position=to_position, to_time=to_time)
    if found is None:
        return None
    info, view = found
    try:
        return _account_ledger(journal, view, account, info.position, to_position, to_time)
    except CheckpointError as exc:
        log.warning("checkpoint at position %s ignored (%s): folding from the journal "
                    "instead", info.position, exc)
        return None


JobFacts = tuple[str, str, int | None]
"""(account, state, charge) of a job, as the projection holds it."""


def account_jobs_at(journal: JournalLike, account: str, named: Set[str], *,
                    to_position: int) -> dict[str, JobFacts] | None:
    """The jobs of `account` and those `named`, as the projection knows them at
    `to_position` (`ledger_at(to_position)`'s job index): job -> (account, state, charge).
    A job named that the projection does not hold is left out.

    From the newest valid checkpoint's job index plus the account's own events after it
    (`account_ledger_at`), never a fold of the rest: what a statement asks to check that
    its account's job ids are its own. None when that cannot say: no valid checkpoint, a
    reversal after it, or an event after it outside the account's stream that names the
    account or one of those jobs (a job id two accounts submitted, or a job's events
    recorded in another stream); then only the whole projection tells. None too when a
    job named is the account's but another account's stream holds a submit of its id
    that the fold does not count (`owners.submitted_elsewhere`): events of the job may be
    filed there."""
    if not account:
        return None  # no account has an empty name: the fold says it is unknown
    found = view_at(journal, to_position=to_position)
    if found is None:
        return None
    info, view = found
    try:
        decoded = view.job_columns()
        columns = decoded[0]
        ids, owners = columns["id"], columns["account"]
        states, charges = columns["state"], columns["charge"]
        held = {job: (owner, states[i], charges[i])
                for i, (job, owner) in enumerate(zip(ids, owners, strict=True))
                if owner == account or job in named}
        if info.position < to_position:
            ledger = _account_ledger(journal, view, account, info.position, to_position,
                                     None, decoded)
            if ledger is None:
                return None
            # Its jobs are read only when an event after the checkpoint needed them; then
            # they are every job of the account's (those it submitted since included),
            # as the fold leaves them.
            asked = named | held.keys() | ledger.jobs.keys()
            if _named_elsewhere(journal, account, asked, info.position, to_position):
                return None
            held.update((job, (state.account, state.state, state.charge))
                        for job, state in ledger.jobs.items())
        # A second submit of one of its ids (an anomaly), or a reversed one, in another
        # account's stream, up to the checkpoint (those after it are found above): a
        # step of the job recorded while that submit was the known one is filed there.
        ours = {job for job in named if held.get(job, ("",))[0] == account}
        if ours and submitted_elsewhere(journal, view.skeleton(), account, ours):
            return None
    except CheckpointError as exc:
        log.warning("checkpoint at position %s ignored (%s): folding from the journal "
                    "instead", info.position, exc)
        return None
    return held


def _named_elsewhere(journal: JournalLike, account: str, jobs: Set[Any], after: int,
                     to_position: int) -> bool:
    """Whether an event recorded after `after` up to `to_position`, outside `account`'s
    stream, names the account or one of `jobs`, or is a reversal (which can take out a
    submit anywhere): one read in arrival order, payloads decoded only when their text
    can name one of them."""
    # A payload that names the account holds its name quoted, unless JSON would escape it.
    quoted = f'"{account}"' if account.isascii() and account.isprintable() and not (
        {'"', "\\", "/"} & set(account)) else None
    for _, _, kind, _, payload, stream in lean_rows(
            journal, after_position=after, to_position=to_position, order="position"):
        if kind == "reverse":
            return True
        if stream == account:
            continue
        if isinstance(payload, str):
            if quoted is not None and '"job"' not in payload and quoted not in payload:
                continue
            payload = orjson.loads(payload)
        if not isinstance(payload, dict):
            continue
        if payload.get("account") == account or payload.get("job") in jobs:
            return True
    return False


def _account_ledger(journal: JournalLike, view: CheckpointView, account: str,
                    after: int, to_position: int, to_time: int | None,
                    decoded: tuple[dict[str, list[Any]], list[str]] | None = None
                    ) -> Ledger | None:
    stretch = list(journal.read(stream=account, after_position=after,
                                to_position=to_position, to_time=to_time,
                                order="canonical"))
    if any(rec.type in _CROSSING for rec in stretch):
        return None
    if next(rows_of_type(journal, "reverse", after_position=after,
                         to_position=to_position), None) is not None:
        # A reversal recorded since, in any stream and at any time (it takes its event
        # out at every time, one timed after `to_time` too), may take out or bring back
        # an event the account's figures depend on outside its own stream: a step of its
        # job filed in `job:<id>`, another account's submit of one of its job ids (which
        # then comes first on the timeline). Rare: the whole fold tells, as `ledger_at`
        # does for a reversal since its checkpoint.
        return None
    state = view.account(account)
    # Its jobs holding credits at the checkpoint: a step of one may be filed in another
    # account's stream since (an import files it with another account's submit of the id
    # in the same file, docs/semantics.md "Import ids"), where its own events miss it.
    held = set(state.book.holds) if state is not None else set()
    if all(rec.type in _CREDITS for rec in stretch) and not _has_job_streams(
            journal, account, after):
        if any(not isinstance(rec.payload, dict) or rec.payload.get("account") != account
               for rec in stretch):
            return None
        if held and _named_elsewhere(journal, account, held, after, to_position):
            return None
        # Nothing after the checkpoint reaches a job or the queue (the usual case: a
        # checkpoint at the head): the account's section is all it takes. No event of
        # its jobs sits in a `job:<id>` stream (an import puts a job's events there
        # while no submit of the job is recorded; a journal appended to directly may at
        # any time): else the path below reads them.
        ledger = view.skeleton()
        ledger.queue.clear()
        if state is not None:
            state.head_key = None  # the queue needs the jobs: it is not read here
            ledger.accounts[account] = state
        for rec in stretch:
            ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time, rec.payload)
        return ledger
    if decoded is None:
        decoded = view.job_columns()
    known = set(decoded[0]["id"])
    jobs, live = view.jobs(account, decoded)
    own_ids = set(jobs)
    submitted = set()
    for rec in stretch:
        payload = rec.payload
        job = payload.get("job") if isinstance(payload, dict) else None
        if rec.type == "submit":
            if payload.get("account") != account or job in known:
                return None  # another account's job, or an id used before: cross-account
            submitted.add(job)
        elif rec.type in _JOB_EVENTS:
            if job not in own_ids and job not in submitted:
                return None
        elif not isinstance(payload, dict) or payload.get("account") != account:
            return None
    if (submitted or held) and _named_elsewhere(journal, account, submitted | held, after,
                                                to_position):
        # An id it submitted since may be another account's too, submitted since in that
        # account's stream (and first on the timeline: the account's submit is then an
        # anomaly that holds nothing): the checkpoint's job index, read above, does not
        # know it. A step of a job holding its credits may be filed there too (above).
        return None
    events = _with_early_job_events(journal, stretch, own_ids | submitted, after,
                                    to_position, to_time)
    if events is None:
        return None
    ledger = view.skeleton()
    ledger.queue.clear()
    if state is not None:
        state.head_key = None
        ledger.accounts[account] = state
    ledger.jobs, ledger.live = jobs, live
    if state is not None:
        ledger.requeue(account)
    for rec in events:
        ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time, rec.payload)
    return ledger


def _job_streams(journal: JournalLike, jobs: Iterable[Any]) -> list[str]:
    """The `job:<id>` streams of these jobs, or [] when none of them has one (one query
    for them all)."""
    streams = [job_stream(job) for job in jobs if isinstance(job, str)]
    return streams if streams and journal.max_time(streams) is not None else []


def _has_job_streams(journal: JournalLike, account: str, before: int) -> bool:
    """Whether a job `account` submitted up to position `before` has a `job:<id>` stream
    (after one read of the account's submits)."""
    return bool(_job_streams(journal, (
        rec.payload.get("job")
        for rec in journal.read(stream=account, to_position=before, type="submit"))))


def _with_early_job_events(journal: JournalLike, stretch: list[RecordedEvent],
                           jobs: set[Any], after: int, to_position: int,
                           to_time: int | None) -> list[RecordedEvent] | None:
    """The stretch with the events of the account's jobs recorded after the checkpoint
    in a stream `job:<id>` of their own (an import that named a job before its submit);
    None if any of them is not a plain job event."""
    streams = _job_streams(journal, jobs)
    if not streams:
        return stretch
    early = [rec for stream in sorted(streams)
             for rec in journal.read(stream=stream, after_position=after,
                                     to_position=to_position, to_time=to_time,
                                     order="canonical")]
    if not early:
        return stretch
    if any(rec.type not in _JOB_EVENTS for rec in early):
        return None
    return list(heapq.merge(stretch, sorted(early, key=lambda r: (r.time, r.position)),
                            key=lambda r: (r.time, r.position)))
