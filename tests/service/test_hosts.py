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
