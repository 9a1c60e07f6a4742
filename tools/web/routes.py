"""The web view's routes: parse the query string, ask `pages`, render a template.

Every filter is a GET parameter, so a view can be bookmarked and shared; forms submit
with GET and work without JavaScript. The one POST (start a verification) answers an
htmx request with the progress fragment and a plain form post with a redirect.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import quote, unquote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from projections.errors import UnknownAccount, UnknownJob
from tools.service.hosts import another_site
from tools.service.problems import ServiceProblem
from tools.service.strict_body import query_refusal
from tools.web import pages
from tools.web.source import AuditSource
from tools.web.templating import environment
from tools.web.verifying import Verifier, last_verify


def _may_read(request: Request) -> None:
    """When the service has bearer tokens configured, the pages need a token with a read
    role, as `GET /v1/...` does: an audit view shows the same figures."""
    authority = getattr(request.app.state, "authority", None)
    if authority is not None and getattr(authority, "enabled", False):
        from tools.service.auth import READ

        authority.require(request, READ)


router = APIRouter(include_in_schema=False, dependencies=[Depends(_may_read)])

LEDGER_QUERY = ("as_known_at", "from", "to", "pool", "kind")
"""What the ledger's CSV reads from its query string: the view and its filters."""

ACCOUNT_QUERY = (*LEDGER_QUERY, "page", "grants_page", "revisions_page")
"""What the account page reads: the CSV's, and the page of each table."""


