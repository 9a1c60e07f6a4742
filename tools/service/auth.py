"""Who may do what: bearer tokens with roles.

| role      | may                                                                  |
|-----------|----------------------------------------------------------------------|
| `worker`  | read; report usage; submit, start, complete and cancel jobs          |
| `finance` | read; open accounts; grant credits; `POST /v1/events` (corrections)  |
| `auditor` | read only                                                            |

Tokens come from a file (`--tokens FILE`) or the `GPU_CREDITS_TOKENS` environment
variable, `ROLE:TOKEN` entries one per line or comma-separated on one; a line whose
first non-blank character is `#` is a comment. A token is 16 to 32,768 printable ASCII
characters without spaces or commas, and has one role: anything else is refused at
start-up, as a token that could never match or would not mean what it says. When tokens
are configured every `/v1` call needs one, reads included (any role): balances are
confidential. `/healthz`, `/readyz`, `/docs` and `/openapi.json` need none. Without
tokens the service answers everyone, so it only binds to loopback.

A presented token is compared with every configured token in constant time
(`hmac.compare_digest`), so the time to answer says nothing about how close a guess was
nor which token matched. Tokens are never logged.
"""

from __future__ import annotations

import difflib
import hmac
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from tools.service.connections import MAX_HEAD
from tools.service.problems import ServiceProblem, from_exception

ROLES = ("worker", "finance", "auditor")
ENV_TOKENS = "GPU_CREDITS_TOKENS"
MIN_TOKEN_LENGTH = 16
MAX_TOKEN_LENGTH = MAX_HEAD // 2
"""A request's line and headers together hold at most `MAX_HEAD` bytes (64 KiB; beyond,
`431`): a longer token could never be sent, and one near that bound leaves a client no
room for the rest of its request. Half of it is far beyond any token made to be used."""


@dataclass(frozen=True, slots=True)
class Token:
    """A configured token and its role."""

    role: str
    secret: bytes
    where: str = field(default="", compare=False)  # "FILE: line N", for errors

    def __repr__(self) -> str:  # never show the secret, even in a traceback
        return f"Token(role={self.role!r}, secret=<{len(self.secret)} bytes>)"


def parse_tokens(text: str, source: str) -> list[Token]:
    """`ROLE:TOKEN` entries, one per line or comma-separated; a line whose first
    non-blank character is `#` is a comment (elsewhere `#` is part of the token)."""
    tokens: list[Token] = []
    for line_number, line in enumerate(text.split("\n"), start=1):
        # Only a whole line is a comment: a `#` that cut a line short would also cut a
        # token holding one, and the service would then accept its prefix.
        if line.lstrip().startswith("#"):
            continue
        entries = line.split(",")
        for index, entry in enumerate(entries, start=1):
            entry = entry.strip()
            if not entry:
                continue
            where = f"{source}: line {line_number}" + (
                f", entry {index}" if len(entries) > 1 else "")
            tokens.append(_entry(entry, where))
    _refuse_shared(tokens)
    return tokens


def _entry(entry: str, where: str) -> Token:
    role, sep, secret = entry.partition(":")
    role, secret = role.strip(), secret.strip()
    if not sep or role not in ROLES:
        # What stands before the colon is shown only when it is a misspelt role: without
        # a colon it may be the token itself, and with the role left out, before a
        # colon of the token's own, the token's start (however short).
        meant = difflib.get_close_matches(role.lower(), ROLES, n=1, cutoff=0.75)
        if not sep or not role:
            shown = "got no role"
        elif meant:
            shown = f"got role {role!r}; did you mean {meant[0]!r}?"
        else:
            shown = ("got another word before the first colon (not shown: it may be the "
                     "start of a token)")
        raise ValueError(f"{where}: expected ROLE:TOKEN with ROLE one of "
                         f"{', '.join(ROLES)}, {shown}")
    # A header is read as Latin-1 and a token compared as UTF-8 bytes: a character beyond
    # ASCII could never match what a client sends. A space would end the header's token.
    broken = _broken_rule(secret)
    if broken is not None:
        raise ValueError(f"{where} ({role}): a token is at least {MIN_TOKEN_LENGTH} "
                         f"printable ASCII characters without spaces or commas; {broken}")
    if len(secret) > MAX_TOKEN_LENGTH:
        raise ValueError(f"{where} ({role}): a token is at most {MAX_TOKEN_LENGTH:,} "
                         f"characters, got {len(secret):,}: a request's line and headers "
                         f"hold at most {MAX_HEAD:,} bytes")
    return Token(role, secret.encode("ascii"), where)


