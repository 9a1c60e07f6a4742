"""Which account an event belongs to, and where the events of an account and of a job are.

The journal files every event under a stream, and a stream is part of the hash chain: it
never changes once recorded. An event of an account is filed under the account's name
(a grant, a usage report, a submit: the account its payload names), a void and a
reversal under the stream of the event they name. A job's start, completion or cancel
names only its job, so it is filed under the account that job had when it was recorded:
the account of the job's submit in the same file, else the account the projection gave
the job then. Two cases leave it elsewhere for good:

* no submit of the job was recorded yet: the event goes to a stream of its own,
  `job:<id>`, which is no account; a submit recorded later makes it the job's;
* two accounts submitted the same job id (only an import can record that) and the submit
  first on the timeline arrived last, or the one known first was reversed: the event
  stays in the stream of the submit known when it arrived, another account's.

The account an event belongs to is therefore the fold's, never the stream's: for a step
of a job, the account of the job as the fold holds it (`event_account`). Every read that
groups events by account asks here: statements and lineage (`walk.AccountWalk`), the
revisions of an account (`GET /v1/revisions?account=`, the web view), a job's events
(`GET /v1/jobs/{job}`, the web view's job page). The same events give the same answers
whatever order they arrived in; only positions differ.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Set
from typing import Any

from eventstore import JournalLike, RecordedEvent
from projections.ledger import JobState, Ledger

JOB_STEPS = frozenset({"start", "complete", "cancel"})
"""The events that name a job and no account: filed under their job's account, if any."""

Named = Callable[[str], RecordedEvent | None]
"""Looks up a recorded event by its id (a journal's `get`): what a reversal names."""


def job_stream(job_id: str) -> str:
    """The stream of a job's events recorded before any submit of it was known."""
    return f"job:{job_id}"


def event_account(rec: RecordedEvent, jobs: Mapping[str, JobState],
                  named: Named | None = None,
                  former: Callable[[str], str | None] | None = None) -> str | None:
    """The account whose figures `rec` belongs to, as a fold whose jobs are `jobs` holds it
    (a `Ledger`'s, as it stands where the event lands, or at the head): the account its
    payload names; for a step of a job, the job's account (None while the fold knows no
    such job: no account's figures; `former`, given one, then names the account the job
    had before its submit was taken out, `former_job_account`); for a void, the account
    of its grant (its stream); for a reversal, the account of the event it names, looked
    up with `named` (down a chain of reversals of reversals), or its stream without one."""
    seen: set[str] = set()
    while rec.type == "reverse":
        target = rec.payload.get("event")
        found = named(target) if named is not None and isinstance(target, str) \
            and target not in seen else None
        if found is None:
            return rec.stream
        seen.add(rec.id)
        rec = found
    account = rec.payload.get("account")
    if isinstance(account, str):
        return account
    if rec.type == "void":
        return rec.stream  # recorded in the stream of its grant's account
    job = rec.payload.get("job")
    if not isinstance(job, str):
        return None
    state = jobs.get(job)
    if state is not None:
        return state.account
    return None if former is None or rec.type not in JOB_STEPS else former(job)


def former_job_account(journal: JournalLike, ledger: Ledger) -> Callable[[str], str | None]:
    """For a job `ledger` (the fold at the head) does not hold: the account of its submit
    the fold does not count (`uncounted_submits`: one a reversal took out), the first on
    the timeline if several, which the fold gave the job while it stood; None when no
    submit names the job at all (its steps were never any account's). Asked once per
    job."""
    found: dict[str, str | None] = {}

    def account(job: str) -> str | None:
        if job not in found:
            submits = sorted(uncounted_submits(journal, ledger, {job}),
                             key=lambda rec: (rec.time, rec.position))
            owner = submits[0].payload.get("account") if submits else None
            found[job] = owner if isinstance(owner, str) else None
        return found[job]

    return account