class BadQuery(Exception):
    """A query string a page would read otherwise than it was sent (a parameter it does
    not take, or one given twice): answered 422 naming it and what the page takes."""

    def __init__(self, detail: str, *, as_json: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.as_json = as_json


def takes(*names: str, suffix: str | None = None) -> Any:
    """A route dependency refusing a query parameter other than `names`, or one given
    twice: a misspelt `as_known_at` would otherwise show the head as if it had been
    read, as the /v1 routes refuse it. `suffix`: the route's last segment
    (`ledger.csv`, `timeline.json`), where an account name ending in it is the
    account page's (see `_suffix_is_a_route`)."""
    def check(request: Request) -> None:
        known, route = names, request.scope["route"].path
        if suffix is not None and not _suffix_is_a_route(request, suffix):
            known, route = ACCOUNT_QUERY, "/accounts/{account:path}"
        why = query_refusal(request.scope.get("query_string", b"").decode("latin-1"),
                            known, f"{request.method} " + route.replace(":path}", "}"))
        if why is not None:
            raise BadQuery(why, as_json=known is names and suffix == "timeline.json")
    return Depends(check)


_env = environment()
_source_lock = threading.Lock()

STATIC = "/static/web"
"""Where the stylesheet, the page script and the vendored htmx and uPlot are served."""


def source_of(request: Request) -> AuditSource:
    """The app's `AuditSource`, made on first use from what the app put on `app.state`:
    `web_source` itself; else `ledger`, the service's live projection (its `journal`
    and `reading()`); else a bare `journal`."""
    state = request.app.state
    found = getattr(state, "web_source", None)
    if isinstance(found, AuditSource):
        return found
    with _source_lock:
        found = getattr(state, "web_source", None)
        if isinstance(found, AuditSource):
            return found
        live = getattr(state, "ledger", None)
        journal = getattr(live, "journal", None) or getattr(state, "journal", None)
        if journal is None:
            raise RuntimeError("the web view needs app.state.ledger (the service's live "
                               "projection), app.state.journal or app.state.web_source")
        source = AuditSource(journal, live=live if hasattr(live, "reading") else None,
                             revision_log=getattr(state, "revision_log", None))
        source.verifier = Verifier(journal)
        source.warm_up()
        state.web_source = source
        return source


PAGE_HEADERS = {
    # Scripts and styles from this origin only, none inline (every script and stylesheet
    # is a file; htmx's inline indicator style, which the pages do not use, is turned off
    # in base.html), no framing, no copy of a confidential page in a cache, and no page
    # address sent on to another site.
    "Content-Security-Policy": "default-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; frame-ancestors 'none'; "
                               "base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}
"""The headers of every page of the audit view."""

DOWNLOAD_HEADERS = {name: PAGE_HEADERS[name]
                    for name in ("X-Content-Type-Options", "Cache-Control", "Referrer-Policy")}
"""The headers of the view's CSV and JSON: a ledger download is as confidential as its page."""


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """The page `template` with `context`, plus what every page uses."""
    source = source_of(request)
    body = _env.get_template(template).render(static=STATIC, path=request.url.path,
                                              journal_head=source.head(), **context)
    return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)


def problem(request: Request, status: int, title: str, detail: str, *,
            asked: str | None = None) -> HTMLResponse:
    """An error page naming what was wrong and what would be right; its title (a tab's
    name, a printout's header) names what was `asked` for: `account acme`."""
    return render(request, "error.html", status=status, heading=title, detail=detail,
                  title=f"{title}: {asked}" if asked else title)


def _params(request: Request) -> dict[str, str]:
    return dict(request.query_params)


@router.get("/", response_class=HTMLResponse, dependencies=[takes("q", "page")])
def summary_page(request: Request) -> HTMLResponse:
    """Every account's figures per pool, credits expiring soon, head, last verify."""
    params = _params(request)
    try:
        context = pages.summary(source_of(request), params)
    except ValueError as exc:
        return problem(request, 422, "Bad parameter", str(exc))
    # The title, a tab's name and a printout's header, says which view this is.
    title = f"Accounts matching {context['q']}" if context.get("q") else "Accounts"
    if context.get("pages", 1) > 1:
        title += f", page {context['page']:,} of {context['pages']:,}"
    return render(request, "summary.html", title=title, heading="Accounts", params=params,
                  **context)


def _suffix_is_a_route(request: Request, suffix: str) -> bool:
    """Whether the path's last segment, after a "/" as sent, is `suffix`: the name of an
    account linked as `/accounts/acme%2Fledger.csv` (its "/" quoted) is read decoded by
    the router, as if it were acme's CSV; the path as sent tells them apart."""
    raw = request.scope.get("raw_path")
    if not isinstance(raw, bytes):
        return True
    return unquote(raw.rpartition(b"/")[2].decode("latin-1")) == suffix


@router.get("/accounts/{account:path}/ledger.csv", response_model=None,
            dependencies=[takes(*LEDGER_QUERY, suffix="ledger.csv")])
def account_csv(request: Request, account: str) -> Response:
    """The account page's ledger, filters applied, as a CSV download."""
    if not _suffix_is_a_route(request, "ledger.csv"):
        return account_page(request, f"{account}/ledger.csv")
    params = _params(request)
    try:
        page = pages.account_page(source_of(request), account, params, paged=False)
    except UnknownAccount as exc:
        return problem(request, 404, "Unknown account", str(exc), asked=f"account {account}")
    except ValueError as exc:
        return problem(request, 422, "Bad filter", str(exc), asked=f"account {account}")
    return Response(pages.ledger_csv(page), media_type="text/csv; charset=utf-8",
                    headers={**DOWNLOAD_HEADERS, "Content-Disposition":
                             attachment(f"{account}-ledger-{page.position}.csv")})


def attachment(name: str) -> str:
    """A Content-Disposition for downloading `name`: letters, digits and `-_.` kept, the
    rest `_`; an HTTP header is Latin-1, so a name beyond ASCII goes as RFC 6266's
    `filename*` (UTF-8), beside an ASCII `filename` for older clients."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    plain = "".join(c if c.isascii() else "_" for c in safe)
    if plain == safe:
        return f'attachment; filename="{plain}"'
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(safe, safe='')}"


@router.get("/accounts/{account:path}/timeline.json", response_model=None,
            dependencies=[takes("as_known_at", suffix="timeline.json")])
def account_timeline(request: Request, account: str) -> Response:
    """The chart's JSON: the account's figures over time and each grant's burn-down."""
    if not _suffix_is_a_route(request, "timeline.json"):
        return account_page(request, f"{account}/timeline.json")
    source = source_of(request)
    try:
        position = pages.parse_known_at(source.journal, request.query_params.get("as_known_at"))
        data = pages.timeline_json(source, account, position)
    except UnknownAccount as exc:
        return _json_problem(404, "Unknown account", str(exc))
    except ValueError as exc:
        return _json_problem(422, "Bad parameter", str(exc))
    return JSONResponse(data, headers=DOWNLOAD_HEADERS)


# After the account's CSV and JSON: a name may hold "/" (the path converter takes it),
# so the page's route, matching any path under /accounts/, comes last.
@router.get("/accounts/{account:path}", response_class=HTMLResponse,
            dependencies=[takes(*ACCOUNT_QUERY)])
def account_page(request: Request, account: str) -> HTMLResponse:
    """One account: chart, grants, ledger with filters, as known at a position."""
    params = _params(request)
    try:
        page = pages.account_page(source_of(request), account, params)
    except UnknownAccount as exc:
        return problem(request, 404, "Unknown account", str(exc), asked=f"account {account}")
    except ValueError as exc:
        return problem(request, 422, "Bad filter", str(exc), asked=f"account {account}")
    timeline, burndown = pages.chart_tables(
        pages.timeline_json(source_of(request), account, page.position))
    title = f"Account {account}"
    if page.position < page.head:
        title += f" as known at #{page.position:,}"
    return render(request, "account.html", title=title, page=page,
                  params=params, kinds=pages.LINE_KINDS, timeline=timeline, burndown=burndown,
                  ledger_page_size=pages.LEDGER_PAGE)


def _json_problem(status: int, title: str, detail: str) -> JSONResponse:
    return JSONResponse({"type": "about:blank", "title": title, "status": status,
                         "detail": detail}, status_code=status,
                        media_type="application/problem+json", headers=DOWNLOAD_HEADERS)


@router.get("/jobs/{job:path}", response_class=HTMLResponse, dependencies=[takes()])
def job_page(request: Request, job: str) -> HTMLResponse:
    """A job's timeline, who paid its charge, why it was rejected or is waiting."""
    try:
        explanation, positions = pages.job_page(source_of(request), job)
    except UnknownJob as exc:
        return problem(request, 404, "Unknown job", str(exc), asked=f"job {job}")
    return render(request, "job.html", title=f"Job {job}", job=explanation,
                  grant_positions=positions)


@router.get("/journal", response_class=HTMLResponse,
            dependencies=[takes("after", "limit")])
def journal_page(request: Request) -> HTMLResponse:
    """Pages of events in arrival order, the revisions, the head and verification."""
    source = source_of(request)
    params = _params(request)
    try:
        page = pages.journal_page(source, params)
    except ValueError as exc:
        return problem(request, 422, "Bad parameter", str(exc))
    revisions, total = pages.recent_revisions(source)
    title = "Journal"
    if page.events:
        title += f", events {page.after + 1:,} to {min(page.after + page.limit, page.head):,}"
    return render(request, "journal.html", title=title, heading="Journal", page=page,
                  params=params,
                  head=pages.head_record(source.journal), revisions=revisions,
                  revisions_total=total, verify=last_verify(source.journal, source.verifier))


def _verifier(source: AuditSource) -> Verifier:
    if source.verifier is None:
        source.verifier = Verifier(source.journal)
    verifier: Verifier = source.verifier
    return verifier


@router.post("/journal/verify", response_model=None, dependencies=[takes()])
def start_verify(request: Request) -> Response:
    """Start a verification in the background (unless one runs): the progress fragment
    for htmx, a redirect to the journal page for a plain form. Refused (`403`) when
    another site's page posts it: `_from_another_site`."""
    elsewhere = _from_another_site(request)
    if elsewhere is not None:
        return problem(request, 403, "Not from this site",
                       f"a verification is started from this view's journal page, and this "
                       f"request came from {elsewhere}: nothing was started")
    status = _verifier(source_of(request)).start()
    if request.headers.get("HX-Request"):
        return render(request, "_verify.html", verify=status)
    return RedirectResponse("/journal#verify", status_code=303)


def _from_another_site(request: Request) -> str | None:
    """Where a POST came from, when that is another site's page (None: this view's, or no
    browser's). A form on any site may post here without a token when the service has
    none, and each post starts a verification: a whole journal read."""
    return another_site(request.scope["headers"])


@router.get("/journal/verify", response_class=HTMLResponse, dependencies=[takes()])
def verify_status(request: Request) -> HTMLResponse:
    """The verification's progress or verdict (polled by the journal page)."""
    source = source_of(request)
    return render(request, "_verify.html", verify=last_verify(source.journal, source.verifier))


@router.get("/events/{position}", response_class=HTMLResponse, dependencies=[takes()])
def event_page(request: Request, position: str) -> HTMLResponse:
    """One event by position: fields, recorded time, chain hash, what it changed."""
    source = source_of(request)
    try:
        if not position.strip():  # parse_int's default is for an absent parameter
            raise ValueError(f"position: not a whole number: {position!r}")
        at = pages.parse_int("position", position, 0, low=1)
    except ValueError as exc:
        return problem(request, 422, "Bad position", str(exc))
    page = pages.event_page(source, at)
    if page is None:
        return problem(request, 404, "No such event",
                       f"no event at position {at:,}; the journal holds positions 1 to "
                       f"{source.head():,}", asked=f"event #{at:,}")
    return render(request, "event.html", title=f"Event {page.record.id}", page=page)


@router.get("/event", response_model=None, dependencies=[takes("id")])
def event_by_id(request: Request, id: str = "") -> Response:
    """`/event?id=...`: the page of the event recorded under that id."""
    if not id:
        # No id is a bad request, not an event that is not there.
        return problem(request, 422, "Bad parameter",
                       "id: give the id of a recorded event, /event?id=ID")
    source = source_of(request)
    position = pages.event_position(source.journal, id)
    if position is None:
        return problem(request, 404, "No such event", f"no event is recorded under id {id!r}")
    return RedirectResponse(f"/events/{position}", status_code=303)


PAGES = "/, /accounts/{account}, /jobs/{job}, /journal, /events/{position}"
"""The view's pages, as an unknown path's error page names them."""


def unknown_path_page(request: Request, status: int) -> HTMLResponse | None:
    """The view's error page for a browser's GET of a path that no route answers (a
    mistyped link): a page, with its language, title and landmarks, where the API's
    `404` problem would be bare JSON. None for anything else: the API's paths, the static
    files, a client that does not ask for HTML, and, on a service with bearer tokens, a
    request without a read role (the page shows the journal's head)."""
    path = request.url.path
    if (status != 404 or request.method not in ("GET", "HEAD")
            or path.startswith(("/v1/", STATIC + "/")) or path == "/v1"
            or "text/html" not in request.headers.get("accept", "")):
        return None
    try:
        _may_read(request)
    except ServiceProblem:  # refused (401, 403): the API's answer stands
        return None
    return problem(request, 404, "No such page",
                   f"no page at {path!r}: the pages are {PAGES}")


def bad_query(request: Request, exc: Exception) -> Response:
    """The answer to a `BadQuery`: the error page, or a JSON problem for the chart's JSON."""
    assert isinstance(exc, BadQuery)
    if exc.as_json:
        return _json_problem(422, "Bad parameter", exc.detail)
    return problem(request, 422, "Bad parameter", exc.detail)
