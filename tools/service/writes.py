"""The write endpoints: parse, build a command, hand it to the group-commit writer.

Every write takes an optional `Idempotency-Key` header, which becomes the event id (a
batch of events: the id of each event that has none, as KEY, KEY/2, KEY/3...). The same
key with the same body answers what the first request answered and appends nothing; the
same key with another body is 409. Without a key the service picks a fresh event id, and
a retry may record the decision twice: clients that retry should send a key.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response

from eventstore import canonical_json
from projections import importing
from projections.events import require_name
from tools.render import one_line
from tools.service import commands
from tools.service.auth import FINANCE, WORKER, needs
from tools.service.bindings import batch_key_conflict
from tools.service.groupcommit import Command
from tools.service.ledger import LedgerService, service_of
from tools.service.models import (
    AccountBody,
    AccountCreated,
    CompleteBody,
    EventsAnswer,
    EventsBody,
    GrantAnswer,
    GrantBody,
    JobBody,
    JobCancelledAnswer,
    JobSettled,
    JobSubmitted,
    StartedJob,
    TimeBody,
    UsageAnswer,
    UsageBody,
)
from tools.service.problems import ServiceProblem, documented
from tools.service.times import check_far, parse_event_time

router = APIRouter(prefix="/v1")

IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", min_length=1, max_length=200,
    description="becomes the event id; repeat it to retry safely (same body: same answer, "
                "nothing appended; another body: 409)")]

_ERRORS = documented([
    (400, "`Authorization` sent more than once (when tokens are configured)"),
    (401, "no or unknown bearer token (when tokens are configured)"),
    (403, "the token's role may not do this"),
    (404, "unknown account or job"),
    (409, "idempotency conflict, or a transition the job's state does not allow"),
    (413, "the body is larger than 64 KiB (32 MiB for `POST /v1/events`); nothing appended"),
    (422, "invalid body, parameters or key; nothing appended"),
    (503, "database unavailable or service starting; retry with the same key"),
])


def _key(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return require_name("Idempotency-Key", value)
    except ValueError as exc:
        raise ServiceProblem(422, str(exc), slug="invalid") from None


async def _decide(request: Request, time: int | None, idempotency_key: str | None,
                  command: Callable[[str | None], Command]) -> Any:
    """Every single-decision write: refuse a far event time, then a bad key, then hand the
    command, built with the key as its event id, to the writer. A far time under a valid
    key is refused by the writer, once it found the key free: a retry of a write taken
    while far times were allowed gets its answer (or 409), as every retry does."""
    service = service_of(request)
    try:
        check_far("time", time, service.allow_far_times)
    except ValueError as exc:
        far = ServiceProblem(422, str(exc), slug="invalid")
        if idempotency_key is None:
            raise far from None
        try:
            key = _key(idempotency_key)
        except ServiceProblem:
            raise far from None
        return await service.decide(commands.UnlessRetry(command(key), str(exc)))
    return await service.decide(command(_key(idempotency_key)))


@router.post("/accounts", status_code=201, response_model=AccountCreated,
             responses=_ERRORS, dependencies=[Depends(needs(FINANCE))],
             summary="Open an account")
async def open_account(body: AccountBody, request: Request,
                       idempotency_key: IdempotencyKey = None) -> Any:
    """Open an account (409 if an `account` event opened it before)."""
    return await _decide(request, body.time, idempotency_key, lambda key: commands.OpenAccount(
        key, body.account, body.max_running, body.time))


@router.post("/accounts/{account:path}/grants", status_code=201, response_model=GrantAnswer,
             response_model_exclude_none=True, responses=_ERRORS,
             dependencies=[Depends(needs(FINANCE))], summary="Grant credits")
async def grant(account: str, body: GrantBody, request: Request,
                idempotency_key: IdempotencyKey = None) -> Any:
    """Grant credits valid for `time <= t < expiry` (opens the account if needed)."""
    return await _decide(request, body.time, idempotency_key, lambda key: commands.Grant(
        key, account, body.amount, body.expiry, body.pool, body.priority, body.memo,
        body.time))


@router.post("/accounts/{account:path}/usage", status_code=201, response_model=UsageAnswer,
             responses=_ERRORS, dependencies=[Depends(needs(WORKER))],
             summary="Report usage")
async def usage(account: str, body: UsageBody, request: Request,
                idempotency_key: IdempotencyKey = None) -> Any:
    """Record credits used; beyond the active credits it becomes debt (`debt` after it)."""
    return await _decide(request, body.time, idempotency_key, lambda key: commands.Usage(
        key, account, body.amount, body.pool, body.memo, body.time, body.user))


@router.post("/jobs", status_code=201, response_model=JobSubmitted,
             response_model_exclude_none=True, responses=_ERRORS,
             dependencies=[Depends(needs(WORKER))], summary="Submit a job")
async def submit(body: JobBody, request: Request,
                 idempotency_key: IdempotencyKey = None) -> Any:
    """Reserve the job's cost; an unaffordable job is a recorded rejection (201, with
    `accepted: false` and the reason), not an error."""
    return await _decide(request, body.time, idempotency_key, lambda key: commands.Submit(
        key, body.job, body.account, body.cost, body.priority, body.pool, body.time,
        body.user))


@router.post("/jobs/start-next", response_model=StartedJob,
             responses={**_ERRORS, 204: {"description": "no job can start"}},
             dependencies=[Depends(needs(WORKER))], summary="Start the next job")
async def start_next(request: Request, body: TimeBody | None = None,
                     idempotency_key: IdempotencyKey = None) -> Any:
    """Start the highest-priority, oldest pending job whose account is below its cap."""
    time = body.time if body is not None else None
    started = await _decide(request, time, idempotency_key,
                            lambda key: commands.StartNext(key, time))
    if started is None:
        return Response(status_code=204)
    return started


@router.post("/jobs/{job:path}/complete", response_model=JobSettled, responses=_ERRORS,
             dependencies=[Depends(needs(WORKER))], summary="Complete a running job")
async def complete(job: str, body: CompleteBody, request: Request,
                   idempotency_key: IdempotencyKey = None) -> Any:
    """Settle a running job: success charges its cost, failure `floor(cost * (1 - f))`."""
    return await _decide(request, body.time, idempotency_key, lambda key: commands.Complete(
        key, job, body.success,
        1.0 if body.refund_fraction is None else float(body.refund_fraction), body.time))


@router.post("/jobs/{job:path}/cancel", response_model=JobCancelledAnswer, responses=_ERRORS,
             dependencies=[Depends(needs(WORKER))], summary="Cancel a pending job")
async def cancel(job: str, request: Request, body: TimeBody | None = None,
                 idempotency_key: IdempotencyKey = None) -> Any:
    """Cancel a pending job and release its reservation (again: no change)."""
    time = body.time if body is not None else None
    return await _decide(request, time, idempotency_key,
                         lambda key: commands.Cancel(key, job, time))


# -- a batch of events ----------------------------------------------------------------------


class AnswerCache:
    """The answers of recent keyed event batches, to repeat them word for word."""

    def __init__(self, size: int = 10_000) -> None:
        self._items: OrderedDict[str, tuple[str, dict[str, Any]]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[str, dict[str, Any]] | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: str, fingerprint: str, answer: dict[str, Any]) -> None:
        with self._lock:
            self._items[key] = (fingerprint, answer)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def forget(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)


_TIME_FIELDS = ("time", "expiry")


def _checked(records: list[Any], key: str | None, allow_far: bool, *,
             far: list[tuple[int, str]] | None = None, recorded: list[Any] | None = None
             ) -> tuple[list[importing.Entry], bool, list[tuple[int, str]]]:
    """Each record validated as `import` validates a line (parsed once: the entries go to
    the writer as they are); ids from the key where missing. `far`: where the records
    refused only for a far event time go, apart from the other problems (default: with
    them). `recorded`: gets each parsed record's id and event, far ones included, as the
    journal would record them (`Entry.whole`): what the batch's digest is made of."""
    out: list[importing.Entry] = []
    problems: list[tuple[int, str]] = []
    keyed = False
    for index, raw in enumerate(records):
        if not isinstance(raw, dict):
            problems.append((index, f"expected a JSON object, got {type(raw).__name__}"))
            continue
        record = raw
        try:
            if (isinstance(raw.get("time"), str) or isinstance(raw.get("expiry"), str)
                    or (key is not None and raw.get("id") is None)):
                # Only a record to change is copied (the body's own stays as sent).
                record = dict(raw)
                for name in _TIME_FIELDS:
                    if isinstance(record.get(name), str):
                        record[name] = parse_event_time(record[name])
                if record.get("id") is None and key is not None:
                    record["id"] = key if index == 0 else f"{key}/{index + 1}"
                    keyed = True
            event_id, time, event = importing.parse_record(record)
        except (ValueError, TypeError) as exc:
            problems.append((index, one_line(str(exc))))
            continue
        entry = importing.Entry(index + 1, event_id, time, event)
        if recorded is not None:
            recorded.append([event_id, entry.whole])
        try:
            if isinstance(record.get("time"), int):
                check_far("time", record["time"], allow_far)
        except ValueError as exc:
            (problems if far is None else far).append((index, one_line(str(exc))))
            continue
        out.append(entry)
    return out, keyed, problems


