"""A service without tokens answers only requests addressed to a loopback name: a web page
reaching it through DNS rebinding names its own site in `Host`, and is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.service import server
from tools.service import create_app
from tools.service.hosts import host_name

LOCAL = ("127.0.0.1:8000", "localhost:8000", "localhost", "LOCALHOST.", "[::1]:8000",
         "127.5.6.7")
FOREIGN = ("evil.example:8000", "evil.example", "127.0.0.1.evil.example:8000",
           "localhost.evil.example", "10.0.0.1:8000", "[2001:db8::1]:8000", "0.0.0.0:8000",
           "", "[::1]evil.example", "[::1].evil.example:8000", "[::1]:8000.evil.example",
           "127.0.0.1:evil.example")


@pytest.mark.parametrize(("value", "name"), [
    ("localhost:8000", "localhost"), ("localhost.", "localhost"), ("[::1]:80", "[::1]"),
    ("[::1]", "[::1]"), ("::1", "::1"), ("127.0.0.1", "127.0.0.1"), ("a.b:1", "a.b"),
    ("localhost:", "localhost"),
    # Not a name and a port: the value as it is, which is no loopback name.
    ("[::1]evil.example", "[::1]evil.example"), ("[::1]:80.evil", "[::1]:80.evil"),
    ("127.0.0.1:evil", "127.0.0.1:evil"),
])
def test_a_host_header_s_name_is_read_without_its_port(value: str, name: str) -> None:
    assert host_name(value) == name


@pytest.fixture
def client() -> Iterator[TestClient]:
    app = create_app("sqlite://", clock=lambda: 100, mount_web=False,
                     loopback_hosts_only=True)
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        yield client


@pytest.mark.parametrize("host", LOCAL)
def test_a_loopback_name_is_answered(client: TestClient, host: str) -> None:
    answer = client.post("/v1/accounts", json={"account": "a"}, headers={"Host": host})
    assert answer.status_code == 201
    assert client.get("/v1/accounts/a/balance", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", FOREIGN)
def test_another_name_is_refused_before_anything_is_read(client: TestClient,
                                                          host: str) -> None:
    head = client.get("/v1/journal/head").json()
    answer = client.post("/v1/accounts", json={"account": "a"}, headers={"Host": host})
    assert answer.status_code == 400
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["status"] == 400 and problem["type"].endswith("/misdirected")
    assert repr(host) in problem["detail"] and "--tokens" in problem["detail"]
    assert client.get("/v1/journal/head").json() == head  # nothing appended
    assert client.get("/v1/accounts", headers={"Host": host}).status_code == 400
    assert client.get("/healthz", headers={"Host": host}).status_code == 400


def test_an_app_asked_for_no_such_check_answers_any_name() -> None:
    with TestClient(create_app("sqlite://", clock=lambda: 100, mount_web=False)) as client:
        assert client.get("/v1/accounts", headers={"Host": "evil.example"}).status_code == 200


def test_serve_without_tokens_refuses_other_names_and_with_tokens_does_not(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with server.running(url, tmp_path / "open.log") as svc:
        assert httpx.get(f"{svc.base}/v1/accounts").status_code == 200
        port = svc.base.rsplit(":", 1)[1]
        assert httpx.get(f"http://localhost:{port}/v1/accounts").status_code == 200
        refused = httpx.get(f"{svc.base}/", headers={"Host": f"rebound.example:{port}"})
        assert refused.status_code == 400
        assert "rebound.example" in refused.json()["detail"]
    tokens = tmp_path / "tokens"
    tokens.write_text("auditor:a-long-enough-secret-for-the-auditor\n")
    tokens.chmod(0o600)
    with server.running(url, tmp_path / "tokens.log", "--tokens", str(tokens)) as svc:
        port = svc.base.rsplit(":", 1)[1]
        by_name = httpx.get(f"{svc.base}/v1/accounts",
                            headers={"Host": f"ledger.example:{port}",
                                     "Authorization": "Bearer "
                                                      "a-long-enough-secret-for-the-auditor"})
        assert by_name.status_code == 200


CROSS_SITE = (
    {"Origin": "https://evil.example"},
    {"Origin": "null"},  # a sandboxed frame, a page opened from a file
    {"Origin": "http://127.0.0.1:3000"},  # another port of this machine: another origin
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8000"},
    {"Origin": "http://["},
)


@pytest.mark.parametrize("sent", CROSS_SITE)
def test_another_site_s_page_may_not_post_to_a_service_without_tokens(
        client: TestClient, sent: dict[str, str]) -> None:
    """A page of any site may post to a loopback service without a CORS preflight when
    the body is not JSON, or when there is none: `start-next` and `cancel` take no
    body, so such a post started and cancelled jobs. Its browser names the page's
    origin; a program that is no browser (curl, a worker) sends none."""
    client.post("/v1/accounts/a/grants", json={"amount": 50, "time": 1})
    for job in ("j1", "j2"):
        client.post("/v1/jobs", json={"job": job, "account": "a", "cost": 5, "priority": 1,
                                      "time": 2})
    head = client.get("/v1/journal/head").json()
    for path in ("/v1/jobs/start-next", "/v1/jobs/j2/cancel", "/v1/journal/verify"):
        for content_type in (None, "text/plain", "application/x-www-form-urlencoded"):
            headers = {**sent, **({"Content-Type": content_type} if content_type else {})}
            answer = client.post(path, headers=headers, content=b"")
            assert answer.status_code == 403, (path, headers, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            problem = answer.json()
            assert problem["type"].endswith("/cross-site") and "--tokens" in problem["detail"]
    assert client.get("/v1/journal/head").json() == head  # nothing appended
    # Reads stay answered (a page of another site cannot read their answers).
    assert client.get("/v1/accounts", headers=sent).status_code == 200


def test_a_post_of_this_service_s_own_pages_or_of_no_browser_is_answered(
        client: TestClient) -> None:
    client.post("/v1/accounts/a/grants", json={"amount": 50, "time": 1})
    client.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 5, "priority": 1,
                                  "time": 2})
    # /docs's "Try it out": the service's own origin.
    own = {"Origin": "http://127.0.0.1:8000", "Sec-Fetch-Site": "same-origin"}
    assert client.post("/v1/journal/verify", headers=own).status_code == 200
    assert client.post("/v1/jobs/start-next", json={}).json()["job"] == "j1"


def test_with_tokens_another_site_s_page_is_left_to_the_token(tmp_path: Path) -> None:
    """With tokens a page cannot send one (no cookie carries it, and a header would
    need a CORS preflight the service does not answer): the token decides."""
    from tools.service.auth import Token

    app = create_app(f"sqlite:///{tmp_path / 'j.db'}", clock=lambda: 100, mount_web=False,
                     tokens=[Token("auditor", b"a-long-enough-secret-0")])
    with TestClient(app) as secured:
        answer = secured.post("/v1/journal/verify", headers={
            "Origin": "https://ledger-ui.example",
            "Authorization": "Bearer a-long-enough-secret-0"})
        assert answer.status_code == 200
