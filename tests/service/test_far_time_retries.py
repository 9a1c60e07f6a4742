"""A keyed write taken at a far event time by a service started with `--allow-far-times`,
retried after a restart without it: the key is looked up before the far-time rule, so the
retry gets the original answer, another body under the key is 409, and only a new key's
far time is 422 (nothing appended either way)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.service.conftest import Clock
from tools.service import create_app

FAR = 1796083200000  # milliseconds given as seconds: far past 2200-01-01

# (key, path, body, another body under the same key). In order: each takes the state the
# ones before left (j1 is submitted, then started, then completed; j2 submitted, then
# cancelled, then cancelled again).
WRITES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("open-far", "/v1/accounts", {"account": "b", "time": FAR},
     {"account": "b", "max_running": 3, "time": FAR}),
    ("grant-far", "/v1/accounts/a/grants", {"amount": 5, "time": FAR + 1},
     {"amount": 6, "time": FAR + 1}),
    ("usage-far", "/v1/accounts/a/usage", {"amount": 1, "time": FAR + 2},
     {"amount": 2, "time": FAR + 2}),
    ("submit-far", "/v1/jobs", {"job": "j1", "account": "a", "cost": 1, "priority": 1,
                                "time": FAR + 3},
     {"job": "j1", "account": "a", "cost": 2, "priority": 1, "time": FAR + 3}),
    ("start-far", "/v1/jobs/start-next", {"time": FAR + 4}, {"time": FAR + 40}),
    ("complete-far", "/v1/jobs/j1/complete", {"success": True, "time": FAR + 5},
     {"success": False, "time": FAR + 5}),
    ("start-none", "/v1/jobs/start-next", {"time": FAR + 6}, {"time": FAR + 60}),
    ("submit-2", "/v1/jobs", {"job": "j2", "account": "a", "cost": 1, "priority": 1,
                              "time": FAR + 7},
     {"job": "j2", "account": "a", "cost": 1, "priority": 2, "time": FAR + 7}),
    ("cancel-far", "/v1/jobs/j2/cancel", {"time": FAR + 8}, {"time": FAR + 80}),
    ("cancel-again", "/v1/jobs/j2/cancel", {"time": FAR + 9}, {"time": FAR + 90}),
    # Without a time: the latest event's, far (the clock is behind it).
    ("usage-live", "/v1/accounts/a/usage", {"amount": 1}, {"amount": 3}),
    ("batch-far", "/v1/events", {"events": [
        {"type": "grant", "account": "c", "amount": 3, "time": FAR + 10},
        {"type": "consume", "account": "c", "amount": 1, "time": FAR + 11}]},
     {"events": [{"type": "grant", "account": "c", "amount": 4, "time": FAR + 10}]}),
    ("batch-own-ids", "/v1/events", {"events": [
        {"type": "grant", "account": "c", "amount": 2, "time": FAR + 12, "id": "own-1"}]},
     {"events": [{"type": "grant", "account": "c", "amount": 2, "time": FAR + 13,
                  "id": "own-2"}]}),
]


def _post(client: TestClient, path: str, body: dict[str, Any], key: str) -> Any:
    return client.post(path, json=body, headers={"Idempotency-Key": key})


def _head(client: TestClient) -> int:
    position: int = client.get("/v1/journal/head").json()["position"]
    return position


@pytest.mark.parametrize("fast_routes", [True, False], ids=["fast", "fastapi"])
def test_a_far_write_retried_after_a_restart_without_far_times_gets_its_answer(
        database_url: str, fast_routes: bool) -> None:
    clock = Clock(100)
    answers = {}
    with TestClient(create_app(database_url, clock=clock, mount_web=False,
                               allow_far_times=True, fast_routes=fast_routes)) as allowed:
        assert allowed.post("/v1/accounts/a/grants",
                            json={"amount": 100, "time": 0}).status_code == 201
        for key, path, body, _ in WRITES:
            taken = _post(allowed, path, body, key)
            assert taken.status_code in (200, 201, 204), (key, taken.text)
            answers[key] = (taken.status_code, taken.content)
        assert answers["start-none"][0] == 204
        assert b'"state":"cancelled"' in answers["cancel-again"][1]
        at = _head(allowed)
    with TestClient(create_app(database_url, clock=clock, mount_web=False,
                               fast_routes=fast_routes)) as restarted:
        for key, path, body, other in WRITES:
            again = _post(restarted, path, body, key)
            assert (again.status_code, again.content) == answers[key], key
            conflict = _post(restarted, path, other, key)
            assert conflict.status_code == 409, (key, conflict.text)
            assert conflict.json()["type"].endswith("/idempotency-conflict"), key
            new = _post(restarted, path, body if "time" in body or "events" in body
                        else {**body, "time": FAR + 100}, f"{key}-new")
            assert new.status_code == 422, (key, new.text)
            assert "2200-01-01" in new.json()["detail"], key
        assert _head(restarted) == at
