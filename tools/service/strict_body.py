"""Request bodies read as strictly as `import` reads a file: one definition of valid JSON.

Starlette parses JSON with `json.loads`, where a repeated key silently wins (`"type"`
twice turns a usage report into a grant), `NaN` is a number and a 5,000-digit integer
takes the parser's time. This ASGI middleware reads each JSON body first with
`projections.validation.loads_strict` and answers `422` (a problem) before any route
sees a body that the importer would refuse; a valid body is passed on unchanged.
`StrictRequests` refuses, before any route too, a path or an Idempotency-Key the server
would read otherwise than it was sent, and a query parameter the route does not take
(`?as_knwon_at=5` would otherwise be ignored, and answered as of the head) or one it
would read twice (only the last value would count).
"""

from __future__ import annotations

import email.message
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from fastapi import APIRouter
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

from projections.validation import loads_strict
from tools.service.models import MAX_EVENTS
from tools.service.problems import problem_response

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def replaying(body: bytes, more: bool, receive: Receive) -> Receive:
    """`receive` for the app behind a middleware that read the body: the body read so far
    first, then the rest (if any, `more`)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": more}

    return replay
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 32 * 1024 * 1024
"""The largest body `POST /v1/events` takes (a batch of events); larger is refused with 413."""

MAX_SMALL_BODY = 64 * 1024
"""The largest body any other request may send (413 beyond): a single write's body is a
few hundred bytes (a memo has at most 1,000 characters), and nothing else takes one."""

LARGE_BODIES = frozenset({("POST", "/v1/events")})
"""The requests that may send up to `MAX_BODY`."""

PARSE_ASIDE = 1024 * 1024
"""A JSON body larger than this is parsed on a worker thread (see `StrictJsonBodies`)."""


def body_limit(scope: Scope) -> tuple[int, str]:
    """The most bytes the request's body may hold, and how a refusal says so."""
    if (scope.get("method"), scope.get("path")) in LARGE_BODIES:
        return MAX_BODY, ("32 MiB), the most POST /v1/events takes: send a long list of "
                          "events in several batches")
    return MAX_SMALL_BODY, ("64 KiB), the most a request other than POST /v1/events may "
                            "send (a write's body is a few hundred bytes)")


def _too_large(limit: int, why: str) -> Any:
    # Closed after the answer: the rest of the body is not read, so the connection
    # could not carry another request.
    return problem_response(413, f"the body is larger than {limit} bytes ({why}",
                            slug="too-large", headers={"Connection": "close"})


def _query_names(dependant: Dependant) -> list[str]:
    """The names of the query parameters a route reads, its dependencies' included."""
    names = [param.alias for param in dependant.query_params]
    for sub in dependant.dependencies:
        names += _query_names(sub)
    return names


class _Queries:
    """The query parameters each route of some routers declares, matched as the app
    matches a request (the first route whose path and method fit)."""

    def __init__(self, routers: Iterable[APIRouter]) -> None:
        self.routes: list[tuple[re.Pattern[str], frozenset[str], str, tuple[str, ...]]] = []
        for router in routers:
            for route in router.routes:
                if isinstance(route, APIRoute):
                    names = tuple(dict.fromkeys(_query_names(route.dependant)))
                    shown = re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)
                    self.routes.append((route.path_regex, frozenset(route.methods or ()),
                                        f"{sorted(route.methods or ())[0]} {shown}", names))

    def unknown(self, scope: Scope) -> str | None:
        """Why the request's query names a parameter its route does not take, or one
        twice; None when it does not (or no route answers it: that is a 404 or 405)."""
        method, path = scope["method"], scope["path"]
        for pattern, methods, route, known in self.routes:
            if method in methods and pattern.match(path):
                return query_refusal(scope["query_string"].decode("latin-1"), known, route)
        return None


def query_refusal(query: str, known: Sequence[str], route: str) -> str | None:
    """Why `query` (a query string) is not one `route` reads unambiguously: a parameter it
    does not take (a misspelt `as_known_at` would be ignored), or one given twice (only
    one of the values would be read); None when it is."""
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True)]
    unknown = [name for name in dict.fromkeys(names) if name not in known]
    if unknown:
        takes = f"it takes {', '.join(known)}" if known else "it takes no query parameters"
        listed = ", ".join(repr(name) for name in unknown)
        plural = "s" if len(unknown) > 1 else ""
        return f"unknown query parameter{plural} {listed} for {route}: {takes}"
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        return (f"query parameter {twice!r} given {names.count(twice)} times for {route}: "
                f"give it once")
    return None


