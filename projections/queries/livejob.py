"""A job's explanation beside a live projection: its life read from the streams that can
hold its events, not from the whole journal.

A process that keeps the whole ledger folded (the service, the web view) knows which
account holds a job and which streams its events may lie in (`owners.job_streams`).
Those streams, with the `job:<id>` streams of the account's other jobs (what they held
decides which grants the job's hold took, and whether its submit was refused), fold to
the job's life, at the cost of the job's account's events: the credit book partitions
by account. What no stream shows is checked, never assumed: when their fold leaves the
job otherwise than the projection holds it (a job id another account submitted first, a
step filed in a stream the projection does not name), or a step of another of the
account's jobs may lie in another account's stream, the whole journal is folded, as
`explain --job` does without a checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eventstore import JournalLike, RecordedEvent
from projections.errors import UnknownJob
from projections.ledger import Ledger
from projections.owners import job_stream, job_streams, uncounted_submits
from projections.queries.explain import JobExplanation, job_explanation
from projections.queries.history import excluded_by
from projections.validation import spelling

StreamEvents = Callable[[str, int | None], list[RecordedEvent]]
"""Reads one stream's events recorded up to a position (None: the head), in any order."""


@dataclass(frozen=True, slots=True)
class JobWhereabouts:
    """What the projection knows of a job, taken under its lock: enough to explain the job
    afterwards without holding it."""

    job: str
    held: tuple[str, int | None] | None
    """The job's (state, charge) as the projection holds it; None: it holds no such job."""
    streams: tuple[str, ...]
    """The streams that may hold the job's events (for a job the projection holds)."""
    refused: tuple[str, ...]
    """For a job it does not hold: the ids of the events it refused or had reversed, the
    only ones that can name the job."""
    reversed_ids: frozenset[str]
    """Every reversed event's id, wherever its reversal is recorded."""
    position: int | None
    """The position the projection was caught up to (None: the head)."""
    elsewhere: bool = False
    """Whether the job's account's streams tell another story of its jobs than the whole
    fold: a step of one of its jobs may lie in another account's stream (a submit of the
    id the fold does not count is filed there), or its stream holds a submit of an id
    another account holds (the fold does not count it; its stream alone would, holding
    credits). Then only the whole journal tells what the account's jobs held."""


def job_whereabouts(journal: JournalLike, ledger: Ledger, job: str, *,
                    position: int | None = None) -> JobWhereabouts:
    """What `ledger` (the whole fold, caught up to `position`) knows of `job`."""
    state = ledger.jobs.get(job)
    if state is None:
        refused = (*(event_id for _, event_id, _ in ledger.anomalies), *ledger.excluded)
        return JobWhereabouts(job, None, (), refused, frozenset(ledger.excluded), position)
    account, jobs, excluded = state.account, ledger.jobs, ledger.excluded
    elsewhere = False
    # Read once for every id (they are few: only an import records a duplicate id, and
    # the reversed submits), for this job's streams too.
    uncounted = uncounted_submits(journal, ledger, None)
    for rec in uncounted:
        other = jobs.get(str(rec.payload.get("job")))
        holder = None if other is None else other.account
        if (rec.stream != account and holder == account) or (
                rec.stream == account and holder != account and rec.id not in excluded):
            elsewhere = True
            break
    return JobWhereabouts(job, (state.state, state.charge),
                          tuple(job_streams(journal, ledger, job, uncounted=uncounted)), (),
                          frozenset(ledger.excluded), position, elsewhere)


def read_stream(journal: JournalLike) -> StreamEvents:
    """`StreamEvents` reading `journal` each time."""
    def read(stream: str, position: int | None) -> list[RecordedEvent]:
        return list(journal.read(stream=stream, to_position=position, order="canonical"))
    return read


def live_job_explanation(journal: JournalLike, where: JobWhereabouts,
                         stream_events: StreamEvents | None = None) -> JobExplanation:
    """`explain_job` for the job `where` describes, from the streams that may hold its
    events, checked against the projection (whole journal when they disagree);
    UnknownJob when no event names it."""
    read = stream_events or read_stream(journal)
    job = where.job
    streams = where.streams
    if where.held is None:
        named = journal.get_many(sorted(set(where.refused))).values() if where.refused else ()
        streams = tuple(sorted({rec.stream for rec in named if rec.payload.get("job") == job}))

    def explain_from(events: list[RecordedEvent]) -> JobExplanation:
        ordered = sorted(events, key=lambda rec: (rec.time, rec.position))
        last = max((i for i, rec in enumerate(ordered) if rec.payload.get("job") == job),
                   default=None)
        if last is None:
            raise UnknownJob(f"unknown job {spelling(job)} (no event names it)")
        # Nothing after the job's last event changes what its events did: fold up to it.
        return job_explanation(ordered[:last + 1], job,
                               excluded=excluded_by(events) | where.reversed_ids,
                               later=ordered[last + 1:])

    found: JobExplanation | None = None
    if not where.elsewhere:
        events = [rec for stream in streams for rec in read(stream, where.position)]
        if where.held is not None:
            # The account's other jobs' steps recorded before their submit: they decided
            # what those jobs held when this one was submitted. One query says whether
            # any such stream exists (rarely: an import that named a job before its
            # submit); only then is each read.
            account = streams[0]
            others = sorted({name for rec in events if rec.type == "submit"
                             and rec.stream == account
                             and isinstance(name := rec.payload.get("job"), str)}
                            - {job}, key=job_stream)
            early = [job_stream(name) for name in others
                     if job_stream(name) not in streams]
            if early and journal.max_time(early) is not None:
                events += [rec for stream in early for rec in read(stream, where.position)]
        try:
            found = explain_from(events)
        except UnknownJob:
            if where.held is None:
                raise  # no refused or reversed event names it: no event does
            # the projection knows it: its events are in other streams
    if found is None or (where.held is not None and (found.state, found.charge) != where.held):
        # The streams are not the whole story (a job id another account submitted first,
        # a job's event recorded in another stream): the whole journal tells.
        found = explain_from(list(journal.read(to_position=where.position,
                                               order="canonical")))
    return found

