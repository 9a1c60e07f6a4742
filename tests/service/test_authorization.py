"""Who may call what: every route of the app, API and web view, against every kind of
caller. The routes are read from the app itself, so a route added without a decided
rule fails here until it gets one (and a row in docs/http.md, "Who may call what")."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.routing import Mount

from tests.service.conftest import TOKENS, Clock
from tools.service import create_app
from tools.service.auth import Token

READ = ("worker", "finance", "auditor")
OPEN = "open"

# The decided rule of every operation: open to anyone, or the roles that may call it.
RULES: dict[tuple[str, str], Any] = {
    # The API's description, its docs and the process's health: no token.
    ("GET", "/openapi.json"): OPEN, ("HEAD", "/openapi.json"): OPEN,
    ("GET", "/docs"): OPEN, ("HEAD", "/docs"): OPEN,
    # Swagger UI's files for /docs, and the web view's stylesheet and scripts: no token
    # (they hold no figures).
    ("GET", "/static/docs/{path}"): OPEN,
    ("GET", "/healthz"): OPEN, ("GET", "/readyz"): OPEN,
    ("GET", "/static/web/{path}"): OPEN,
    # Decisions.
    ("POST", "/v1/accounts"): ("finance",),
    ("POST", "/v1/accounts/{account}/grants"): ("finance",),
    ("POST", "/v1/events"): ("finance",),
    ("POST", "/v1/accounts/{account}/usage"): ("worker",),
    ("POST", "/v1/jobs"): ("worker",),
    ("POST", "/v1/jobs/start-next"): ("worker",),
    ("POST", "/v1/jobs/{job}/complete"): ("worker",),
    ("POST", "/v1/jobs/{job}/cancel"): ("worker",),
    # Reads, of the API and of the web view: any role (balances are confidential).
    ("GET", "/v1/accounts"): READ,
    ("GET", "/v1/accounts/{account}/balance"): READ,
    ("GET", "/v1/accounts/{account}/statement"): READ,
    ("GET", "/v1/jobs/{job}"): READ,
    ("GET", "/v1/revisions"): READ,
    ("GET", "/v1/journal"): READ,
    ("GET", "/v1/journal/head"): READ,
    ("POST", "/v1/journal/verify"): READ,
    ("GET", "/"): READ,
    ("GET", "/accounts/{account}"): READ,
    ("GET", "/accounts/{account}/ledger.csv"): READ,
    ("GET", "/accounts/{account}/timeline.json"): READ,
    ("GET", "/jobs/{job}"): READ,
    ("GET", "/journal"): READ,
    ("GET", "/journal/verify"): READ,
    ("POST", "/journal/verify"): READ,
    ("GET", "/events/{position}"): READ,
    ("GET", "/event"): READ,
}

GOOD = {role: f"Bearer {secret}" for role, secret in TOKENS.items()}
AUDITOR = TOKENS["auditor"]

# Authorization headers that name no known token: 401 wherever a token is needed.
UNKNOWN = {
    "no header": None,
    "empty": "",
    "a token not configured": "Bearer not-a-configured-token-0",
    "the scheme alone": "Bearer",
    "the scheme and blanks": "Bearer    ",
    "no scheme": AUDITOR,
    "another scheme": f"Token {AUDITOR}",
    "basic": "Basic " + base64.b64encode(f"auditor:{AUDITOR}".encode()).decode(),
    "a tab after the scheme": f"Bearer\t{AUDITOR}",
    "a space and a tab after the scheme": f"Bearer \t{AUDITOR}",
    "the token in another case": f"Bearer {AUDITOR.upper()}",
    "a prefix of the token": f"Bearer {AUDITOR[:-1]}",
    "the token and more": f"Bearer {AUDITOR}x",
    "the token twice": f"Bearer {AUDITOR} {AUDITOR}",
}

# The same token written otherwise, as RFC 9110 and RFC 6750 allow: the auditor's role.
AS_AUDITOR = {
    "the scheme in lower case": f"bearer {AUDITOR}",
    "the scheme in upper case": f"BEARER {AUDITOR}",
    "two spaces": f"Bearer  {AUDITOR}",
    "blanks after the token": f"Bearer {AUDITOR}  ",
}


@pytest.fixture
def app_client(db_url: str, clock: Clock) -> Iterator[TestClient]:
    tokens = [Token(role, secret.encode()) for role, secret in TOKENS.items()]
    with TestClient(create_app(db_url, clock=clock, tokens=tokens),
                    follow_redirects=False) as client:
        yield client


def operations(app: Any) -> set[tuple[str, str]]:
    """(method, path) of everything the app answers, its included routers' routes too;
    path parameters as `{name}`, a mount's files as `{path}`."""
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        inner = (list(route.effective_route_contexts())
                 if hasattr(route, "effective_route_contexts") else [route])
        for each in inner:
            if isinstance(each, Mount):
                found.add(("GET", f"{each.path}/{{path}}"))
                continue
            path = re.sub(r"\{(\w+):\w+\}", r"{\1}", each.path)
            found.update((method, path) for method in each.methods or ())
    return found


