"""The hot routes without FastAPI's request machinery: usage reports, balance reads and
batches of events.

Why: on two shared cores the HTTP layer, not the database, is what a single decision
costs. FastAPI's routing, dependency solving and body handling cost about twice a bare
endpoint's CPU per request; this ASGI middleware answers the routes that clients call
in a loop (`POST /v1/accounts/{account}/usage`, `GET /v1/accounts/{account}/balance`
without parameters, `POST /v1/events`) itself, with the same models, the same checks and
the same command, so the answer is the one the route would give, byte for byte. (A batch
of events is also read once here, where the route reads its body twice: strictly, then
as FastAPI parses it.)

It only takes the plain case: a request it cannot answer exactly as the route would
(no or another content type, a body or key the route would refuse, a token that is
missing, unknown or of another role (with tokens configured, `auth.Gate` refuses that
before this runs), a read that would have to wait for the writer or look at the
journal) goes on to the FastAPI route, which answers as it always does
(errors included). The routes stay declared in FastAPI, so the OpenAPI document is
generated from them as before; the models validate the bodies and build the answers.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from projections.ledger import Ledger
from projections.session import LedgerSession
from projections.validation import loads_strict
from tools.service import commands, writes
from tools.service.auth import FINANCE, READ, WORKER, Authority, bearer_token
from tools.service.ledger import STALE, Busy, LedgerService
from tools.service.models import BalanceAnswer, EventsAnswer, EventsBody, UsageAnswer, UsageBody
from tools.service.problems import from_exception
from tools.service.strict_body import PARSE_ASIDE, Receive, Scope, Send, replaying
from tools.service.times import check_far
from tools.service.writes import AnswerCache

App = Callable[[Scope, Receive, Send], Awaitable[None]]

# Starlette's `{account}` matches one non-empty path segment.
_USAGE = re.compile(r"/v1/accounts/([^/]+)/usage")
_BALANCE = re.compile(r"/v1/accounts/([^/]+)/balance")

MAX_FAST_BODY = 64 * 1024
"""A larger usage body goes to the route (it is a refusal: a memo has 1,000 characters)."""

MAX_FAST_EVENTS_BODY = 4 * 1024 * 1024
"""A larger batch of events goes to the route (which reads up to 32 MiB)."""

_EVENTS = "/v1/events"

_USAGE_ANSWER: TypeAdapter[UsageAnswer] = TypeAdapter(UsageAnswer)
_BALANCE_ANSWER: TypeAdapter[BalanceAnswer] = TypeAdapter(BalanceAnswer)
_EVENTS_ANSWER: TypeAdapter[EventsAnswer] = TypeAdapter(EventsAnswer)


def _json(adapter: TypeAdapter[Any], answer: dict[str, Any]) -> bytes:
    """The answer as FastAPI serialises a `response_model` (validated, then dumped by
    pydantic's serializer): the same bytes the route sends."""
    return adapter.dump_json(adapter.validate_python(answer), by_alias=True)


_USAGE_FIELDS = tuple(UsageAnswer.model_fields)
_USAGE_TEXT = frozenset(name for name, field in UsageAnswer.model_fields.items()
                        if field.annotation is str)


def _usage_json(answer: dict[str, Any]) -> bytes:
    """`_json(_USAGE_ANSWER, answer)` without the model when the answer is plainly in
    its shape (exactly its fields, each an exact `str` or `int`): the model's
    validation and serializer cost about as much as the rest of the answer's way out.
    Anything else (a missing or extra field, a subclass, an int or text orjson will
    not write) goes through the model, which answers or refuses as it always did."""
    if len(answer) == len(_USAGE_FIELDS):
        try:
            ordered = {}
            for name in _USAGE_FIELDS:
                value = answer[name]
                if type(value) is not (str if name in _USAGE_TEXT else int):
                    break
                ordered[name] = value
            else:
                return orjson.dumps(ordered)
        except (KeyError, orjson.JSONEncodeError):
            pass
    return _json(_USAGE_ANSWER, answer)


def _events_json(answer: dict[str, Any]) -> bytes:
    """`_json(_EVENTS_ANSWER, answer)` the same way: two ints and a list of ints."""
    if len(answer) == 3:
        try:
            appended, present, positions = (
                answer["appended"], answer["already_present"], answer["positions"])
            if type(appended) is int and type(present) is int and type(positions) is list \
                    and all(type(p) is int for p in positions):
                return orjson.dumps({"appended": appended, "already_present": present,
                                     "positions": positions})
        except (KeyError, orjson.JSONEncodeError):
            pass
    return _json(_EVENTS_ANSWER, answer)


class _Fallback(Exception):
    """The fast path cannot answer this request exactly as the route would."""


def _header(scope: Scope, name: bytes) -> bytes | None:
    """The header's value; `_Fallback` when it is sent more than once (the route decides)."""
    found: bytes | None = None
    for key, value in scope["headers"]:
        if key == name:
            if found is not None:
                raise _Fallback
            found = value
    return found


def _role(scope: Scope, authority: Authority, roles: tuple[str, ...]) -> None:
    """What `Authority.require` checks, without its errors: a caller it would refuse goes
    to the route, which refuses it."""
    if not authority.enabled:
        return
    raw = _header(scope, b"authorization")
    if raw is None:
        raise _Fallback
    presented = bearer_token(raw.decode("latin-1"))
    if presented is None:
        raise _Fallback
    role = authority.role_of(presented)
    if role is None or role not in roles:
        raise _Fallback
    scope.setdefault("state", {})["role"] = role


async def _send_json(send: Send, status: int, body: bytes,
                     media_type: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode("latin-1")),
                            (b"content-type", media_type)]})
    await send({"type": "http.response.body", "body": body})


