"""Errors as `application/problem+json`, mapped once from the domain's exception types.

| raised                                              | status |
|-----------------------------------------------------|--------|
| UnknownAccount, UnknownJob                          | 404    |
| IdempotencyConflict, InvalidTransition, DuplicateJob, AccountExists | 409 |
| any other LedgerError / ValueError (a bad command)  | 422    |
| ConnectionProblem, LockTimeout, SchemaError, a database error | 503 |

A 4xx always means nothing was appended: commands validate before they append, and a
batch that fails to commit answers no decision of it as a success.

A 503 that a retry may soon get past says when to retry (`Retry-After`, in seconds): the
service starting or stopping and another writer holding the lock, after 1; the database
out of reach, after 5. One that no retry gets past (a journal open read-only, a schema
to upgrade) says nothing of the kind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from eventstore import (
    ChainBroken,
    ConnectionProblem,
    IdempotencyConflict,
    JournalError,
    LockTimeout,
    ReadOnlyJournal,
)
from projections.errors import (
    AccountExists,
    DuplicateJob,
    InvalidTransition,
    UnknownAccount,
    UnknownJob,
)
from projections.session import REOPEN
from projections.validation import show
from tools.render import one_line
from tools.service.models import Problem

PROBLEM_JSON = "application/problem+json"
_BASE = "https://gpu-credits.invalid/problems/"

_TITLES = {
    400: "bad request",
    401: "unauthorized",
    403: "forbidden",
    404: "not found",
    405: "method not allowed",
    406: "not acceptable",
    409: "conflict",
    413: "request too large",
    415: "unsupported media type",
    422: "invalid request",
    500: "internal error",
    503: "service unavailable",
}

_SLUGS = {
    404: "not-found",
    409: "conflict",
    422: "invalid",
    503: "unavailable",
}


CLIENT_GONE = 499
"""The access log's status for a request its client left before it was answered (nginx's
"client closed request"): nothing was sent."""


class ServiceProblem(Exception):
    """An error answer with an explicit status (auth, readiness, a bad query)."""

    def __init__(self, status: int, detail: str, *, slug: str | None = None,
                 errors: Sequence[tuple[int, str]] = (),
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug
        self.errors = list(errors)
        self.headers = headers or {}


class Unavailable(ServiceProblem):
    """The database cannot be used right now; retrying later with the same key is safe."""

    def __init__(self, detail: str) -> None:
        super().__init__(503, detail, slug="unavailable")


def status_of(exc: BaseException) -> int:
    """The HTTP status a domain or journal exception maps to (500: a bug)."""
    if isinstance(exc, ServiceProblem):
        return exc.status
    if isinstance(exc, UnknownAccount | UnknownJob):
        return 404
    if isinstance(exc, IdempotencyConflict | InvalidTransition | DuplicateJob | AccountExists):
        return 409
    if isinstance(exc, JournalError | SQLAlchemyError):
        return 503
    if isinstance(exc, ValueError | KeyError):
        return 422
    return 500


# The problem type of each domain error that has its own, first match wins.
_TYPE_SLUGS: tuple[tuple[type[BaseException], str], ...] = (
    (IdempotencyConflict, "idempotency-conflict"),
    (InvalidTransition, "invalid-transition"),
    (DuplicateJob, "duplicate-job"),
    (AccountExists, "account-exists"),
    (UnknownAccount, "unknown-account"),
    (UnknownJob, "unknown-job"),
)


def _slug(exc: BaseException, status: int) -> str:
    if isinstance(exc, ServiceProblem) and exc.slug:
        return exc.slug
    for kind, slug in _TYPE_SLUGS:
        if isinstance(exc, kind):
            return slug
    return _SLUGS.get(status, "error")


READ_ONLY_DETAIL = (
    "this service opened its journal read-only (an auditor's copy, a read-only mount, or "
    "serve --read-only): reads answer, writes are refused and nothing was written; send "
    "writes to a service that opens the journal for writing")
"""A write's 503 on a read-only journal. The journal's own words tell a Python caller to
open it without read_only=True; an HTTP client cannot, and retrying here never helps."""


SERVICE_REOPEN = (
    "to answer from the journal as it stands, restart the service, or send a write (one "
    "refused so records nothing, and the service rebuilds from the journal: retry it); "
    "first check the journal against the newest anchor kept outside it (gpu-credits "
    "verify --anchor POSITION:HASH)")
"""What the service's client or operator can do about a journal restored or rewritten
under the service: the facades' advice (`REOPEN`, open a new facade) is not theirs."""