def test_every_route_has_a_decided_rule(app_client: TestClient) -> None:
    assert operations(app_client.app) == set(RULES)


def _concrete(path: str) -> str:
    return (path.replace("{account}", "a").replace("{job}", "j")
            .replace("{position}", "1").replace("{path}", "web.css"))


def _call(client: TestClient, method: str, path: str, authorization: str | None) -> Any:
    headers = {} if authorization is None else {"Authorization": authorization}
    if method == "POST":
        return client.post(_concrete(path), json={}, headers=headers)
    return client.request(method, _concrete(path), headers=headers)


def _refused(answer: Any, status: int, presented: str | None) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    if answer.request.method != "HEAD":  # a HEAD's answer has the headers only
        assert set(answer.json()) == {"type", "title", "status", "detail"}
    if status == 401:
        assert answer.headers["www-authenticate"].startswith("Bearer")
    for secret in TOKENS.values():  # never told back, whatever was sent
        assert secret not in answer.text
        assert secret not in str(answer.headers)
    sent = (presented or "").split()
    if sent and len(sent[-1]) >= 16:  # a token that is not one, or another scheme's
        assert sent[-1] not in answer.text


@pytest.mark.parametrize(("method", "path"), sorted(RULES))
def test_each_caller_gets_what_the_rule_says(app_client: TestClient, method: str,
                                            path: str) -> None:
    rule = RULES[(method, path)]
    for why, header in UNKNOWN.items():
        answer = _call(app_client, method, path, header)
        if rule == OPEN:
            assert answer.status_code not in (401, 403), (why, answer.text)
        else:
            _refused(answer, 401, header)
    for role, header in GOOD.items():
        answer = _call(app_client, method, path, header)
        if rule == OPEN or role in rule:
            assert answer.status_code not in (401, 403), (role, answer.text)
        else:
            _refused(answer, 403, header)
            assert answer.json()["detail"].startswith(f"role {role!r} may not do this")
    for why, header in AS_AUDITOR.items():
        answer = _call(app_client, method, path, header)
        if rule == OPEN or "auditor" in rule:
            assert answer.status_code not in (401, 403), (why, answer.text)
        else:
            _refused(answer, 403, header)


@pytest.mark.parametrize(("method", "path"), sorted(RULES))
def test_two_authorization_headers_are_refused_as_ambiguous(
        app_client: TestClient, method: str, path: str) -> None:
    """Which of two would count depends on who reads them (a proxy may take the last):
    refused (RFC 6750, 3.1: `invalid_request`), as a Content-Type sent twice is."""
    rule = RULES[(method, path)]
    for first, second in (("finance", "auditor"), ("auditor", "finance"),
                          ("worker", "worker")):
        headers = [("Authorization", GOOD[first]), ("Authorization", GOOD[second])]
        if method == "POST":
            answer = app_client.post(_concrete(path), json={}, headers=headers)
        else:
            answer = app_client.request(method, _concrete(path), headers=headers)
        if rule == OPEN:
            assert answer.status_code not in (400, 401, 403), (first, second, answer.text)
            continue
        _refused(answer, 400, None)
        assert answer.headers["www-authenticate"] == 'Bearer error="invalid_request"'
        if method != "HEAD":
            assert "one Authorization header" in answer.json()["detail"]


@pytest.mark.parametrize(("method", "path"), sorted(
    key for key, rule in RULES.items() if rule != OPEN and not key[1].startswith("/v1")))
def test_a_page_s_token_is_decided_before_its_path_and_headers(
        app_client: TestClient, method: str, path: str) -> None:
    """As under /v1: without a token, what was wrong with a page's path, query or headers
    is not told (the table's 401), and with one it is."""
    concrete = _concrete(path.replace("{account}", "a%0A").replace("{job}", "j%0A")
                         .replace("{position}", "1%0A"))  # a control character in a name
    for headers in ([("Content-Type", "text/plain"), ("Content-Type", "text/csv")],
                    [("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")]):
        answer = app_client.request(method, concrete, headers=headers)
        _refused(answer, 401, None)
        answer = app_client.request(method, concrete,
                                    headers=[*headers, ("Authorization", GOOD["auditor"])])
        assert answer.status_code == 422, (headers, answer.text)


@pytest.mark.parametrize("path", sorted({path for (_, path), rule in RULES.items()
                                         if rule != OPEN}))