def named_among(events: Iterable[RecordedEvent]) -> Named:
    """A lookup of the events among `events` that a reversal among them names: a
    reversal is filed in the stream of the event it names, so the events of the streams
    that hold a reversal hold what it names."""
    given = list(events)
    targets = {target for rec in given if rec.type == "reverse"
               and isinstance(target := rec.payload.get("event"), str)}
    found = {rec.id: rec for rec in given if rec.id in targets} if targets else {}
    return found.get


def account_events(journal: JournalLike, account: str, *, to_position: int | None = None,
                   to_time: int | None = None) -> list[RecordedEvent] | None:
    """Every event recorded up to `to_position` that decides `account`'s figures, in
    canonical order: its stream (its own events, its jobs' events, voids of its grants,
    reversals of any of these), and the events of its jobs recorded before their submit
    was known (kept in a stream `job:<id>` of their own). With `to_time`, only those
    with event time <= `to_time`, and its reversals at any time (a reversal counts at
    every event time): a statement that ends early reads no event after its end. None
    when the stream holds an event that belongs to another account's figures (a job
    event whose job it never submitted before): then only a fold of the whole journal
    answers.

    The credit book partitions by account, so these fold to the account's figures
    without reading the rest of the journal: a statement costs the account's events,
    not the journal's. What no stream shows is a job id that another account submitted
    too (the command line and the service refuse a duplicate job id, an imported file
    can hold one): the later submit is an anomaly of the fold, and the steps of the job
    recorded while it was the known submit are in its account's stream. The caller asks
    the projection about the account's jobs (`queries.ownjobs.own_jobs`, which asks
    `submitted_elsewhere`) and folds the whole journal when they tell another story.
    """
    if not account:
        return []  # no account has an empty name (and the journal has no such stream)
    own = list(journal.read(stream=account, to_position=to_position, to_time=to_time,
                            order="canonical"))
    if to_time is not None:
        own.extend(rec for rec in journal.read(stream=account, to_position=to_position,
                                               type="reverse", order="canonical")
                   if rec.time > to_time)
    jobs = {job for rec in own if rec.type == "submit"
            and isinstance(job := rec.payload.get("job"), str)}
    early: list[RecordedEvent] = []
    # One query says whether any of those streams exists (rarely: an import that named a
    # job before its submit); only then is each read.
    if jobs and journal.max_time([job_stream(job) for job in jobs]) is not None:
        early = [rec for job in sorted(jobs)
                 for rec in journal.read(stream=job_stream(job), to_position=to_position,
                                         order="canonical")]
    events = own if not early else sorted([*own, *early],
                                          key=lambda rec: (rec.time, rec.position))
    submitted: set[str] = set()
    for rec in events:
        job = rec.payload.get("job")
        if rec.type == "submit":
            if rec.payload.get("account") != account:
                return None
            submitted.add(str(job))
        elif rec.type in JOB_STEPS:
            if job not in submitted:
                return None
        elif rec.type not in ("void", "reverse") and rec.payload.get("account") != account:
            return None
    return events


def duplicate_submit(job_id: str) -> str:
    """How the fold's reason for a second submit of `job_id` begins (its anomaly)."""
    return f"job {job_id!r} was submitted before"


_RESUBMITTED = " was submitted before"


def uncounted_submits(journal: JournalLike, ledger: Ledger,
                      jobs: Set[str] | None) -> list[RecordedEvent]:
    """The submits of these job ids (None: of any) that `ledger` (a fold, or a checkpoint's
    skeleton: its anomalies and reversals are what is read) does not count: second submits
    of an id (an anomaly; only an import records one) and submits a reversal names. A step
    of the job recorded while one of them was the known submit is filed in its stream."""
    if jobs is not None and not jobs:
        return []
    clashes = None if jobs is None else {duplicate_submit(job) for job in jobs}
    ids = {event_id for _, event_id, why in ledger.anomalies
           if (cut := why.find(_RESUBMITTED)) > 0
           and (clashes is None or why[:cut + len(_RESUBMITTED)] in clashes)}
    ids.update(ledger.reversals.values())
    if not ids:
        return []
    found = journal.get_many(sorted(ids))
    return sorted((rec for rec in found.values() if rec.type == "submit"
                   and (jobs is None or rec.payload.get("job") in jobs)),
                  key=lambda rec: rec.position)