@router.post("/events", response_model=EventsAnswer, responses=_ERRORS,
             dependencies=[Depends(needs(FINANCE))], summary="Append events")
async def append_events(body: EventsBody, request: Request,
                        idempotency_key: IdempotencyKey = None) -> Any:
    """Append events in the JSON Lines import format, all or nothing: `422` names each
    bad event by its index. Events without `id` take one from the Idempotency-Key (KEY,
    KEY/2, ...), or without a key the id `import` would give them; events already recorded
    count as `already_present`. A batch holds 1 to 10,000 events (more is `422`) in a
    body of at most 32 MiB (more is `413`): send a longer history in several batches."""
    return await events_answer(service_of(request), request.app.state.event_answers,
                               body.events, _key(idempotency_key))


def _body_digest(events: list[Any]) -> str:
    """The digest of a batch's events as sent: what bindings made by earlier releases
    hold."""
    return hashlib.sha256(json.dumps(events, sort_keys=True).encode()).hexdigest()


async def events_answer(service: LedgerService, cache: AnswerCache,
                        events: list[Any], key: str | None) -> Any:
    """What `POST /v1/events` answers for these events (the body's, validated) under
    `key` (a valid Idempotency-Key, or None); a refusal raises (`ServiceProblem`)."""
    fingerprint = ""  # only a keyed batch is remembered
    legacy: Callable[[], str] | None = None
    # Under a key, a batch refused only for far event times goes to the writer, which
    # refuses it once it found the key free: the retry of a batch taken while far times
    # were allowed gets its answer (or 409), as every retry does.
    far: list[tuple[int, str]] = []
    recorded: list[Any] = []
    entries, keyed, problems = _checked(events, key, service.allow_far_times,
                                        far=None if key is None else far,
                                        recorded=None if key is None else recorded)
    if problems:
        raise commands.EventsRejected(await asyncio.to_thread(
            commands.every_problem, service, entries, sorted(problems + far)))
    if key is not None:
        # The digest of the events the batch would record, each with its id: a retry
        # that writes out a default, gives a time as ISO-8601 text or spells out the id
        # the key gives is the same batch, as for a single write. `legacy`: the digest
        # of the body as sent, which bindings made before were made of.
        fingerprint = hashlib.sha256(canonical_json(recorded).encode()).hexdigest()
        legacy = partial(_body_digest, events)
        seen = cache.get(key)
        if seen is not None and await asyncio.to_thread(service.journal.request, key) is None:
            # The binding was dropped since (an erasure of a record the batch named): the
            # answer remembered here would still confirm a guess of the erased text, so
            # the batch is decided from the journal alone, as after a restart.
            cache.forget(key)
            service.answers.forget(key)
            seen = None
        if seen is not None:
            if seen[0] != fingerprint:
                raise batch_key_conflict(key)
            return seen[1]
    answer = await service.decide(commands.AppendEvents(key, tuple(entries), keyed,
                                                        fingerprint, tuple(far), legacy))
    if key is not None:
        cache.put(key, fingerprint, answer)
    return answer


def install(app: Any) -> None:
    """State the write routes need."""
    app.state.event_answers = AnswerCache()