def test_other_methods_and_a_trailing_slash_show_nothing_without_a_token(
        app_client: TestClient, path: str) -> None:
    """OPTIONS, other methods and the path with a "/" after it: never an answer with
    content."""
    concrete = _concrete(path)
    for method in ("OPTIONS", "PUT", "DELETE"):
        answer = app_client.request(method, concrete)
        if path.startswith("/v1"):
            _refused(answer, 401, None)  # decided before the method is looked at
        else:
            assert answer.status_code in (401, 405), (method, answer.status_code)
    slashed = app_client.get(concrete + "/")
    if path.startswith("/v1"):
        _refused(slashed, 401, None)
    else:
        assert slashed.status_code in (307, 401, 404), slashed.status_code
        if slashed.status_code == 307:  # to the path without it, which needs a token
            assert slashed.headers["location"].rstrip("/").endswith(concrete.rstrip("/"))
        if slashed.status_code == 404:
            assert slashed.headers["content-type"] == "application/problem+json"


def test_without_tokens_every_route_answers_everyone(db_url: str, clock: Clock) -> None:
    with TestClient(create_app(db_url, clock=clock), follow_redirects=False) as client:
        assert operations(client.app) == set(RULES)
        for method, path in sorted(RULES):
            for header in (None, "Bearer not-a-configured-token-0"):
                answer = _call(client, method, path, header)
                assert answer.status_code not in (401, 403), (method, path, answer.text)


@pytest.mark.parametrize(("method", "path"), sorted(
    key for key in RULES if key[1].startswith("/v1")))
def test_no_answer_under_v1_is_kept_in_a_cache(app_client: TestClient, method: str,
                                               path: str) -> None:
    """A balance, or the refusal of one, must not be served again from a browser's or a
    proxy's cache to the next user of the machine."""
    allowed = RULES[(method, path)]
    for header in (None, GOOD[allowed[0]], GOOD["auditor"]):
        answer = _call(app_client, method, path, header)
        assert answer.headers["cache-control"] == "no-store", answer.headers
        assert answer.headers["x-content-type-options"] == "nosniff"
    fast = app_client.get("/v1/accounts/nobody/balance", headers={"Authorization":
                                                                   GOOD["auditor"]})
    assert fast.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("path", sorted(path for method, path in RULES if method == "GET"))
def test_head_answers_as_get_without_a_body(app_client: TestClient, path: str) -> None:
    """Wherever GET answers, HEAD answers the same status and headers, with no body, to
    the same callers: a health checker's `HEAD /healthz` included."""
    rule = RULES[("GET", path)]
    callers = [None, GOOD["auditor"], GOOD["worker"]]
    for header in callers:
        got = _call(app_client, "GET", path, header)
        head = _call(app_client, "HEAD", path, header)
        assert head.status_code == got.status_code, (header, head.status_code, got.text)
        assert head.content == b""
        same = ("content-type", "content-length", "cache-control", "www-authenticate",
                "content-security-policy")
        assert {k: head.headers.get(k) for k in same} == {k: got.headers.get(k)
                                                          for k in same}
        if rule != OPEN and header is None:
            _refused(head, 401, None)


def test_head_sends_the_get_s_head_and_no_body_on_the_wire() -> None:
    """What `Edge` sends the server for a HEAD: the GET's status and headers (its
    Content-Length too), every body empty. (A test client drops a HEAD's body itself, so
    only the messages show it.)"""
    import asyncio

    from tools.service.app import Edge

    seen: list[str] = []

    async def get_answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["method"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"10")]})
        await send({"type": "http.response.body", "body": b"hello", "more_body": True})
        await send({"type": "http.response.body", "body": b"world"})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "HEAD", "path": "/healthz", "headers": []}
    asyncio.run(Edge(get_answer)(scope, receive, send))
    assert seen == ["GET"] and scope["method"] == "HEAD"
    assert sent[0]["status"] == 200 and (b"content-length", b"10") in sent[0]["headers"]
    assert [m["body"] for m in sent[1:]] == [b"", b""]
    assert [m.get("more_body", False) for m in sent[1:]] == [True, False]


def test_a_405_names_the_methods_the_path_takes_static_files_too(
        app_client: TestClient) -> None:
    for method, path, allowed in (("OPTIONS", "/static/web/web.css", "GET, HEAD"),
                                  ("POST", "/static/web/web.css", "GET, HEAD"),
                                  ("PUT", "/journal", "GET, HEAD"),
                                  ("DELETE", "/journal/verify", "GET, HEAD, POST")):
        answer = app_client.request(method, path, headers={"Authorization": GOOD["auditor"]})
        assert answer.status_code == 405
        assert answer.headers["allow"] == allowed, (method, path)