class FastRoutes:
    """ASGI middleware: the plain case of the hot routes (see the module doc)."""

    def __init__(self, app: App, service: LedgerService, authority: Authority,
                 event_answers: AnswerCache | None = None) -> None:
        """`event_answers`: the answers of keyed event batches the route keeps (None: event
        batches go to the route)."""
        self.app = app
        self.service = service
        self.authority = authority
        self.event_answers = event_answers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method, path = scope["method"], scope["path"]
            if method == "POST" and path.endswith("/usage"):
                match = _USAGE.fullmatch(path)
                if match is not None:
                    await self._usage(match.group(1), scope, receive, send)
                    return
            elif method == "POST" and path == _EVENTS and self.event_answers is not None:
                await self._events(self.event_answers, scope, receive, send)
                return
            elif method == "GET" and path.endswith("/balance") and not scope["query_string"]:
                match = _BALANCE.fullmatch(path)
                if match is not None and await self._balance(match.group(1), scope, send):
                    return
        await self.app(scope, receive, send)

    # -- usage ------------------------------------------------------------------------------

    async def _usage(self, account: str, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            key = self._write_key(scope, WORKER)
        except _Fallback:
            await self.app(scope, receive, send)
            return
        body, complete, rest = await _read_body(receive)
        try:
            if not complete:
                raise _Fallback
            parsed = _usage_body(body)
            check_far("time", parsed.time, self.service.allow_far_times)
        except (_Fallback, ValueError):
            await self.app(scope, replaying(body, rest, receive), send)
            return
        try:
            answer = await self.service.decide(commands.Usage(
                key, account, parsed.amount, parsed.pool, parsed.memo, parsed.time,
                parsed.user))
        except Exception as exc:  # what the route's exception handlers answer
            await from_exception(exc)(scope, receive, send)
            return
        await _send_json(send, 201, _usage_json(answer))

    def _write_key(self, scope: Scope, roles: tuple[str, ...]) -> str | None:
        """The caller's right to write (one of `roles`), and the Idempotency-Key (None: no
        key)."""
        _role(scope, self.authority, roles)
        content_type = _header(scope, b"content-type")
        if content_type is None or content_type.split(b";")[0].strip().lower() \
                != b"application/json":
            raise _Fallback
        raw = _header(scope, b"idempotency-key")
        if raw is None:
            return None
        try:
            key = raw.decode("latin-1")
        except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
            raise _Fallback from None
        from projections.events import require_name

        if not 1 <= len(key) <= 200:
            raise _Fallback
        try:
            return require_name("Idempotency-Key", key)
        except ValueError:
            raise _Fallback from None

    # -- a batch of events --------------------------------------------------------------

    async def _events(self, cache: AnswerCache, scope: Scope, receive: Receive,
                      send: Send) -> None:
        try:
            key = self._write_key(scope, FINANCE)
        except _Fallback:
            await self.app(scope, receive, send)
            return
        body, complete, rest = await _read_body(receive, MAX_FAST_EVENTS_BODY)
        try:
            if not complete:
                raise _Fallback
            events = _events_body(body)
        except _Fallback:
            await self.app(scope, replaying(body, rest, receive), send)
            return
        try:
            answer = await writes.events_answer(self.service, cache, events, key)
        except Exception as exc:  # what the route's exception handlers answer
            await from_exception(exc)(scope, receive, send)
            return
        await _send_json(send, 200, _events_json(answer))

    # -- balance ----------------------------------------------------------------------------

    async def _balance(self, account: str, scope: Scope, send: Send) -> bool:
        """Answer from the live projection on the event loop when that costs no wait;
        False: the route answers (it may wait, look at the journal, or refuse)."""
        try:
            _role(scope, self.authority, READ)
        except _Fallback:
            return False
        service = self.service

        def read(session: LedgerSession, ledger: Ledger) -> bytes | None:
            from tools.service.reads import _figures, _latest

            if account not in ledger.accounts:
                return None  # the route names the accounts it knows
            from projections import queries

            moment = _latest(service, ledger)
            if moment is None:
                return None  # the route looks up what it needs in the journal
            state = session.account_at(account, moment)
            return _json(_BALANCE_ANSWER, _figures(
                account, queries.Figures.of(state, moment), moment, service.head()))

        asked_at = time.monotonic()
        try:
            answer = service.read_at_once(read, asked_at)
            if answer is STALE:
                # As the route does: wait for the writer's shared look at the journal.
                await asyncio.wrap_future(service.refreshed())
                answer = service.read_at_once(read, asked_at)
        except Exception:  # the route says what is wrong
            return False
        if isinstance(answer, Busy) or answer is None:
            return False
        await _send_json(send, 200, answer)
        return True


async def _read_body(receive: Receive,
                     limit: int = MAX_FAST_BODY) -> tuple[bytes, bool, bool]:
    """The body read so far; whether it is all of it within `limit` (else the route
    reads it: larger than `limit`, or the client went away); and whether more of it is
    still to be received (for the route)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False, True  # the route receives the disconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        more = bool(message.get("more_body", False))
        # Over the limit is the route's, also when it came in one message: the route
        # reads at most 32 MiB (413 beyond).
        if size > limit or not more:
            return b"".join(chunks), size <= limit, more


def _usage_body(body: bytes) -> UsageBody:
    """The body as the route reads it: strict JSON, then the model; else `_Fallback`."""
    try:
        data = loads_strict(body.decode("utf-8"))
        return UsageBody.model_validate(data)
    except (ValueError, UnicodeDecodeError, ValidationError):
        raise _Fallback from None




def _events_body(body: bytes) -> list[Any]:
    """The events of a body as the route reads them: strict JSON, then the model; else
    `_Fallback`. The plain body is read by `_plain_events` (what the two would make of
    it, about eight times faster); any other the two read."""
    events = _plain_events(body)
    if events is not None:
        return events
    if len(body) > PARSE_ASIDE:
        # The route reads it strictly on a thread: here it would hold the event loop
        # (a second of it for a megabyte of small values).
        raise _Fallback
    try:
        data = loads_strict(body.decode("utf-8"))
        return EventsBody.model_validate(data).events
    except (ValueError, UnicodeDecodeError, ValidationError):
        raise _Fallback from None


def _length_bounds() -> tuple[int, int]:
    """How many events `EventsBody` takes (its field's bounds, so the two cannot drift)."""
    low, high = 0, sys.maxsize
    for bound in EventsBody.model_fields["events"].metadata:
        low = getattr(bound, "min_length", low)
        high = getattr(bound, "max_length", high)
    return low, high


_EVENTS_MIN, _EVENTS_MAX = _length_bounds()


def _plain_events(body: bytes) -> list[dict[str, Any]] | None:
    """`{"events": [...]}` as `loads_strict` and `EventsBody` read it, read by orjson;
    None where orjson may read it otherwise, or where it is not that plain shape.

    orjson and `loads_strict` read the same value from a text both accept, with three
    exceptions, each sent to the strict reader: orjson lets a repeated key win (found by
    counting: every member of an object has one colon outside strings, so members
    counted in the value equal to the colons in the text leave no room for a repeat,
    nor for a colon inside a string, which only costs the strict read); it reads an
    integer past 64 bits as a float (so no float is taken at all: a float in a batch is
    rare); and it refuses what `loads_strict` may accept (NaN never, 1e400 as inf)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict or len(data) != 1:
        return None
    events = data.get("events")
    if type(events) is not list or not _EVENTS_MIN <= len(events) <= _EVENTS_MAX:
        return None
    members = 1
    for event in events:
        if type(event) is not dict:
            return None
        counted = _members(event)
        if counted is None:
            return None
        members += counted
    return events if body.count(b":") == members else None


def _members(value: dict[str, Any] | list[Any]) -> int | None:
    """The members of the objects in `value` (it included); None if it holds a float."""
    items: Iterable[Any] = value.values() if isinstance(value, dict) else value
    count = len(value) if isinstance(value, dict) else 0
    for item in items:
        kind = type(item)
        if kind is float:
            return None
        if kind is dict or kind is list:
            inner = _members(item)
            if inner is None:
                return None
            count += inner
    return count
