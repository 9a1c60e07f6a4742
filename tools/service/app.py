"""The FastAPI application: `create_app(...)` wires the live ledger, the routes, the error
mapping, bearer tokens, access logs and the web view.

`app.state.ledger` is the `LedgerService` (see `tools/service/ledger.py`): the web view
and any other mounted router read through `app.state.ledger.reading()`.
"""

from __future__ import annotations

import json
import logging
import threading
import time as _time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from eventstore import JournalError, JournalLike
from tools.render import one_line
from tools.service import apidocs, problems, reads, writes
from tools.service.auth import PREFIX, Authority, Gate, Token
from tools.service.fast import FastRoutes
from tools.service.hosts import LoopbackHosts
from tools.service.ledger import CHECKPOINT_EVERY, LedgerService
from tools.service.models import Health
from tools.service.strict_body import StrictJsonBodies, StrictRequests

access_log = logging.getLogger("gpu_credits.access")
log = logging.getLogger("gpu_credits.service")

DESCRIPTION = """\
The gpu-credits ledger over HTTP: expiring GPU credits, usage, and the jobs that spend
them. Every write is an event in an append-only journal; answers come from the fold.

* Times: integer event times or ISO 8601 with an offset. A write without `time` is
  decided now (never earlier than the journal's latest event).
* `Idempotency-Key` on a write becomes its event id: a retry with the same key and body
  answers the same and appends nothing; another body is `409`.
* Errors are `application/problem+json`; a `4xx` appended nothing.
* With tokens configured, every `/v1` call needs `Authorization: Bearer TOKEN`: roles
  `worker` (usage, jobs), `finance` (accounts, grants, events), `auditor` (read only);
  any role reads.
"""