def submitted_elsewhere(journal: JournalLike, ledger: Ledger, account: str,
                        jobs: Set[str]) -> bool:
    """Whether a submit of one of `account`'s jobs that the fold does not count is filed in
    another account's stream (`uncounted_submits`): then events of those jobs may be filed
    there, and only a fold of the whole journal finds them."""
    return any(rec.stream != account for rec in uncounted_submits(journal, ledger, jobs))


def job_streams(journal: JournalLike, ledger: Ledger, job_id: str, *,
                uncounted: list[RecordedEvent] | None = None) -> list[str]:
    """The streams that may hold events of `job_id`, as `ledger` (the whole fold) holds
    it: its account's, its own `job:<id>` (when it has one), and the streams of the
    submits of the id the fold does not count (`uncounted_submits`; `uncounted`: those
    of every id, when the caller has them already)."""
    job = ledger.jobs.get(job_id)
    streams = [] if job is None else [job.account]
    own = job_stream(job_id)
    if journal.stream_version(own):
        streams.append(own)
    for rec in (uncounted_submits(journal, ledger, {job_id}) if uncounted is None
                else uncounted):
        if rec.payload.get("job") == job_id and rec.stream not in streams:
            streams.append(rec.stream)
    return streams


def _names_job(payload: Any, job_id: str) -> bool:
    return isinstance(payload, dict) and payload.get("job") == job_id


def job_events(journal: JournalLike, ledger: Ledger, job_id: str, *,
               to_position: int | None = None) -> list[RecordedEvent]:
    """Every event naming `job_id` recorded up to `to_position`, in canonical order,
    wherever it was filed (`job_streams`; `ledger` is the fold as known at `to_position`):
    the job's submit, its steps and the other submits of its id. Reads those streams only,
    never the whole journal."""
    found = [stream_job_events(journal, stream, job_id, to_position=to_position)
             for stream in job_streams(journal, ledger, job_id)]
    return list(heapq.merge(*found, key=lambda rec: (rec.time, rec.position)))


def stream_job_events(journal: JournalLike, stream: str, job_id: str, *,
                      to_position: int | None = None) -> list[RecordedEvent]:
    """The events of `stream` naming `job_id` recorded up to `to_position`, in canonical
    order."""
    return [rec for rec in journal.read(stream=stream, to_position=to_position,
                                        order="canonical")
            if _names_job(rec.payload, job_id)]


def job_events_since(journal: JournalLike, streams: Iterable[str], job_id: str,
                     after_position: int, to_position: int) -> list[RecordedEvent]:
    """The events of `streams` naming `job_id` recorded after `after_position` up to
    `to_position`, in arrival order: read along positions (the primary key), so it
    costs what was recorded meanwhile, not the streams' length."""
    wanted = set(streams)
    return [rec for rec in journal.read(after_position=after_position,
                                        to_position=to_position, order="position")
            if rec.stream in wanted and _names_job(rec.payload, job_id)]


def revision_accounts(journal: JournalLike, ledger: Ledger,
                      event_ids: Iterable[str]) -> dict[str, str | None]:
    """The account each revised event belongs to (`event_account`, as `ledger`, the fold
    at the head, holds its jobs), by event id: what groups revisions by account. A step
    of a job whose submit was reversed is that submit's account's (`former_job_account`:
    the reversal revised what it had done there). None for a step of a job no submit
    names (no account's figures ever held it) or an event not found."""
    wanted = sorted(set(event_ids))
    if not wanted:
        return {}
    recs = journal.get_many(wanted)
    former = former_job_account(journal, ledger)
    return {event_id: None if (rec := recs.get(event_id)) is None
            else event_account(rec, ledger.jobs, journal.get, former)
            for event_id in wanted}
