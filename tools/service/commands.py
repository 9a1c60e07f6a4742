"""The service's write commands: each knows the keys it locks and how it decides.

Every command runs on the writer thread, inside the batch's transaction, through the
same session methods and event validation the library and `gpu-credits import` use:
nothing about credits or jobs is decided here. A command's answer is built from what
was recorded (the event and the fold's outcome), so a retry with the same
Idempotency-Key, even after a restart, answers the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eventstore import IdempotencyConflict, RecordedEvent, RequestKey, canonical_json
from eventstore.appending import INT64_MAX, INT64_MIN
from projections import importing, jobs
from projections.corrections import Corrections
from projections.errors import UnknownAccount, UnknownJob
from projections.events import DEFAULT_GRANT_PRIORITY, EventReversed, GrantVoided
from projections.jobs import QUEUE, QUEUE_SHARED
from projections.ledger import Ledger
from projections.replay import invalidate_after
from projections.session import job_key, lock_key
from projections.validation import require_name, spelling
from tools.service.bindings import (
    answer_from_binding,
    cancel_fingerprint,
    key_in_use,
    start_next_fingerprint,
)
from tools.service.groupcommit import Command
from tools.service.ledger import LedgerService
from tools.service.problems import ServiceProblem

# Answers are plain dicts in the shape of the response models; `None` means 204.
AnswerDict = dict[str, Any]



def _recorded(event_id: str, position: int, **answer: Any) -> AnswerDict:
    """An answer that names the event recorded (`id`) and its journal `position`."""
    return {"id": event_id, "position": position, **answer}


def _corrections(service: LedgerService) -> Corrections:
    """The library's single-event writer on the live session: a grant or usage report is
    decided and validated as `gpu-credits grant` / `consume` decide it."""
    return Corrections(service.session, service.clock,
                       allow_far_times=service.allow_far_times)


@dataclass(frozen=True, slots=True)
class OpenAccount:
    """`POST /v1/accounts`."""

    key: str | None
    account: str
    max_running: int | None
    time: int | None = None

    def locks(self, ledger: Ledger) -> list[str]:
        return [self.account]

    def run(self, service: LedgerService) -> AnswerDict:
        require_name("account", self.account)  # the body's field, not the facade's argument
        outcome = jobs.open_account(service.session, self.account, max_running=self.max_running,
                                    at=self.time, clock=service.clock, event_id=self.key,
                                    allow_far_times=service.allow_far_times).outcome
        return _recorded(outcome.event_id, outcome.position, account=self.account,
                         max_running=self.max_running)


@dataclass(frozen=True, slots=True)
class Grant:
    """`POST /v1/accounts/{account}/grants`: credits valid for `time <= t < expiry`, in
    `pool` or general (an account granted to for the first time is opened)."""

    key: str | None
    account: str
    amount: int
    expiry: int | None
    pool: str | None
    priority: int | None
    memo: str | None
    time: int | None

    def locks(self, ledger: Ledger) -> list[str]:
        return [self.account]

    def run(self, service: LedgerService) -> AnswerDict:
        priority = DEFAULT_GRANT_PRIORITY if self.priority is None else self.priority
        outcome = _corrections(service).grant(
            self.account, self.amount, at=self.time, expiry=self.expiry, pool=self.pool,
            priority=priority, memo=self.memo, event_id=self.key)
        event_pool = self.pool if self.pool is not None else "general"
        return {"id": outcome.event_id, "account": self.account, "amount": self.amount,
                # The priority in force, said or not: a retry that spells out the default
                # is the same grant, and gets the same answer.
                "expiry": self.expiry, "pool": event_pool, "priority": priority,
                "memo": self.memo, "time": outcome.time, "position": outcome.position}


@dataclass(frozen=True, slots=True)
class Usage:
    """`POST /v1/accounts/{account}/usage`."""

    key: str | None
    account: str
    amount: int
    pool: str | None
    memo: str | None
    time: int | None
    user: str | None = None

    def locks(self, ledger: Ledger) -> list[str]:
        return [self.account]

    def run(self, service: LedgerService) -> AnswerDict:
        # A name no account can have is a bad request (422, as a grant to it is), not an
        # account that happens not to exist.
        require_name("account", self.account)
        # The writer holds the session's lock and this account's key: the check and the
        # decision see the same state.
        account = service.session.ledger.accounts.get(self.account)
        if account is None or not account.opened:
            raise UnknownAccount(f"unknown account {self.account!r}: open it or grant "
                                 "credits to it first")
        outcome = _corrections(service).consume(
            self.account, self.amount, at=self.time, pool=self.pool, memo=self.memo,
            event_id=self.key, user=self.user)
        return _recorded(outcome.event_id, outcome.position, debt=outcome.debt_after or 0,
                         account=self.account, amount=self.amount,
                         pool=self.pool if self.pool is not None else "general",
                         time=outcome.time)


@dataclass(frozen=True, slots=True)
class Submit:
    """`POST /v1/jobs`."""

    key: str | None
    job: str
    account: str
    cost: int
    priority: int
    pool: str | None
    time: int | None
    user: str | None = None

    def locks(self, ledger: Ledger) -> list[str]:
        return [self.account, QUEUE_SHARED, job_key(self.job)]

    def run(self, service: LedgerService) -> AnswerDict:
        require_name("job", self.job)  # the body's fields, not the facade's arguments
        require_name("account", self.account)
        outcome = jobs.submit(service.session, self.job, self.account, self.cost,
                              self.priority, at=self.time, pool=self.pool, user=self.user,
                              clock=service.clock, event_id=self.key,
                              allow_far_times=service.allow_far_times).outcome
        answer: AnswerDict = {"job": self.job, "accepted": outcome.ok,
                              "state": "pending" if outcome.ok else "rejected",
                              "id": outcome.event_id, "position": outcome.position}
        if not outcome.ok:
            answer["reason"] = outcome.reason
        return answer


@dataclass(frozen=True, slots=True)
class StartNext:
    """`POST /v1/jobs/start-next`: the answer is the started job, or None (204)."""

    key: str | None
    time: int | None

    def locks(self, ledger: Ledger) -> list[str]:
        # The queue's exclusive key: no submit, completion or cancel anywhere meanwhile.
        return [QUEUE]

    def run(self, service: LedgerService) -> AnswerDict | None:
        session = service.session
        decision = jobs.start_next(session, at=self.time, clock=service.clock,
                                   event_id=self.key, allow_far_times=service.allow_far_times)
        job = jobs.started_job(session, decision)
        if job is None:
            if self.key is not None:
                # Nothing recorded names the key: bind it, with the batch's write, so
                # that a retry after a restart or on another replica is 204 again.
                service.batching.bind_request_later(
                    self.key, start_next_fingerprint(self.time), "null", ())
            return None
        return {"job": job.id, "account": job.account_id, "cost": job.cost,
                "priority": job.priority}

    def replay(self, binding: RequestKey) -> None:
        """The retry of a start that found nothing under this key: 204 again; another
        request's key: 409."""
        if binding.fingerprint != start_next_fingerprint(self.time):
            raise key_in_use(self.key, binding)


