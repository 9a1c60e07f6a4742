"""Whether an account's own events tell its jobs: a job id the journal holds twice (an
import's second submit under another account) is an anomaly of the whole fold that the
account's events alone would take as accepted. Statements and explanations ask before
folding one account's stream, and fold the whole journal when it cannot say."""

from __future__ import annotations

from eventstore import JournalLike, RecordedEvent
from projections.ledger import Ledger
from projections.owners import submitted_elsewhere
from projections.partial import account_jobs_at
from projections.queries.common import fold_as_known

NOT_HELD: tuple[str, int | None] = ("", None)
"""`own_jobs`' entry for a job id the account's events submit that the projection gives
to no account (every submit of it reversed): its fold must not hold the job either."""


def submitted_jobs(events: list[RecordedEvent]) -> set[str]:
    """The job ids these events submit."""
    return {job for rec in events if rec.type == "submit"
            and isinstance(job := rec.payload.get("job"), str)}


def own_jobs(journal: JournalLike, account: str, events: list[RecordedEvent],
             position: int) -> dict[str, tuple[str, int | None]] | None:
    """The account's jobs as the projection holds them (job -> (state, charge)) for an
    account whose events submit jobs; {} for one that submits none. Read from the
    newest valid checkpoint's job index and the account's own events after it
    (`account_jobs_at`: no other account's state, no refold), or when those cannot say
    (an event elsewhere names the account or its jobs), from the projection's fold.

    A job id the projection gives to no account (its submits reversed) is NOT_HELD: the
    account's fold tells it as the whole one does when that fold holds no such job either
    (`jobs_differ`). None when the account's events submit a job id the projection gives
    to another account (submitted there first: this submit is an anomaly of the fold,
    which the account's events alone would take as accepted); and when another account's
    stream holds a submit of one of its job ids that the fold does not count (a second
    submit, or a reversed one), in whose stream events of the job may be filed
    (`owners.submitted_elsewhere`): only a fold of the whole journal finds those."""
    submitted = submitted_jobs(events)
    if not submitted:
        return {}
    facts = account_jobs_at(journal, account, submitted, to_position=position)
    if facts is not None:
        own = {job: (state, charge) for job, (owner, state, charge) in facts.items()
               if owner == account}
        held_elsewhere = (submitted - own.keys()) & facts.keys()
    else:
        ledger = fold_as_known(journal, to_position=position)
        own = {job.id: (job.state, job.charge) for job in ledger.jobs.values()
               if job.account == account}
        held_elsewhere = (submitted - own.keys()) & ledger.jobs.keys()
        if not held_elsewhere and submitted_elsewhere(journal, ledger, account, submitted):
            return None
    if held_elsewhere:
        return None
    own.update((job, NOT_HELD) for job in submitted - own.keys())
    return own


def jobs_differ(ledger: Ledger, own: dict[str, tuple[str, int | None]]) -> bool:
    """Whether a fold of the account's events leaves any of its jobs otherwise than the
    projection does (a NOT_HELD job held at all)."""
    jobs = ledger.jobs
    return any(held != NOT_HELD if (job := jobs.get(job_id)) is None
               else held == NOT_HELD or (job.state, job.charge) != held
               for job_id, held in own.items())