def detail_of(exc: BaseException) -> str:
    """One line saying what was wrong (never a traceback)."""
    if isinstance(exc, ServiceProblem):
        return exc.detail
    if isinstance(exc, ReadOnlyJournal):
        return READ_ONLY_DETAIL
    if isinstance(exc, ChainBroken) and exc.moved_under:
        return one_line(str(exc).replace(REOPEN, SERVICE_REOPEN))
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return one_line(text) or type(exc).__name__


def problem_body(status: int, detail: str, slug: str | None = None,
                 errors: Sequence[tuple[int, str]] = ()) -> dict[str, Any]:
    """The JSON of a problem answer."""
    body: dict[str, Any] = {"type": _BASE + (slug or _SLUGS.get(status, "error")),
                            "title": _TITLES.get(status, "error"), "status": status,
                            "detail": detail}
    if errors:
        body["errors"] = [{"index": i, "detail": d} for i, d in errors]
    return body


CHALLENGES = {
    400: "`Bearer error=\"invalid_request\"`: `Authorization` sent more than once",
    401: "`Bearer` (no token), or `Bearer error=\"invalid_token\"` (one not configured)",
    403: "`Bearer error=\"insufficient_scope\"`: the token's role may not do this",
}
"""The `WWW-Authenticate` of each refusal of a token (RFC 6750, 3), as documented."""


def documented(answers: Sequence[tuple[int, str]]) -> dict[int | str, dict[str, Any]]:
    """A router's `responses` for the OpenAPI document: each status, with why it is
    answered, as a `Problem` in `application/problem+json` (see `_problems_as_sent`),
    a refused token's with its `WWW-Authenticate`."""
    return {status: {"model": Problem, "description": why, "content": {PROBLEM_JSON: {}},
                     **({"headers": {"WWW-Authenticate": {
                         "description": CHALLENGES[status],
                         "schema": {"type": "string"}}}} if status in CHALLENGES else {})}
            for status, why in answers}


def _problems_as_sent(app: FastAPI) -> None:
    """FastAPI puts the schema of a response's `model` under the route's own media type
    (`application/json`) whatever `content` names: the document said a problem came as
    `application/json`, with no schema for the `application/problem+json` it comes as.
    Here the schema moves to the type that is sent."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = plain()
            for operations in doc.get("paths", {}).values():
                for operation in operations.values():
                    for answer in (operation.get("responses") or {}).values() \
                            if isinstance(operation, dict) else ():
                        content = answer.get("content") or {}
                        if PROBLEM_JSON in content and "application/json" in content:
                            content[PROBLEM_JSON] = content.pop("application/json")
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def problem_response(status: int, detail: str, *, slug: str | None = None,
                     errors: Sequence[tuple[int, str]] = (),
                     headers: dict[str, str] | None = None) -> JSONResponse:
    """A problem answer."""
    return JSONResponse(problem_body(status, detail, slug, errors), status_code=status,
                        media_type=PROBLEM_JSON, headers=headers)


def retry_after(exc: BaseException) -> str | None:
    """Seconds after which a retry of what `exc` refused may succeed, for `Retry-After`;
    None when waiting does not help."""
    if isinstance(exc, Unavailable) and isinstance(exc.__cause__, JournalError):
        # A projection that could not be reloaded: as long as what stopped the reload.
        return retry_after(exc.__cause__)
    if isinstance(exc, Unavailable | LockTimeout):
        return "1"
    if isinstance(exc, ConnectionProblem):
        return "5"
    return None


def from_exception(exc: BaseException) -> JSONResponse:
    """The problem answer of an exception, by its type."""
    status = status_of(exc)
    if status == 500 and not isinstance(exc, ServiceProblem):  # a bug: named, not told
        return problem_response(500, f"internal error: {type(exc).__name__}")
    errors = exc.errors if isinstance(exc, ServiceProblem) else ()
    headers = dict(exc.headers) if isinstance(exc, ServiceProblem) else {}
    wait = retry_after(exc) if status == 503 else None
    if wait is not None:
        headers.setdefault("Retry-After", wait)
    return problem_response(status, detail_of(exc), slug=_slug(exc, status), errors=errors,
                            headers=headers or None)


def _not_json(request: Request, exc: RequestValidationError) -> str | None:
    """Why a body was not read, when it was sent as something else than JSON or without
    a Content-Type (FastAPI then says only that it is not an object, of a body that may
    well be one)."""
    sent = request.headers.get("content-type")
    media = (sent or "").split(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        return None
    if not any(tuple(err.get("loc", ()))[:1] == ("body",) and err.get("type") != "missing"
               for err in exc.errors()):
        return None
    how = "without a Content-Type" if sent is None else f"as {media or sent!r}"
    # Not read as JSON on purpose: any web page can make its visitors' browsers post a
    # form, text or an untyped body here without a CORS preflight, but not JSON; so no
    # page can write to a service on their loopback.
    return f"the body was sent {how}: send it as JSON, with Content-Type: application/json"


def _validation_detail(request: Request, exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:10]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
        said = f"{where or 'body'}: {err.get('msg', 'invalid')}"
        loc = tuple(err.get("loc", ()))
        if loc[:1] == ("query",) and len(loc) == 2 and "input" in err:
            # A query parameter is one short value: say which was sent and what would do,
            # not only the bound it crossed (`limit=0` of 1 to 1000).
            sent = repr(err["input"])
            sent = sent if len(sent) <= 80 else sent[:77] + "..."
            said += f" (got {sent}"
            valid = _query_range(request, str(loc[1]))
            said += f"; give {valid})" if valid else ")"
        elif (loc[:1] == ("body",) and len(loc) > 1
              and err.get("type") not in ("value_error", "extra_forbidden")
              and isinstance(err.get("input"), int | float | str)):
            # A field of the body: name the value refused, as import and POST /v1/events
            # do (`5.0`, `'5.00'`), not only the rule it broke. A check of ours (a time)
            # names it already; an unknown field is refused whatever its value.
            said += f" (got {show(err['input'])})"
        parts.append(said)
    return "; ".join(parts) or "invalid request"


def _query_range(request: Request, name: str) -> str | None:
    """What the route takes for query parameter `name`, from its declared bounds: "a
    whole number from 1 to 1000", or None when the route declares none."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    for field in getattr(dependant, "query_params", ()):
        if field.alias != name:
            continue
        bounds: dict[str, int] = {}
        for rule in field.field_info.metadata:
            for key in ("ge", "le", "min_length", "max_length"):
                if isinstance(getattr(rule, key, None), int):
                    bounds[key] = getattr(rule, key)
        low, high = bounds.get("ge"), bounds.get("le")
        if low is not None and high is not None:
            return f"a whole number from {low} to {high}"
        if low is not None:
            return f"a whole number, {low} or more"
        if high is not None:
            return f"a whole number, {high} or less"
        shortest, longest = bounds.get("min_length"), bounds.get("max_length")
        if shortest is not None and longest is not None:
            return f"{shortest} to {longest} characters"
    return None


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed(request: Request) -> list[str]:
    """The methods of this request's path, HEAD with GET (the app answers HEAD wherever
    it answers GET: `app.Edge`)."""
    methods = _declared(request)
    return sorted({*methods, "HEAD"}) if "GET" in methods else methods


