"""Who may do what: bearer tokens with roles.

| role      | may                                                                  |
|-----------|----------------------------------------------------------------------|
| `worker`  | read; report usage; submit, start, complete and cancel jobs          |
| `finance` | read; open accounts; grant credits; `POST /v1/events` (corrections)  |
| `auditor` | read only                                                            |

Tokens come from a file (`--tokens FILE`) or the `GPU_CREDITS_TOKENS` environment
variable, one `ROLE:TOKEN` per line (or comma-separated in the variable). When tokens
are configured every `/v1` call needs one, reads included (any role): balances are
confidential. `/healthz`, `/readyz`, `/docs` and `/openapi.json` need none. Without
tokens the service answers everyone, so it only binds to loopback.

A presented token is compared with every configured token in constant time
(`hmac.compare_digest`), so the time to answer says nothing about how close a guess was
nor which token matched. Tokens are never logged.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from tools.service.problems import ServiceProblem

ROLES = ("worker", "finance", "auditor")
ENV_TOKENS = "GPU_CREDITS_TOKENS"
MIN_TOKEN_LENGTH = 16


@dataclass(frozen=True, slots=True)
class Token:
    """A configured token and its role."""

    role: str
    secret: bytes

    def __repr__(self) -> str:  # never show the secret, even in a traceback
        return f"Token(role={self.role!r}, secret=<{len(self.secret)} bytes>)"


def parse_tokens(text: str, source: str) -> list[Token]:
    """`ROLE:TOKEN` entries, one per line or comma-separated; `#` starts a comment."""
    tokens: list[Token] = []
    entries = [e for line in text.splitlines() for e in line.split("#", 1)[0].split(",")]
    for number, entry in enumerate(entries, start=1):
        entry = entry.strip()
        if not entry:
            continue
        role, sep, secret = entry.partition(":")
        role, secret = role.strip(), secret.strip()
        if not sep or role not in ROLES:
            raise ValueError(f"{source}: entry {number}: expected ROLE:TOKEN with ROLE one of "
                             f"{', '.join(ROLES)}, got role {role!r}")
        if len(secret) < MIN_TOKEN_LENGTH or not secret.isprintable() or " " in secret:
            raise ValueError(f"{source}: entry {number} ({role}): a token is at least "
                             f"{MIN_TOKEN_LENGTH} printable characters without spaces")
        tokens.append(Token(role, secret.encode("utf-8")))
    return tokens


def load_tokens(path: str | None, environ: dict[str, str] | None = None) -> list[Token]:
    """Tokens from the file (if given) and the environment variable (if set)."""
    env = os.environ if environ is None else environ
    tokens: list[Token] = []
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read tokens file {path}: {exc.strerror or exc}") from None
        found = parse_tokens(text, path)
        if not found:
            # Given a file, the operator meant to have tokens: starting without any would
            # serve every caller unauthenticated (on loopback) while they believe otherwise.
            raise ValueError(f"tokens file {path} holds no tokens; expected lines "
                             f"ROLE:TOKEN with ROLE one of {', '.join(ROLES)}")
        tokens.extend(found)
    if env.get(ENV_TOKENS):
        tokens.extend(parse_tokens(env[ENV_TOKENS], f"${ENV_TOKENS}"))
    return tokens


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
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented.strip():
            raise ServiceProblem(401, "this service needs a bearer token: "
                                 "Authorization: Bearer TOKEN", slug="unauthorized",
                                 headers={"WWW-Authenticate": "Bearer"})
        role = self.role_of(presented.strip())
        if role is None:
            raise ServiceProblem(401, "the bearer token is not one this service knows",
                                 slug="unauthorized",
                                 headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
        # Known before it is checked: the access log names who tried a forbidden call.
        request.state.role = role
        allowed = tuple(roles)
        if role not in allowed:
            raise ServiceProblem(403, f"role {role!r} may not do this; it needs "
                                 f"{' or '.join(allowed)}", slug="forbidden")
        return role


READ = ROLES
WORKER = ("worker",)
FINANCE = ("finance",)


# Declares the scheme in the OpenAPI document (the "Authorize" button of /docs); the
# check itself is `Authority.require`, which also answers when no header is sent.
_bearer = HTTPBearer(auto_error=False, description="a token given to `gpu-credits serve`")


def needs(roles: tuple[str, ...]) -> Callable[..., Awaitable[None]]:
    """A FastAPI dependency: the caller holds one of `roles` (when tokens are configured)."""

    # async: a plain `def` dependency would be run on a worker thread, a hop per request
    # for a check of microseconds.
    async def check(request: Request,
                    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
        authority: Authority = request.app.state.authority
        authority.require(request, roles)

    return check