def _broken_rule(secret: str) -> str | None:
    """Which rule of a token's characters `secret` breaks, in words that do not show it
    (a length, a position), or None."""
    if len(secret) < MIN_TOKEN_LENGTH:
        return f"this one is {len(secret)} characters"
    if " " in secret:
        # Most often a comment after the token: only a whole line is one.
        return ("this one holds a space (a '#' after a token is part of it: a comment is "
                "a line of its own)")
    for position, char in enumerate(secret, start=1):
        if not (char.isascii() and char.isprintable()):
            return f"its character {position} is not printable ASCII"
    return None


def _refuse_shared(tokens: list[Token]) -> None:
    """One secret listed under two roles would act only as the first: refuse it (naming
    where, never the secret)."""
    first: dict[bytes, Token] = {}
    for token in tokens:
        earlier = first.setdefault(token.secret, token)
        if earlier.role != token.role:
            raise ValueError(f"{earlier.where} ({earlier.role}) and {token.where} "
                             f"({token.role}) hold the same token: a token has one role; "
                             "give each role its own token")


def load_tokens(path: str | None, environ: dict[str, str] | None = None) -> list[Token]:
    """Tokens from the file (if given) and the environment variable (if set)."""
    env = os.environ if environ is None else environ
    tokens: list[Token] = []
    if path is not None:
        try:
            # "-sig": a byte order mark, as editors on Windows write, is no part of a role.
            text = Path(path).read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise ValueError(f"cannot read tokens file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ValueError(f"tokens file {path} is not UTF-8 text; a token is printable "
                             "ASCII") from None
        found = parse_tokens(text, path)
        if not found:
            # Given a file, the operator meant to have tokens: starting without any would
            # serve every caller unauthenticated (on loopback) while they believe otherwise.
            raise ValueError(f"tokens file {path} holds no tokens; expected lines "
                             f"ROLE:TOKEN with ROLE one of {', '.join(ROLES)}")
        tokens.extend(found)
    if env.get(ENV_TOKENS):
        found = parse_tokens(env[ENV_TOKENS], f"${ENV_TOKENS}")
        if not found:
            # Set to something, it was meant to hold tokens (as a file given): only an
            # empty variable means none.
            raise ValueError(f"${ENV_TOKENS} holds no tokens; expected ROLE:TOKEN entries "
                             f"with ROLE one of {', '.join(ROLES)}, comma-separated "
                             "(empty or unset: no tokens)")
        tokens.extend(found)
    _refuse_shared(tokens)  # the file and the variable together
    return tokens