API_HEADERS = ((b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"))
"""Sent with every `/v1` answer: no copy of a balance (or of a refusal) in a browser's
or a proxy's cache, and a body read as the type it is sent as, never sniffed."""

_API_NAMES = frozenset(name for name, _ in API_HEADERS)
_API_PATHS = PREFIX + "/"


class Edge:
    """What every request passes through first, in one layer:

    * its access log: one JSON object per request (never a header or token);
    * `HEAD` answered as `GET` wherever `GET` is answered, with the same status and
      headers and no body (RFC 9110 says a server that answers GET answers HEAD). FastAPI's
      routes take only the methods they declare, so `HEAD /healthz` (what some health
      checkers and link checkers send) was `405`, and so was `HEAD` of every read and
      page. Who may call is decided as for the `GET` (the request goes on as one);
    * `API_HEADERS` added to every answer under `/v1`, the fast routes' and the refusals
      of the middlewares in front of the routes included (the web view's pages carry
      their own, `tools/web/routes.py`).

    One layer, not three: each pure-ASGI layer costs every request a coroutine and a
    wrapped `send`, and these three wrapped the same `send`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = _time.perf_counter()
        status = 500
        started = False
        head = scope["method"] == "HEAD"
        path = scope["path"]
        api = path == PREFIX or path.startswith(_API_PATHS)

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
                if api:
                    headers = message.get("headers") or ()
                    for name, _ in headers:  # names are lower case in ASGI
                        if name in _API_NAMES:
                            present = {name for name, _ in headers}
                            added = tuple(item for item in API_HEADERS
                                          if item[0] not in present)
                            break
                    else:
                        added = API_HEADERS
                    # A new list (the message's may be a response's own), set in place as
                    # Starlette's own middlewares do: the message is built for this send.
                    message["headers"] = [*headers, *added]
            elif head and message.get("body"):
                message = {**message, "body": b""}
            await send(message)

        gone = False

        async def receiving() -> Any:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect":
                gone = True
            return message

        try:
            # A copy for HEAD: the access log and the server still see the HEAD sent.
            await self.app({**scope, "method": "GET"} if head else scope, receiving,
                           sending)
            if gone and not started:
                # Nothing answered because nobody was left to answer (a client that hung
                # up mid-body): not the server's failure, which the 500 would say.
                status = problems.CLIENT_GONE
        finally:
            if access_log.isEnabledFor(logging.INFO):
                client = scope.get("client")
                state = scope.get("state") or {}
                # The record made directly: `Logger.info` would first walk the stack for
                # the caller's file and line (which an access log does not print), as
                # much CPU as the rest of the record together.
                access_log.handle(access_log.makeRecord(
                    access_log.name, logging.INFO, __file__, 0, json.dumps({
                    "ts": round(_time.time(), 3), "method": scope.get("method"),
                    "path": path, "status": status,
                    "ms": round((_time.perf_counter() - start) * 1000, 2),
                    "client": client[0] if client else None,
                    "role": state.get("role") if isinstance(state, dict) else None,
                }), (), None))


def create_app(journal: JournalLike | str | None, *, tokens: Iterable[Token] = (),
               clock: Callable[[], int] | None = None, allow_far_times: bool = False,
               max_batch: int = 512, load_in_background: bool = False,
               mount_web: bool = True, manage_ledger: bool = True,
               fast_routes: bool = True,
               checkpoint_every: int | None = CHECKPOINT_EVERY,
               loopback_hosts_only: bool = False, owns_process: bool = False) -> FastAPI:
    """The service on `journal` (a URL or a journal). `load_in_background`: answer
    /healthz at once and /readyz (and everything else) once the projection is caught up.
    `manage_ledger=False`: the caller starts and stops `app.state.ledger` itself (an app
    embedded somewhere that runs the lifespan more than once). `fast_routes=False`: every
    request goes through FastAPI's routing (the fast path's answers are compared with
    those). `checkpoint_every`: events committed after the newest checkpoint before the
    service writes another as it runs (None: only at shutdown). `loopback_hosts_only`:
    answer only requests addressed to a loopback name (`hosts.py`: what `serve` without
    tokens asks for). `owns_process`: the service is what its process is for (`serve`),
    so it keeps what it loads out of the cyclic collector's passes (`LedgerService`)."""
    service = LedgerService(journal, clock=clock, allow_far_times=allow_far_times,
                            max_batch=max_batch, checkpoint_every=checkpoint_every,
                            owns_process=owns_process)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if not manage_ledger:
            yield
            return
        loader: threading.Thread | None = None
        stop_retrying = threading.Event()
        if load_in_background:
            loader = threading.Thread(target=_start, args=(service, stop_retrying),
                                      name="catch-up", daemon=True)
            loader.start()
        else:
            service.start()
        try:
            yield
        finally:
            # Uvicorn has stopped taking requests and waited for those in flight: the
            # writer now commits what is queued, then the connections close.
            if loader is not None:
                service.stopping = True  # a loader still retrying gives up, at once
                stop_retrying.set()
                loader.join()
            service.stop()
            service.close()
            writer = service.writer
            log.info("stopped: %d decisions committed in %d batches", writer.committed,
                     writer.batches)

    # Swagger UI from the service's own files (`apidocs`); no ReDoc page, which would
    # load its script from a CDN.
    app = FastAPI(title="gpu-credits", version="1.0", description=DESCRIPTION,
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    apidocs.install(app)
    app.state.ledger = service
    app.state.authority = Authority(tokens)
    problems.install(app)
    reads.install(app)
    writes.install(app)

    @app.get("/healthz", response_model=Health, response_model_exclude_none=True,
             tags=["operations"], summary="Liveness",
             responses={503: {"model": Health, "description": "the writer stopped on an "
                                                             "error: restart the process"}})
    def healthz() -> Any:
        """The process answers (whether or not it is caught up yet); 503 `failed` once
        its writer stopped on an error (restart it)."""
        if service.writer.failure is not None:
            return JSONResponse({"status": "failed"}, status_code=503)
        return {"status": "stopping" if service.stopping else "ok"}

    @app.get("/readyz", response_model=Health, response_model_exclude_none=True,
             tags=["operations"], summary="Readiness",
             responses={503: {"model": Health, "description": "not caught up yet, "
                                                             "rebuilding after a batch "
                                                             "that did not commit, "
                                                             "unavailable (the journal "
                                                             "cannot be read as it was: "
                                                             "out of reach, or restored "
                                                             "under the service), "
                                                             "stopping, or failed"}})
    def readyz() -> Any:
        """Ready once the projection has caught up with the journal."""
        if service.writer.failure is not None:
            return JSONResponse({"status": "failed"}, status_code=503)
        if not service.ready.is_set() or service.stopping:
            return JSONResponse({"status": "stopping" if service.stopping else "starting"},
                                status_code=503)
        try:
            # As fresh as a read, and refused where a read is: a journal restored from
            # an older copy (or rewritten) under the service, or out of reach, refuses
            # every /v1 read, so a supervisor must not be told the service is ready (nor
            # a position the journal no longer has).
            with service.reading_session() as held:  # rebuilds a stale projection
                position = held.projector.position
        except problems.Unavailable:
            # The rebuild cannot read the journal (the database is away): not ready, said
            # in readiness's own shape; the /v1 answers give the cause and Retry-After.
            return JSONResponse({"status": "rebuilding"}, status_code=503)
        except (JournalError, SQLAlchemyError):
            return JSONResponse({"status": "unavailable"}, status_code=503)
        phases = service.writer.phases()
        return {"status": "ready", "position": position, "batches": phases.batches,
                "decisions": phases.decisions, "largest_batch": service.writer.largest_batch,
                "linger_seconds": round(phases.linger, 6),
                "decide_seconds": round(phases.decide, 6),
                "write_seconds": round(phases.write, 6)}

    if not app.state.authority.enabled:
        _without_security(app)
    app.include_router(writes.router, tags=["decisions"])
    app.include_router(reads.router, tags=["reads"])
    app.add_middleware(StrictJsonBodies)  # bodies read as strictly as import reads files
    if fast_routes:
        # The plain case of the hot routes, answered before FastAPI's routing (see fast.py).
        app.add_middleware(FastRoutes, service=service, authority=app.state.authority,
                           event_answers=app.state.event_answers)
    # Outside the fast routes and everything else that reads a body: every request
    # checked, its body's size first.
    app.add_middleware(StrictRequests, routers=[writes.router, reads.router])
    if app.state.authority.enabled:
        # Outside every check that reads the request: who may call is decided first.
        pages: list[Any] = []
        if mount_web:
            from tools.web.routes import router as web_pages

            pages.append(web_pages)
        app.add_middleware(Gate, authority=app.state.authority,
                           routers=[writes.router, reads.router], pages=pages)
    if loopback_hosts_only:
        # Before anything reads the request, inside the access log.
        app.add_middleware(LoopbackHosts)
    app.add_middleware(Edge)
    if mount_web:
        from tools import web

        web.mount(app)
    return app


def _without_security(app: FastAPI) -> None:
    """Without tokens nothing needs one: the document must not say otherwise."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = plain()
            doc.get("components", {}).pop("securitySchemes", None)
            for operations in doc.get("paths", {}).values():
                for operation in operations.values():
                    if isinstance(operation, dict):
                        operation.pop("security", None)
                        responses = operation.get("responses", {})
                        for status in ("400", "401", "403"):  # a token's refusals
                            responses.pop(status, None)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


LOAD_RETRY_SECONDS = 2.0
"""How long a start-up that could not load the journal waits before trying again."""


def _start(service: LedgerService, stop: threading.Event) -> None:
    """Load the projection; while the database cannot be read, try again (the process
    stays alive and not ready, which is what an orchestrator should see) until `stop`
    is set, which ends the wait between tries too: a shutdown does not wait it out."""
    retry_every = LOAD_RETRY_SECONDS
    while not service.stopping and not stop.is_set():
        try:
            service.start()
            return
        except Exception as exc:
            service.load_error = exc
            log.warning("cannot load the journal yet (%s: %s); retrying in %g s",
                        type(exc).__name__, one_line(str(exc))[:200], retry_every)
            stop.wait(retry_every)