@dataclass(frozen=True, slots=True)
class Complete:
    """`POST /v1/jobs/{job}/complete`."""

    key: str | None
    job: str
    success: bool
    refund_fraction: float
    time: int | None

    def locks(self, ledger: Ledger) -> list[str]:
        return jobs.job_locks(ledger, self.job)

    def run(self, service: LedgerService) -> AnswerDict:
        require_name("job", self.job)  # the path's name, not the facade's argument
        session = service.session
        decision = jobs.complete(session, self.job, self.success,
                                 refund_fraction=self.refund_fraction, at=self.time,
                                 clock=service.clock, event_id=self.key,
                                 allow_far_times=service.allow_far_times)
        job = session.ledger.jobs.get(self.job)
        # A completion that took effect answers as it was told: a retry's answer too, once
        # its job's submit was reversed since, or the completion itself and the job then
        # completed again the other way (the job's state now is that completion's).
        told = bool(decision.outcomes) and decision.outcome.ok
        if not told and job is None:
            raise UnknownJob(f"unknown job {spelling(self.job)}")
        charged = decision.outcome.charge
        if charged is None and job is not None:
            charged = job.charge
        state = job.state if not told and job is not None \
            and job.state in ("succeeded", "failed") else (
                "succeeded" if self.success else "failed")
        return {"job": self.job, "state": state, "charged": charged}


