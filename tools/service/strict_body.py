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

import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

from fastapi import APIRouter
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from projections.validation import loads_strict
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
"""The largest JSON body read (a batch of events); larger is refused with 413."""


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
    """Refuse what the server would read ambiguously (422): a path whose %-escapes are not
    UTF-8 (decoded with U+FFFD for each bad byte, `caf%E9` and `caf%E8` would name one
    account, `caf\ufffd`) or decode to a control character, an Idempotency-Key
    sent twice or beyond ASCII (a header is read as Latin-1: a UTF-8 `café` would become
    the id `cafÃ©`), and, on the routes of `routers`, a query parameter the route does
    not declare (a misspelt `as_known_at` would be ignored, as bodies' unknown fields
    are refused) or twice."""

    def __init__(self, app: App, routers: Iterable[APIRouter] = ()) -> None:
        self.app = app
        self.queries = _Queries(routers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            why = _ambiguous(scope)
            if why is None and scope.get("query_string"):
                why = self.queries.unknown(scope)
            if why is not None:
                await problem_response(422, why, slug="invalid")(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _ambiguous(scope: Scope) -> str | None:
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
    keys = [value for name, value in scope.get("headers") or () if name == b"idempotency-key"]
    if len(keys) > 1:
        return (f"Idempotency-Key was sent {len(keys)} times: send one key, which becomes "
                "the event id")
    if keys and not keys[0].isascii():
        return (f"Idempotency-Key {keys[0].decode('latin-1')!r} is not ASCII: an HTTP header "
                "is read as Latin-1, so a key beyond ASCII would not be the id you sent")
    return None


class StrictJsonBodies:
    """Refuse a JSON body with repeated keys, NaN, Infinity or huge integers (422)."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if not (content_type == b"application/json" or content_type.endswith(b"+json")):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                await problem_response(
                    413, f"the body is larger than {MAX_BODY} bytes (32 MiB), the most a "
                         "request may send: send a long list of events in several batches"
                )(scope, receive, send)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
        body = b"".join(chunks)
        if body.strip():
            try:
                loads_strict(body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                await problem_response(422, f"invalid JSON body: {exc}", slug="invalid")(
                    scope, receive, send)
                return
        await self.app(scope, replaying(body, False, receive), send)
