"""The database going away and coming back under the HTTP service, on PostgreSQL.

A proxy between the service and the server stands in for the outage (the server itself is
shared with other tests and is never touched): it refuses and cuts connections, or loses
the answer to a COMMIT that did commit.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from eventstore import Journal
from eventstore.testing import open_journal
from projections.replay import fold_canonical
from tests.service.db_proxy import DatabaseProxy, proxied
from tools.service import create_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "concurrency"))
from concurrency_kit import CommitCutter

pytestmark = pytest.mark.postgres


def _key(key: str) -> dict[str, str]:
    return {"Idempotency-Key": key}


def _agrees_with_a_fresh_fold(client: TestClient, url: str) -> None:
    """The journal verifies and the service's projection is what a fold of it gives."""
    assert client.post("/v1/journal/verify", json={}).json()["ok"] is True
    with Journal(url) as journal, client.app.state.ledger.reading() as ledger:  # type: ignore[attr-defined]
        assert ledger.digest() == fold_canonical(journal).digest()


@pytest.fixture
def outage(pg_fresh_url: str) -> Iterator[tuple[DatabaseProxy, str]]:
    open_journal(pg_fresh_url).close()
    with proxied(pg_fresh_url) as got:
        yield got


def _until(check: Callable[[], Any], seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while not (got := check()):
        assert time.monotonic() < deadline, "not within the time given"
        time.sleep(0.05)
    return got


def test_an_outage_is_a_503_to_retry_and_the_service_recovers_without_a_restart(
    outage: tuple[DatabaseProxy, str], pg_fresh_url: str,
) -> None:
    proxy, url = outage
    with TestClient(create_app(url, clock=lambda: 100, mount_web=False)) as client:
        assert client.post("/v1/accounts", json={"account": "a"}, headers=_key("open")
                           ).status_code == 201
        proxy.down()
        refused = client.post("/v1/accounts/a/grants", json={"amount": 7}, headers=_key("g"))
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        assert refused.headers["content-type"] == "application/problem+json"
        for read in ("/v1/accounts/a/balance", "/v1/journal/head"):
            answer = client.get(read)
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "5", read
        assert client.get("/healthz").status_code == 200  # alive: no restart wanted
        proxy.up()
        for _ in range(2):  # the retry records it; its repeat answers the same
            granted = client.post("/v1/accounts/a/grants", json={"amount": 7}, headers=_key("g"))
            assert granted.status_code == 201 and granted.json()["position"] == 2
        assert client.get("/v1/accounts/a/balance").json()["balance"] == 7
        assert client.get("/readyz").json()["status"] == "ready"
        _agrees_with_a_fresh_fold(client, pg_fresh_url)


def test_a_service_whose_catch_up_cannot_reach_the_database_is_ready_once_it_is_back(
    outage: tuple[DatabaseProxy, str], pg_fresh_url: str,
) -> None:
    proxy, url = outage
    # As `serve` does: the projection loads in the background, retried while it fails.
    app = create_app(url, clock=lambda: 100, mount_web=False, load_in_background=True)
    proxy.down()  # and goes away before the projection is loaded
    with TestClient(app) as client:
        assert client.get("/healthz").status_code == 200
        starting = client.get("/readyz")
        assert starting.status_code == 503 and starting.json()["status"] == "starting"
        write = client.post("/v1/accounts", json={"account": "a"}, headers=_key("open"))
        assert write.status_code == 503 and write.headers["Retry-After"] == "5"
        assert "cannot reach PostgreSQL" in write.json()["detail"]
        proxy.up()
        _until(lambda: client.get("/readyz").status_code == 200)
        assert client.post("/v1/accounts", json={"account": "a"}, headers=_key("open")
                           ).status_code == 201
        _agrees_with_a_fresh_fold(client, pg_fresh_url)


@pytest.fixture
def cutter(pg_fresh_url: str) -> Iterator[tuple[CommitCutter, str]]:
    open_journal(pg_fresh_url).close()
    u = make_url(pg_fresh_url)
    proxy = CommitCutter(u.host or "127.0.0.1", u.port or 5432)
    try:
        yield proxy, u.set(host="127.0.0.1", port=proxy.port).render_as_string(
            hide_password=False)
    finally:
        proxy.close()


def test_a_decision_whose_commit_answer_was_lost_is_not_logged_as_uncommitted(
    cutter: tuple[CommitCutter, str], pg_fresh_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    proxy, url = cutter
    with TestClient(create_app(url, clock=lambda: 100, mount_web=False)) as client:
        assert client.post("/v1/accounts", json={"account": "a"}, headers=_key("open")
                           ).status_code == 201
        proxy.armed.set()
        with caplog.at_level(logging.WARNING, logger="gpu_credits.service"):
            lost = client.post("/v1/accounts/a/grants", json={"amount": 7}, headers=_key("g"))
        assert proxy.cuts == 1 and lost.status_code == 503
        assert "may or may not have committed" in lost.json()["detail"]
        # It did commit: the operator reading the log must not be told otherwise.
        said = [r.getMessage() for r in caplog.records if "batch failed" in r.getMessage()]
        assert said and not any("nothing of it committed" in s for s in said), said
        # The projection was rebuilt from the journal: the grant is there, and the retry
        # under the same key answers it, appending nothing.
        assert client.get("/v1/accounts/a/balance").json()["balance"] == 7
        retry = client.post("/v1/accounts/a/grants", json={"amount": 7}, headers=_key("g"))
        assert retry.status_code == 201 and retry.json()["position"] == 2
        assert client.get("/v1/journal/head").json()["position"] == 2
        _agrees_with_a_fresh_fold(client, pg_fresh_url)