@dataclass(frozen=True, slots=True)
class Cancel:
    """`POST /v1/jobs/{job}/cancel`."""

    key: str | None
    job: str
    time: int | None

    def locks(self, ledger: Ledger) -> list[str]:
        return jobs.job_locks(ledger, self.job)

    def run(self, service: LedgerService) -> AnswerDict:
        require_name("job", self.job)  # the path's name, not the facade's argument
        decision = jobs.cancel(service.session, self.job, at=self.time,
                               clock=service.clock, event_id=self.key,
                               allow_far_times=service.allow_far_times)
        if decision.outcomes and decision.outcome.ok:
            # What the cancel did, as it was told (a retry's too, once a late event made
            # the job's submit a rejection since: the job's state now says that).
            return {"job": self.job, "state": "cancelled"}
        job = service.session.ledger.jobs.get(self.job)
        if job is None:
            raise UnknownJob(f"unknown job {spelling(self.job)}")
        if not decision.events and self.key is not None:
            # Cancelled before: nothing recorded names the key. Bind it, as a start-next
            # that found nothing, so that it is not free for another request meanwhile.
            service.batching.bind_request_later(
                self.key, cancel_fingerprint(self.job, self.time), "null", ())
        return {"job": self.job, "state": job.state}

    def replay(self, binding: RequestKey) -> AnswerDict:
        """The retry of a cancel of a job cancelled before: the same answer; another
        request's key: 409."""
        if binding.fingerprint != cancel_fingerprint(self.job, self.time):
            raise key_in_use(self.key, binding)
        return {"job": self.job, "state": "cancelled"}


@dataclass(frozen=True, slots=True)
class UnlessRetry:
    """A keyed single write whose event time is refused as far (`refusal`: why, the
    `422`'s detail), unless its key names a decision already recorded or bound: then it is
    a retry, looked up as every keyed write is (its original answer, or `409` for another
    request). A write a service started with `--allow-far-times` took keeps its answer
    when the service runs without it since; only a new key is held to the rule."""

    command: Command
    refusal: str

    @property
    def key(self) -> str | None:
        return self.command.key

    def locks(self, ledger: Ledger) -> list[str]:
        return self.command.locks(ledger)

    def run(self, service: LedgerService) -> Any:
        # A key bound to a request that recorded nothing (or to a batch) never gets here:
        # the writer answers it from the binding (`replay`).
        key = self.key
        if key is None or service.session.journal.get(key) is None:
            raise ServiceProblem(422, self.refusal, slug="invalid")
        return self.command.run(service)

    def replay(self, binding: RequestKey) -> Any:
        """As the write itself answers a key bound to a request (see `bindings.Bound`)."""
        return answer_from_binding(self.command, binding)


class EventsRejected(ServiceProblem):
    """A batch of events with bad ones: each named by its index; nothing appended."""

    def __init__(self, errors: list[tuple[int, str]]) -> None:
        # The detail names them all (a client may show only the detail), up to a bound.
        named = "; ".join(f"event {index}: {why}" for index, why in errors[:_NAMED])
        more = f"; and {len(errors) - _NAMED} more" if len(errors) > _NAMED else ""
        super().__init__(422, f"{len(errors)} invalid event(s), nothing appended; "
                         f"{named}{more}", slug="invalid-events", errors=errors)


