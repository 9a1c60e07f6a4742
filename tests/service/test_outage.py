"""The database going away and coming back under the HTTP service, on PostgreSQL.

A proxy between the service and the server stands in for the outage (the server itself is
shared with other tests and is never touched): it refuses and cuts connections, or loses
the answer to a COMMIT that did commit.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from eventstore import Journal
from eventstore.testing import open_journal
from projections.replay import fold_canonical
from tests.service.db_proxy import APPEND, DatabaseProxy, proxied
from tools.service import create_app

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


@contextlib.contextmanager
def _serving_account_a(url: str) -> Iterator[TestClient]:
    """A client of a service on `url` (its clock at 100) where account `a` is open."""
    with TestClient(create_app(url, clock=lambda: 100, mount_web=False)) as client:
        assert client.post("/v1/accounts", json={"account": "a"}, headers=_key("open")
                           ).status_code == 201
        yield client


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
    with _serving_account_a(url) as client:
        proxy.down()
        refused = client.post("/v1/accounts/a/grants", json={"amount": 7}, headers=_key("g"))
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "5"
        assert refused.headers["content-type"] == "application/problem+json"
        for read in ("/v1/accounts/a/balance", "/v1/journal/head"):
            answer = client.get(read)
            assert answer.status_code == 503 and answer.headers["Retry-After"] == "5", read
        assert client.get("/healthz").status_code == 200  # alive: no restart wanted
        # Not ready, in readiness's own shape (a supervisor reads `status`), while the
        # projection the failed batch left cannot be rebuilt.
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json() == {"status": "rebuilding"}, ready.text
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


def test_a_decision_whose_commit_answer_was_lost_is_not_logged_as_uncommitted(
    outage: tuple[DatabaseProxy, str], pg_fresh_url: str, caplog: pytest.LogCaptureFixture,
) -> None:
    proxy, url = outage
    with _serving_account_a(url) as client:
        proxy.lose_commit_after = APPEND
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


@pytest.mark.parametrize("ahead", [True, False], ids=["decided-ahead", "decided-in-line"])
def test_a_keyless_write_whose_commit_answer_was_lost_names_the_key_that_retries_it_safely(
    outage: tuple[DatabaseProxy, str], pg_fresh_url: str, ahead: bool,
) -> None:
    """Sent without a key, a grant whose COMMIT's answer was lost may be recorded: sent
    again as it was, it would be recorded twice. The 503 names the event id it was given,
    to send it again under, and no Retry-After (waiting does not make a resend safe)."""
    proxy, url = outage
    with _serving_account_a(url) as client:
        if not ahead:  # decided inside its transaction, as after another writer's append
            client.app.state.ledger._defer_after = math.inf  # type: ignore[attr-defined]
        proxy.lose_commit_after = APPEND
        lost = client.post("/v1/accounts/a/grants", json={"amount": 7})
        assert proxy.cuts == 1 and lost.status_code == 503
        assert "retry-after" not in lost.headers
        detail = lost.json()["detail"]
        named = re.findall(r"Idempotency-Key: ([0-9a-f]{32})", detail)
        assert named and "may or may not" in detail, detail
        again = client.post("/v1/accounts/a/grants", json={"amount": 7}, headers=_key(named[0]))
        assert again.status_code == 201, again.text
        assert (again.json()["id"], again.json()["position"]) == (named[0], 2)
        assert client.get("/v1/accounts/a/balance").json()["balance"] == 7
        assert client.get("/v1/journal/head").json()["position"] == 2
        _agrees_with_a_fresh_fold(client, pg_fresh_url)


def test_a_keyless_start_whose_commit_answer_was_lost_names_the_job_it_may_have_started(
    outage: tuple[DatabaseProxy, str],
) -> None:
    proxy, url = outage
    with TestClient(create_app(url, clock=lambda: 100, mount_web=False)) as client:
        client.post("/v1/accounts/a/grants", json={"amount": 9}, headers=_key("g"))
        assert client.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                              "priority": 1}).status_code == 201
        proxy.lose_commit_after = APPEND
        lost = client.post("/v1/jobs/start-next", json={})
        assert proxy.cuts == 1 and lost.status_code == 503
        assert "retry-after" not in lost.headers
        assert "job 'j1'" in lost.json()["detail"], lost.json()["detail"]
        assert client.get("/v1/jobs/j1").json()["state"] == "running"


def test_decisions_of_a_batch_whose_commit_answer_was_lost_are_each_recorded_once(
    outage: tuple[DatabaseProxy, str], pg_fresh_url: str,
) -> None:
    proxy, url = outage
    with _serving_account_a(url) as client:
        proxy.lose_commit_after = APPEND
        keys = [f"g{i}" for i in range(24)]

        def grant(key: str) -> Any:
            return client.post("/v1/accounts/a/grants", json={"amount": 1}, headers=_key(key))

        with ThreadPoolExecutor(8) as pool:
            first = dict(zip(keys, pool.map(grant, keys), strict=True))
        assert proxy.cuts == 1
        assert {r.status_code for r in first.values()} <= {201, 503}
        assert any(r.status_code == 503 for r in first.values())
        for key in keys:  # every client retries until answered; the answers agree
            again = grant(key)
            assert again.status_code == 201, again.text
            if first[key].status_code == 201:
                assert again.json() == first[key].json()
        positions = [grant(key).json()["position"] for key in keys]
        assert sorted(positions) == list(range(2, 2 + len(keys)))  # each once, no gap
        assert client.get("/v1/accounts/a/balance").json()["balance"] == len(keys)
        _agrees_with_a_fresh_fold(client, pg_fresh_url)