def _declared(request: Request) -> list[str]:
    """The methods the routes declare for this request's path: those the OpenAPI
    document gives the most specific of its paths that matches (`/v1/jobs/start-next`,
    not `/v1/jobs/{job}` with a job so named), else every method some route answers
    (the web view's pages)."""
    path = request.scope["path"]
    best: tuple[int, list[str]] | None = None
    for template, operations in request.app.openapi().get("paths", {}).items():
        literal = re.sub(r"\{[^}]*\}", "", template)
        pattern = "".join(".+" if part.startswith("{") else re.escape(part)
                          for part in re.split(r"(\{[^}]*\})", template) if part)
        if re.fullmatch(pattern, path) and (best is None or len(literal) > best[0]):
            best = (len(literal), sorted(m.upper() for m in operations
                                         if m.upper() in _METHODS))
    if best is not None:
        return best[1]
    # An included router is one route holding many, and names no methods of its own:
    # each method is asked of every route. Matched from the app's root: inside a mount
    # (the static files) the scope's root is the mount's, and no route matched, so the
    # Allow of a static file's 405 was empty. A mount takes any method; its files
    # answer GET.
    scope = {**request.scope, "root_path": request.scope.get(
        "app_root_path", request.scope.get("root_path", ""))}
    return [method for method in _METHODS
            if any(route.matches({**scope, "method": method})[0] == Match.FULL
                   and (method == "GET" or not isinstance(route, Mount))
                   for route in request.app.routes)]


def install(app: FastAPI) -> None:
    """Answer every error of `app` as a problem."""

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        detail = _not_json(request, exc) or _validation_detail(request, exc)
        return problem_response(422, detail, slug="invalid")

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            # Starlette names only the first route of the path; GET and POST of one
            # path may live in two routers.
            headers["Allow"] = ", ".join(_allowed(request))
        if exc.status_code == 400:
            # A body that is not JSON at all is an invalid body like any other.
            return problem_response(422, f"the body is not valid JSON ({exc.detail})",
                                    slug="invalid")
        return problem_response(exc.status_code, str(exc.detail), headers=headers)

    async def on_domain(_: Request, exc: Exception) -> JSONResponse:
        return from_exception(exc)

    _problems_as_sent(app)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    for kind in (ServiceProblem, LookupError, ValueError, JournalError, SQLAlchemyError,
                 Exception):
        app.add_exception_handler(kind, on_domain)