class StrictRequests:
    """Refuse a body larger than its request may send (413, `body_limit`), whatever its
    content type, before anything reads it: a declared `Content-Length` over the limit
    at once, a chunked body once it passes the limit (read to that point and no further).
    Then refuse what the server would read ambiguously (422): a path whose %-escapes are
    not UTF-8 (decoded with U+FFFD for each bad byte, `caf%E9` and `caf%E8` would name
    one account, `caf\ufffd`) or decode to a control character, a Content-Type sent
    twice (the strict reader and FastAPI's would read different ones), an Idempotency-Key
    sent twice or beyond ASCII (a header is read as Latin-1: a UTF-8 `café` would become
    the id `cafÃ©`), and, on the routes of `routers`, a query parameter the route does
    not declare (a misspelt `as_known_at` would be ignored, as bodies' unknown fields
    are refused) or twice.

    Why the size first, on every path: the limit was `StrictJsonBodies`'s, so it held
    only for a JSON content type on a POST, and only `POST /v1/events` needs a large
    body. Any request, to any path, could send 32 MiB of JSON that was parsed strictly
    before the route (or its 404) was known, without a token on a path outside `/v1`: one
    such request held the event loop, and every other client, for about 17 seconds on
    the development machine. A `text/plain` body of any size was read whole by the
    route. (One layer for both: a layer of its own cost every request a coroutine.)"""

    def __init__(self, app: App, routers: Iterable[APIRouter] = ()) -> None:
        self.app = app
        self.queries = _Queries(routers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared: bytes | None = None
        chunked = False
        keys: list[bytes] = []
        types = 0
        for name, value in scope["headers"]:  # one pass for all four
            if name == b"content-length":
                declared = value
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"idempotency-key":
                keys.append(value)
            elif name == b"content-type":
                types += 1
        if declared is not None or chunked:  # else no body (HTTP/1.1)
            limit = MAX_BODY if (scope["method"], scope["path"]) in LARGE_BODIES \
                else MAX_SMALL_BODY
            # The HTTP parser refused a length that is not digits, or sent twice, and
            # never delivers more than it declares.
            if declared is not None and int(declared) > limit:
                await _too_large(*body_limit(scope))(scope, receive, send)
                return
            if declared is None:
                body = await _read_within(receive, limit)
                if body is None:
                    return  # the client has gone
                if len(body) > limit:
                    await _too_large(*body_limit(scope))(scope, receive, send)
                    return
                receive = replaying(body, False, receive)
        why = _ambiguous(scope, keys, types)
        if why is None and scope.get("query_string"):
            why = self.queries.unknown(scope)
        if why is not None:
            await problem_response(422, why, slug="invalid")(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def _read_within(receive: Receive, limit: int) -> bytes | None:
    """A chunked body, read until it ends or passes `limit` bytes (then what was read,
    longer than `limit`); None when the client disconnects first."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size > limit:
            break
        more = bool(message.get("more_body", False))
    return b"".join(chunks)


def _ambiguous(scope: Scope, keys: list[bytes], types: int) -> str | None:
    """Why the request's path, `keys` (its Idempotency-Key headers) or its `types`
    Content-Type headers would be read ambiguously, or None."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and b"%" in raw:
        try:
            decoded = unquote_to_bytes(raw).decode("utf-8")
        except UnicodeDecodeError as exc:
            return (f"the path {raw.decode('latin-1')!r} is not UTF-8 once its %-escapes "
                    f"are decoded ({exc.reason} at byte {exc.start}): names are UTF-8")
        # No name holds one, and a line feed at the end would otherwise match the route
        # without it (a regular expression's `$` matches before a final newline).
        bad = next((c for c in decoded if ord(c) < 0x20 or ord(c) == 0x7F), None)
        if bad is not None:
            return (f"the path {raw.decode('latin-1')!r} holds a control character "
                    f"(U+{ord(bad):04X}) once its %-escapes are decoded: no name holds one")
    if types > 1:
        # `StrictJsonBodies` reads the last, FastAPI the first: JSON then text was not
        # read strictly, and a repeated key's last value won.
        return (f"Content-Type was sent {types} times: send one, "
                "Content-Type: application/json")
    if len(keys) > 1:
        return (f"Idempotency-Key was sent {len(keys)} times: send one key, which becomes "
                "the event id")
    if keys and not keys[0].isascii():
        return (f"Idempotency-Key {keys[0].decode('latin-1')!r} is not ASCII: an HTTP header "
                "is read as Latin-1, so a key beyond ASCII would not be the id you sent")
    return None


def _parse(body: bytes) -> Any:
    return loads_strict(body.decode("utf-8"))


def too_many_events(scope: Scope, data: Any) -> str | None:
    """Why a batch of events holds more events than the route takes, as the route
    would say it (pydantic's words), or None: said here, right after the strict read,
    the route does not parse the body again in the event loop (FastAPI reads JSON
    there) only to count them."""
    if (scope.get("method"), scope.get("path")) not in LARGE_BODIES or \
            type(data) is not dict or len(data) != 1 or type(data.get("events")) is not list:
        return None
    count = len(data["events"])
    if count <= MAX_EVENTS:
        return None
    return (f"events: List should have at most {MAX_EVENTS} items after validation, "
            f"not {count}")


def read_as_json(scope: Scope) -> bool:
    """Whether FastAPI reads the request's body as JSON, by its own test: `email`'s
    reading of the first Content-Type, as Starlette decodes it. (A test of the bytes
    disagreed with it: `str.strip` takes the Latin-1 bytes 0x85 and 0xA0 for spaces,
    `bytes.strip` does not, so `application/json` followed by one was read by FastAPI
    alone, with `json.loads`, where a repeated key's last value wins.)"""
    for name, value in scope.get("headers") or ():
        if name == b"content-type":
            message = email.message.Message()
            message["content-type"] = value.decode("latin-1")
            subtype = message.get_content_subtype()
            return message.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json"))
    return False


class StrictJsonBodies:
    """Refuse a JSON body with repeated keys, NaN, Infinity or huge integers (422)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        if not read_as_json(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:  # at most the request's limit: `StrictRequests` runs first
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        if body.strip():
            try:
                if len(body) > PARSE_ASIDE:
                    # A batch of events up to 32 MiB takes seconds to parse strictly
                    # (its hooks are Python): on a thread, the event loop keeps
                    # answering the other clients meanwhile.
                    data = await run_in_threadpool(_parse, body)
                else:
                    data = _parse(body)
            except (ValueError, UnicodeDecodeError) as exc:
                await problem_response(422, f"invalid JSON body: {exc}", slug="invalid")(
                    scope, receive, send)
                return
            why = too_many_events(scope, data)
            if why is not None:
                await problem_response(422, why, slug="invalid")(scope, receive, send)
                return
        await self.app(scope, replaying(body, False, receive), send)