_NAMED = 20
"""Bad events a refusal's detail names one by one; its `errors` list names every one."""


@dataclass(frozen=True, slots=True)
class AppendEvents:
    """`POST /v1/events`: import-format records, all or nothing."""

    key: str | None
    # Each record as the route parsed and checked it (`importing.parse_record`), its line
    # its index + 1: planned from these, not serialised and read again.
    entries: tuple[importing.Entry, ...]
    keyed: bool = False  # some records took their id from the key (KEY, KEY/2, ...)
    # The request's digest under its key (see `writes.events_answer`): the key is bound
    # to it and to the answer in the journal, with the events. "": no binding.
    fingerprint: str = ""
    # The records (index, why) refused only for their far event time, under a key: the
    # batch is refused once its key is found free (a retry of a batch taken while far
    # times were allowed is answered as it was). `entries` holds the other records.
    far: tuple[tuple[int, str], ...] = ()
    # The digest a binding made by an earlier release holds for this request (of the body
    # as sent): such a binding answers its request's retry too. Made only when a binding
    # differs from `fingerprint` (a batch's digest costs a tenth of a millisecond);
    # None: none. Not part of the command's identity: `fingerprint` is.
    legacy: Callable[[], str] | None = field(default=None, compare=False)

    @classmethod
    def of_records(cls, key: str | None, records: Sequence[Mapping[str, Any]]
                   ) -> AppendEvents:
        """The command for import-format records, each parsed as `import` parses a line
        (ValueError or TypeError on the first bad one)."""
        return cls(key, tuple(importing.Entry(index + 1, *importing.parse_record(record))
                              for index, record in enumerate(records)))

    @property
    def event_ids(self) -> list[str]:
        """The records' own ids: the writer looks them up with the batch's head."""
        return [e.id for e in self.entries if e.id is not None]

    def locks(self, ledger: Ledger) -> list[str]:
        keys: set[str] = set()
        for entry in self.entries:
            account = getattr(entry.event, "account", None)
            if isinstance(account, str):
                keys.add(account)
            job = getattr(entry.event, "job", None)
            if isinstance(job, str):
                keys.add(QUEUE_SHARED)
                state = ledger.jobs.get(job)
                if state is not None:
                    keys.add(state.account)
        # (Its Idempotency-Key's lock the writer adds, as for every keyed command.)
        return sorted(keys)

    def run(self, service: LedgerService) -> AnswerDict:
        if service.batching.deciding_ahead():
            answer = self._ahead(service)
            if answer is not None:
                return answer
            # The journal itself is needed (see `_ahead`): the batch's transaction now.
            service.batching.join()
        journal, session = service.journal, service.session
        service.batching.flush()  # the batch's deferred decisions go first
        if self.key is not None and self.fingerprint:
            known = self._looked_up(journal.request(self.key), journal.get(self.key),
                                    journal.get_many)
            if known is not None:
                return known
        if self.far:
            raise EventsRejected(every_problem(service, list(self.entries), list(self.far)))
        plan = importing.plan_entries(self.entries, "request", journal,
                                      allow_far_times=service.allow_far_times)
        if not plan.ok:
            raise EventsRejected(_by_index(plan.problems))
        before = journal.head()
        # Hold the key of every stream written, as the import resolved them (a job event
        # goes to its job's account, found only now); already held keys cost nothing.
        with service.batching.transaction(sorted({lock_key(e.stream) for e in plan.events})):
            recorded = journal.append(plan.events)
            answer = self._answer(recorded, before)
            if self.key is not None and self.fingerprint:
                # In the events' transaction: after a restart the key still names this
                # batch and its answer, also when every record carries its own id.
                try:
                    journal.bind_request(self.key, self.fingerprint, canonical_json(answer),
                                         answer["positions"])
                except IdempotencyConflict as exc:
                    # Bound since the look-up (its lock was not held): not a refusal, which
                    # would let the batch commit these events; the batch fails instead,
                    # and its retry finds the binding.
                    raise RuntimeError(f"Idempotency-Key {self.key!r} was bound by another "
                                       "writer while this batch was appended") from exc
        with session.lock:
            # The events as parsed go to the fold with their records (not decoded again
            # from the payloads), as a decision's own events do.
            if not session.ingest_appended(recorded, plan.decoded):
                session.catch_up()
            late = session.projector.late_times
            if late and journal.url is not None:
                invalidate_after(journal, min(late))
            late.clear()
        return answer

    def _answer(self, recorded: list[RecordedEvent], before: int) -> AnswerDict:
        """What the batch answers, its records `recorded` with the journal at `before`."""
        # A record repeated in the batch (one id, the same content) is one event: the
        # repeat counts as already present, as `import` counts it.
        appended = len({r.position for r in recorded if r.position > before})
        if appended == 0 and self.keyed and recorded:
            # A retry of a batch recorded before keys were bound in the journal (after a
            # restart: the answer cache is per process). The original request appended
            # its new events in one append, which stamped them with one recorded_at:
            # those are the ones it appended.
            newest = max(r.recorded_at for r in recorded)
            appended = len({r.position for r in recorded if r.recorded_at == newest})
        return {"appended": appended, "already_present": len(recorded) - appended,
                "positions": [r.position for r in recorded]}

    def _answered(self, bound: RequestKey,
                  recorded: Callable[[list[str]], Mapping[str, RecordedEvent]]
                  ) -> AnswerDict:
        """The answer the request bound to this key got; 409 for another request. The
        binding is outside the hash chain, the positions it names are not: it answers
        only when each of them holds the record of the batch at its place (`recorded`:
        the journal's events by id), else 500, since a row edited or forged in
        `request_keys` would tell the client its events are recorded when they are not."""
        if bound.fingerprint != self.fingerprint and (
                self.legacy is None or bound.fingerprint != self.legacy()):
            raise key_in_use(self.key, bound)
        answer: AnswerDict = json.loads(bound.answer)
        # Under a key every record has an id (its own, or KEY, KEY/2...). A record held
        # back for its far time (`far`) is not among the entries: its place goes unchecked.
        found = recorded([e.id for e in self.entries if e.id is not None])
        positions = answer.get("positions") if isinstance(answer, dict) else None
        held = {e.line - 1: found[e.id].position if e.id in found else None
                for e in self.entries if e.id is not None}
        counts = [n for n in (answer.get("appended"), answer.get("already_present"))
                  if isinstance(n, int) and n >= 0] if isinstance(answer, dict) else []
        size = len(self.entries) + len(self.far)
        if not (isinstance(positions, list) and len(positions) == size
                and len(held) == len(self.entries)
                and all(positions[index] == at for index, at in held.items())
                and len(counts) == 2 and sum(counts) == size):
            raise ServiceProblem(
                500, f"Idempotency-Key {self.key!r} is bound in request_keys to the answer "
                f"{bound.answer}, but the batch's records are at positions "
                f"{[held.get(i) for i in range(size)]} ({positions} named; None: not "
                "recorded or not checked): the row was changed outside the service, and is "
                "not answered; restore request_keys from a backup")
        return answer

    def _looked_up(self, bound: RequestKey | None, named: RecordedEvent | None,
                   recorded: Callable[[list[str]], Mapping[str, RecordedEvent]]
                   ) -> AnswerDict | None:
        """What the key's look-up decides: the answer it is bound to (or 409 for another
        batch), 409 when it names an event another request recorded, else None (the key
        is free: decide the batch). `recorded`: the journal's events by id."""
        if bound is not None:
            return self._answered(bound, recorded)
        if named is not None:
            # A key is an event id: one a single write recorded names that write, also
            # when a record of this batch took the key as its id and holds the same
            # content (the batch would count the write's event as its own, and bind the
            # key, turning the write's retry into a conflict). A batch that recorded it
            # would have bound the key with it (unless an erasure dropped the binding,
            # which a retry must not get round).
            # Also where an erasure dropped the binding, or an import left it behind: the
            # detail says so, for the client whose own batch's retry it is.
            raise ServiceProblem(
                409, f"Idempotency-Key {self.key!r} names the event recorded at position "
                f"{named.position} ({named.type} on {named.stream!r}), which another "
                "request recorded (or a batch of events whose binding to the key was "
                "dropped by an erasure, or not imported with the journal: then its events "
                "are recorded): use a new key for a new request",
                slug="idempotency-conflict")
        return None

    def _ahead(self, service: LedgerService) -> AnswerDict | None:
        """The plain batch (every record with its own id, none recorded yet, no void,
        reversal or job event: nothing to look up in the journal), decided ahead of the
        batch's transaction: its events deferred like a decision's. None: not plain."""
        entries = self.entries
        ids = [e.id for e in entries]
        if self.far or (any(i is None for i in ids) or len(set(ids)) != len(ids) or any(
                isinstance(e.event, _LOOKS_UP) or getattr(e.event, "job", None) is not None
                for e in entries)):
            return None
        binding = self.key is not None and bool(self.fingerprint)
        if binding and self.key is not None:
            known = self._looked_up(service.batching.request_ahead(self.key),
                                    service.batching.recorded_ahead([self.key]).get(self.key),
                                    service.batching.recorded_ahead)
            if known is not None:
                return known
        plan = importing.plan_entries(entries, "request", service.batching,
                                      allow_far_times=service.allow_far_times)
        if not plan.ok:
            raise EventsRejected(_by_index(plan.problems))
        if any(not INT64_MIN <= e.time <= INT64_MAX for e in plan.events):
            return None  # the journal refuses it (with --allow-far-times): refuse it there
        if service.batching.recorded_ahead([e.id for e in plan.events]):
            return None  # a retry, or an import run twice: the journal answers it
        session = service.session
        with service.batching.transaction(sorted({lock_key(e.stream) for e in plan.events})) as tx:
            recorded = tx.append(plan.events)
            answer: AnswerDict = {"appended": len(recorded), "already_present": 0,
                                  "positions": [r.position for r in recorded]}
            if binding and self.key is not None:
                # Written with the deferred events; a binding made meanwhile by another
                # writer fails that write, and the batch is decided again.
                service.batching.bind_request_later(self.key, self.fingerprint,
                                                    canonical_json(answer),
                                                    answer["positions"])
        with session.lock:
            if not session.ingest_appended(recorded, plan.decoded):
                session.catch_up()
            late = session.projector.late_times
            if late and service.journal.url is not None:
                service.batching.join()  # the snapshots it drops go with the batch
                invalidate_after(service.journal, min(late))
            late.clear()
        return answer


def _by_index(problems: Sequence[importing.Problem]) -> list[tuple[int, str]]:
    """The planner's problems by a batch's index (from 0) rather than `import`'s line
    (from 1), the other event a message names too: "event 1: id 'x' is used on line 1"
    named the event it refused, not the one that holds the id."""
    return [(p.line - 1, p.message if p.used_by is None else
             f"id {p.used_by[0]!r} is used by event {p.used_by[1] - 1} for another event")
            for p in problems]


def every_problem(service: LedgerService, entries: list[importing.Entry],
                  problems: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The records that did not parse (`problems`), with what planning the others
    (`entries`) finds (a reversal of an event that is nowhere, say): every bad event
    named at once, as `import` names every bad line. Only for a refusal: nothing is
    appended either way."""
    plan = importing.plan_entries(
        entries, "request", service.journal, allow_far_times=service.allow_far_times,
        problems=[importing.Problem(index + 1, why) for index, why in problems])
    return sorted(_by_index(plan.problems), key=lambda p: p[0])


# Records whose stream or validity depends on events already recorded.
_LOOKS_UP = (GrantVoided, EventReversed)
