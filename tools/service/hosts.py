"""A service without tokens answers only requests addressed to this machine by name.

Without tokens, `serve` binds to loopback, so only programs on this machine reach it. A
web page in the operator's browser is such a program: through DNS rebinding (a name of the
page's own site that resolves first to its server, then to 127.0.0.1), the browser takes
the page and the service for one origin, and the page's script may read every balance
and post grants. Its requests carry the site's name in `Host`, never a loopback name, so a
service that answers only `localhost`, `127.x.x.x` or `[::1]` (any port) refuses them. A
request without `Host` (HTTP/1.0) is not a browser's and goes on. With tokens the check
is not needed: such a page has no token.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from tools.loopback import is_loopback
from tools.service.problems import problem_response

LOOPBACK_NAMES = "localhost, 127.0.0.1 (any of 127.0.0.0/8) or [::1]"

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods that change nothing: a page of another site may send them (it cannot read the
answers: the service sends no CORS headers)."""


def host_name(value: str) -> str:
    """The name or address of a `Host` header's value, its port dropped (`[::1]:80` is
    `[::1]`, `localhost.` is `localhost`). A value that is not a name and a port
    (`[::1]evil.example`, `127.0.0.1:evil`) is given back whole: it names no loopback
    host, where taking its first part read `[::1]evil.example` as `[::1]`."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or not _is_port(value[end + 1:]):
            return value
        return value[:end + 1]
    if value.count(":") == 1:
        name, port = value.split(":")
        if not _is_port(":" + port):
            return value
    else:
        name = value
    return name.rstrip(".") or name


def _is_port(rest: str) -> bool:
    """Whether what follows a host is nothing or `:` and a port (RFC 3986: digits, or
    none)."""
    return rest == "" or (rest.startswith(":") and (rest[1:] == "" or (
        rest[1:].isascii() and rest[1:].isdigit())))


def another_site(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Where a request came from, when a browser says it is another site's page (None:
    a page of this origin, or no browser's, which sends neither header): its
    `Sec-Fetch-Site`, else an `Origin` that is not this `Host`."""
    site = origin = host = None
    for name, value in headers:
        if name == b"sec-fetch-site" and site is None:
            site = value.decode("latin-1")
        elif name == b"origin" and origin is None:
            origin = value.decode("latin-1")
        elif name == b"host" and host is None:
            host = value.decode("latin-1").lower()
    if site in ("cross-site", "same-site"):
        return f"a page of a {site.replace('-', ' ')} origin (Sec-Fetch-Site: {site})"
    if origin is None:
        return None
    try:
        netloc = urlsplit(origin).netloc.lower()
    except ValueError:  # "http://[": no origin a page of this one would send
        netloc = None
    if origin == "null" or netloc != (host or ""):
        return f"{origin[:200]!r} (Origin), not {(host or '')[:200]!r}"
    return None


class LoopbackHosts:
    """ASGI middleware: a request whose `Host` is not a loopback name is answered `400`,
    and one that would change something sent by another site's page `403`, before
    anything reads it.

    Why the second: any page may make its visitor's browser post to a service on their
    loopback without a CORS preflight, with a body that is not JSON (refused: bodies are
    strict) or with none, which `POST /v1/jobs/start-next`, `.../cancel` and
    `/v1/journal/verify` take: such a page started and cancelled jobs. Its request names
    the service's own loopback address in `Host`, so the first check lets it in."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"host":
                    given = value.decode("latin-1")
                    if not is_loopback(host_name(given)):
                        await _refuse(scope, receive, send, given)
                        return
                    break
            if scope["method"] not in SAFE_METHODS:
                elsewhere = another_site(scope["headers"])
                if elsewhere is not None:
                    await _refuse_another_site(scope, receive, send, elsewhere)
                    return
        await self.app(scope, receive, send)


async def _refuse_another_site(scope: dict[str, Any], receive: Any, send: Any,
                               elsewhere: str) -> None:
    await _answer(scope, receive, send, 403, "cross-site", (
        f"this service has no tokens, so it takes a {scope['method']} only from a program "
        f"on this machine or a page of its own, and this one came from {elsewhere} (a web "
        "page posting here would write to the ledger as you): nothing was done; give "
        "serve --tokens FILE to take calls of other origins"))


async def _refuse(scope: dict[str, Any], receive: Any, send: Any, given: str) -> None:
    await _answer(scope, receive, send, 400, "misdirected", (
        f"this service has no tokens, so it answers only requests addressed to {LOOPBACK_NAMES}, "
        f"and this one was addressed to {given[:200]!r} (a web page reaching it through "
        "another name would read and write the ledger as you): use one of those names, or "
        "give serve --tokens FILE to reach it by any name"))


async def _answer(scope: dict[str, Any], receive: Any, send: Any, status: int, slug: str,
                  detail: str) -> None:
    """A refusal made before anything read the request, never kept by a cache."""
    answer = problem_response(status, detail, slug=slug, headers={"Cache-Control": "no-store"})
    await answer(scope, receive, send)
