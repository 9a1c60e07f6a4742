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

from typing import Any

from tools.loopback import is_loopback
from tools.service.problems import problem_response

LOOPBACK_NAMES = "localhost, 127.0.0.1 (any of 127.0.0.0/8) or [::1]"


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


class LoopbackHosts:
    """ASGI middleware: a request whose `Host` is not a loopback name is answered `400`,
    before anything reads it."""

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
        await self.app(scope, receive, send)


async def _refuse(scope: dict[str, Any], receive: Any, send: Any, given: str) -> None:
    answer = problem_response(400, (
        f"this service has no tokens, so it answers only requests addressed to {LOOPBACK_NAMES}, "
        f"and this one was addressed to {given[:200]!r} (a web page reaching it through "
        "another name would read and write the ledger as you): use one of those names, or "
        "give serve --tokens FILE to reach it by any name"), slug="misdirected",
        headers={"Cache-Control": "no-store"})
    await answer(scope, receive, send)