def exposure(path: str) -> str | None:
    """Why the tokens file at `path` is open to other users of the machine (read or
    written by its group or by anyone), or None: a warning at start-up, not a refusal,
    since a deployment may mean it (a file shared by a service group)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # reading it says why
    who = [name for bit, name in ((stat.S_IROTH, "read by any user"),
                                  (stat.S_IWOTH, "written by any user"),
                                  (stat.S_IWGRP, "written by its group"))
           if mode & bit]
    if not who:
        return None
    return (f"tokens file {path} may be {' and '.join(who)} (mode "
            f"{stat.S_IMODE(mode):04o}): anyone who reads it holds every role, anyone who "
            f"writes it can add one; chmod 600 {path}")


def authorization(headers: Headers) -> str:
    """The request's `Authorization` header ("" without one); a 400 problem when it is
    sent more than once.

    Which of two would count depends on who reads them (Starlette takes the first, a
    proxy in front may take the last or join them): the service took the first, so a
    request carrying one role's token to a proxy was another role's here. RFC 6750 (3.1)
    answers a request that uses more than one way to send a token `invalid_request`."""
    values = headers.getlist("authorization")
    if len(values) > 1:
        raise ServiceProblem(400, f"the request sends {len(values)} Authorization headers; "
                             "send one Authorization header: Authorization: Bearer TOKEN",
                             slug="invalid-authorization",
                             headers={"WWW-Authenticate": 'Bearer error="invalid_request"'})
    return values[0] if values else ""


def bearer_token(header: str) -> str | None:
    """The token of an `Authorization` header (`Bearer`, in any case, one or more spaces,
    the token, blanks after it), or None when it names no bearer token.

    Only spaces and tabs are blanks (RFC 6750, 2.1; RFC 9110, 5.6.3): `str.strip` also
    took a no-break space or NEL (bytes a header may hold, read as Latin-1) as blanks, so
    a token with them around it was taken for the token."""
    scheme, _, rest = header.partition(" ")
    presented = rest.lstrip(" ").rstrip(" \t")
    if scheme.lower() != "bearer" or not presented:
        return None
    return presented


class Authority:
    """Checks a request's bearer token against the configured ones."""

    def __init__(self, tokens: Iterable[Token]) -> None:
        self._tokens = list(tokens)

    @property
    def enabled(self) -> bool:
        """Whether any token is configured (else everyone may do everything)."""
        return bool(self._tokens)

    def role_of(self, presented: str) -> str | None:
        """The role of a presented token, or None; constant time over every token."""
        given = presented.encode("utf-8")
        found: str | None = None
        for token in self._tokens:
            if hmac.compare_digest(given, token.secret) and found is None:
                found = token.role
        return found

    def require(self, request: Request, roles: Iterable[str]) -> str | None:
        """The caller's role if it is one of `roles`; 401 / 403 problems otherwise."""
        if not self.enabled:
            return None
        role = self.identify(authorization(request.headers))
        # Known before it is checked: the access log names who tried a forbidden call.
        request.state.role = role
        self.permit(role, roles)
        return role

    def identify(self, header: str) -> str:
        """The role of an `Authorization` header's bearer token; a 401 problem when there
        is none or it is not known."""
        presented = bearer_token(header)
        if presented is None:
            raise ServiceProblem(401, "this service needs a bearer token: "
                                 "Authorization: Bearer TOKEN", slug="unauthorized",
                                 headers={"WWW-Authenticate": "Bearer"})
        role = self.role_of(presented)
        if role is None:
            raise ServiceProblem(401, "the bearer token is not one this service knows",
                                 slug="unauthorized",
                                 headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        return role

    @staticmethod
    def permit(role: str, roles: Iterable[str]) -> None:
        """A 403 problem unless `role` is one of `roles`."""
        allowed = tuple(roles)
        if role not in allowed:
            # RFC 6750, 3: a token that does not enable access is answered with a
            # challenge, as a missing or unknown one is.
            raise ServiceProblem(403, f"role {role!r} may not do this; it needs "
                                 f"{' or '.join(allowed)}", slug="forbidden",
                                 headers={"WWW-Authenticate":
                                          'Bearer error="insufficient_scope"'})


READ = ROLES
WORKER = ("worker",)
FINANCE = ("finance",)


# Declares the scheme in the OpenAPI document (the "Authorize" button of /docs); the
# check itself is `Authority.require`, which also answers when no header is sent.
_bearer = HTTPBearer(auto_error=False, description="a token given to `gpu-credits serve`")


class Needs:
    """A FastAPI dependency: the caller holds one of `roles` (when tokens are configured).

    `Gate` reads `roles` to decide before the request is read; the dependency declares
    the requirement in the OpenAPI document and checks it again where the route runs."""

    def __init__(self, roles: tuple[str, ...]) -> None:
        self.roles = roles

    # async: a plain `def` dependency would be run on a worker thread, a hop per request
    # for a check of microseconds.
    async def __call__(self, request: Request,
                       _: Annotated[HTTPAuthorizationCredentials | None,
                                    Depends(_bearer)]) -> None:
        authority: Authority = request.app.state.authority
        authority.require(request, self.roles)


def needs(roles: tuple[str, ...]) -> Needs:
    """The dependency of a route that `roles` may call."""
    return Needs(roles)


PREFIX = "/v1"
"""Every path under it needs a token when tokens are configured."""


def _any_name(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """A route's path pattern matching names that hold a line break too: its `.` did
    not, so a grant on `/v1/accounts/a%0A/grants` matched no route here, and a role that
    may not grant was told what was wrong with the path (422) instead of 403. Such a
    path is refused (422) afterwards, to the callers allowed it."""
    return re.compile(pattern.pattern, pattern.flags | re.DOTALL)


class Gate:
    """ASGI middleware: with tokens configured, answer 401 and 403 for a `/v1` request,
    and 401 for one of the web view's pages (`pages`), before anything reads it.

    Why in front of everything: the strict body and path checks (`strict_body.py`), the
    fast routes and FastAPI's own body parsing all read the request before a route's
    dependencies run, so a caller without a token (or with one of a role that may not do
    this) was told what was wrong with their body or path (422) instead of 401 / 403,
    and was logged without the role that tried. A route class would still run after those
    middlewares. The roles of each route are the `Needs` it declares, matched here as
    the router would match them (first route whose path and method fit), so the two
    cannot disagree; a `/v1` path no route answers needs a token too (401), and with one
    goes on to its 404 or 405."""

    def __init__(self, app: ASGIApp, authority: Authority,
                 routers: Iterable[APIRouter], pages: Iterable[APIRouter] = ()) -> None:
        self.app = app
        self.authority = authority
        # Routes outside /v1 that any role may call and no other caller (the web view's
        # pages): decided here too, else the strict checks told a caller without a token
        # what was wrong with a page's path or headers (422) where the table says 401.
        self._pages = [(_any_name(route.path_regex), frozenset(route.methods or ()))
                       for router in pages for route in router.routes
                       if isinstance(route, APIRoute)]
        self._routes: list[tuple[re.Pattern[str], frozenset[str], list[tuple[str, ...]]]] = []
        # Per method, the roles every route of it lets in: for those no route is matched
        # (every read, for any role: most requests).
        self._everywhere: dict[str, frozenset[str]] = {}
        for router in routers:
            for route in router.routes:
                if not isinstance(route, APIRoute):
                    continue
                needed = [d.dependency.roles for d in route.dependencies
                          if isinstance(d.dependency, Needs)]
                methods = frozenset(route.methods or ())
                self._routes.append((_any_name(route.path_regex), methods, needed))
                allowed = frozenset(ROLES).intersection(*needed)
                for method in methods:
                    self._everywhere[method] = allowed & self._everywhere.get(
                        method, frozenset(ROLES))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope["path"]
            api = path == PREFIX or path.startswith(PREFIX + "/")
            if api or self._is_page(scope):
                try:
                    if api:
                        self._decide(scope)
                    else:  # any role reads a page
                        scope.setdefault("state", {})["role"] = self.authority.identify(
                            authorization(Headers(scope=scope)))
                except ServiceProblem as refused:
                    await from_exception(refused)(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    def _is_page(self, scope: Scope) -> bool:
        method, path = scope["method"], scope["path"]
        return any(method in methods and pattern.match(path)
                   for pattern, methods in self._pages)

    def _decide(self, scope: Scope) -> None:
        role = self.authority.identify(authorization(Headers(scope=scope)))
        # Before the role is checked: the access log names who tried a forbidden call.
        scope.setdefault("state", {})["role"] = role
        method, path = scope["method"], scope["path"]
        if role in self._everywhere.get(method, ROLES):
            return
        for pattern, methods, needed in self._routes:
            if method in methods and pattern.match(path):
                for roles in needed:
                    self.authority.permit(role, roles)
                return
