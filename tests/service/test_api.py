"""Every endpoint of the HTTP contract through FastAPI's TestClient: answers, statuses,
problems, idempotency; and that a refused request appends nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from projections.corrections import Corrections
from tests.service.conftest import Clock
from tools.service import create_app

PROBLEM = "application/problem+json"


def head(client: TestClient) -> int:
    position: int = client.get("/v1/journal/head").json()["position"]
    return position


def problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert {"type", "title", "status", "detail"} <= set(body)
    return body


def setup_account(client: TestClient, name: str = "a", amount: int = 100) -> None:
    assert client.post("/v1/accounts", json={"account": name}).status_code == 201
    r = client.post(f"/v1/accounts/{name}/grants", json={"amount": amount, "time": 0,
                                                         "expiry": 1000})
    assert r.status_code == 201, r.text


def test_open_account_then_again_is_a_conflict(client: TestClient) -> None:
    r = client.post("/v1/accounts", json={"account": "a", "max_running": 2},
                    headers={"Idempotency-Key": "open-a"})
    assert r.status_code == 201
    assert r.json()["account"] == "a" and r.json()["id"] == "open-a"
    again = client.post("/v1/accounts", json={"account": "a", "max_running": 2},
                        headers={"Idempotency-Key": "open-a"})
    assert again.status_code == 201 and again.json() == r.json()
    problem(client.post("/v1/accounts", json={"account": "a"}), 409)
    assert head(client) == 1


def test_grant_usage_and_balance(client: TestClient) -> None:
    r = client.post("/v1/accounts/a/grants", json={"amount": 100, "time": 0, "expiry": 10,
                                                   "pool": "h100"},
                    headers={"Idempotency-Key": "g-1"})
    assert r.status_code == 201
    assert r.json()["id"] == "g-1" and r.json()["amount"] == 100 and r.json()["pool"] == "h100"
    u = client.post("/v1/accounts/a/usage", json={"amount": 130, "time": 3, "pool": "h100"})
    assert u.status_code == 201 and u.json()["debt"] == 30
    b = client.get("/v1/accounts/a/balance", params={"at": 5}).json()
    assert b["account"] == "a" and b["balance"] == -30 and b["available"] == -30
    assert b["pools"] == {"h100": -30}
    before = client.get("/v1/accounts/a/balance", params={"at": 2}).json()
    assert before["balance"] == 100
    known = client.get("/v1/accounts/a/balance", params={"at": 5, "as_known_at": 1}).json()
    assert known["balance"] == 100 and known["as_known_at"] == 1
    iso = client.get("/v1/accounts/a/balance", params={"at": "1970-01-01T00:00:02Z"}).json()
    assert iso["balance"] == 100


def test_times_are_integers_or_iso_with_offset(client: TestClient) -> None:
    r = client.post("/v1/accounts/a/grants",
                    json={"amount": 5, "time": "2026-11-03T12:00:00+01:00"})
    assert r.status_code == 201 and r.json()["time"] == 1_793_703_600
    problem(client.post("/v1/accounts/a/grants", json={"amount": 5,
                                                       "time": "2026-11-03T12:00:00"}), 422)
    problem(client.post("/v1/accounts/a/grants", json={"amount": 5,
                                                       "time": 1_793_703_600_000}), 422)
    assert head(client) == 1


def test_live_decisions_take_the_clock_but_never_go_back(client: TestClient,
                                                         clock: Clock) -> None:
    client.post("/v1/accounts/a/grants", json={"amount": 5, "time": 500})
    clock.now = 200
    r = client.post("/v1/accounts/a/usage", json={"amount": 1})
    assert r.json()["time"] == 500
    clock.now = 900
    assert client.post("/v1/accounts/a/usage", json={"amount": 1}).json()["time"] == 900


@pytest.mark.parametrize("body", [
    {"amount": 0}, {"amount": -1}, {"amount": "5"}, {"amount": 5.0}, {"amount": True},
    {"amount": 5, "bogus": 1}, {"amount": 5, "time": 10, "expiry": 10}, {},
])
def test_invalid_grants_are_422_and_append_nothing(client: TestClient,
                                                   body: dict[str, Any]) -> None:
    problem(client.post("/v1/accounts/a/grants", json=body), 422)
    assert head(client) == 0


@pytest.mark.parametrize(("path", "body", "said"), [
    ("/v1/accounts/a/grants", '{"amount": 5.0}', "amount: Input should be a valid integer "
     "(got 5.0)"),
    ("/v1/accounts/a/grants", '{"amount": "5.00"}', "amount: Input should be a valid "
     "integer (got '5.00')"),
    ("/v1/accounts/a/usage", '{"amount": 0}', "amount: Input should be greater than 0 "
     "(got 0)"),
    ("/v1/jobs", '{"job": "j", "account": "a", "cost": 1e1, "priority": 1}',
     "cost: Input should be a valid integer (got 10.0)"),
    ("/v1/jobs/j/complete", '{"success": false, "refund_fraction": "0.5"}',
     "refund_fraction: Input should be a valid number (got '0.5')"),
])
def test_a_refused_body_field_names_the_value_sent(client: TestClient, path: str, body: str,
                                                   said: str) -> None:
    """As import and `POST /v1/events` do (`amount must be an integer, got 5.0`): a
    client that wrote 5.00 for an amount is told which value of its body was refused."""
    answer = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert problem(answer, 422)["detail"] == said
    assert head(client) == 0


def test_usage_of_an_unknown_account_is_404(client: TestClient) -> None:
    problem(client.post("/v1/accounts/nobody/usage", json={"amount": 1}), 404)


@pytest.mark.parametrize("path", ["a%09b", "x" * 201])
def test_usage_of_a_name_no_account_can_have_is_422_as_for_a_grant(client: TestClient,
                                                                    path: str) -> None:
    for route in ("usage", "grants"):
        refused = problem(client.post(f"/v1/accounts/{path}/{route}", json={"amount": 1}),
                          422)
        assert "account" in refused["detail"], refused
    problem(client.get("/v1/accounts/nobody/balance"), 404)
    problem(client.get("/v1/accounts/nobody/statement"), 404)
    problem(client.get("/v1/jobs/nothing"), 404)
    assert head(client) == 0


def test_an_account_named_only_by_a_rejected_submit_in_a_file_is_404(
        client: TestClient) -> None:
    events = [{"type": "grant", "account": "a", "amount": 10, "time": 0},
              {"type": "submit", "account": "nobody", "job": "j1", "cost": 5, "priority": 1,
               "time": 10}]
    assert client.post("/v1/events", json={"events": events}).status_code == 200
    problem(client.get("/v1/accounts/nobody/balance"), 404)
    assert [a["account"] for a in client.get("/v1/accounts").json()] == ["a"]
    assert client.get("/v1/jobs/j1").json()["state"] == "rejected"


def test_job_life(client: TestClient) -> None:
    setup_account(client)
    r = client.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 30, "priority": 1},
                    headers={"Idempotency-Key": "submit-j1"})
    assert r.status_code == 201
    assert r.json()["job"] == "j1" and r.json()["accepted"] is True
    assert r.json()["state"] == "pending"
    poor = client.post("/v1/jobs", json={"job": "j2", "account": "a", "cost": 500,
                                         "priority": 1})
    assert poor.status_code == 201 and poor.json()["accepted"] is False
    assert poor.json()["state"] == "rejected" and "500" in poor.json()["reason"]
    problem(client.post("/v1/jobs", json={"job": "j3", "account": "zz", "cost": 1,
                                          "priority": 1}), 404)
    problem(client.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                          "priority": 1}), 409)
    problem(client.post("/v1/jobs/j1/complete", json={"success": True}), 409)
    started = client.post("/v1/jobs/start-next", json={})
    assert started.status_code == 200
    assert started.json() == {"job": "j1", "account": "a", "cost": 30, "priority": 1}
    assert client.post("/v1/jobs/start-next").status_code == 204
    problem(client.post("/v1/jobs/j1/cancel", json={}), 409)
    done = client.post("/v1/jobs/j1/complete", json={"success": False, "refund_fraction": 0.5})
    assert done.status_code == 200 and done.json() == {"job": "j1", "state": "failed",
                                                       "charged": 15}
    job = client.get("/v1/jobs/j1").json()
    assert job["state"] == "failed" and job["charged"] == 15
    assert job["paid_by"] == [{"grant": job["paid_by"][0]["grant"], "amount": 15}]
    rejected = client.get("/v1/jobs/j2").json()
    assert rejected["state"] == "rejected" and rejected["reason"]
    problem(client.post("/v1/jobs/nope/complete", json={"success": True}), 404)
    problem(client.post("/v1/jobs/j1/complete", json={"success": True,
                                                      "refund_fraction": 2}), 422)


def test_a_job_s_answer_gives_every_key_null_where_it_does_not_apply(
        client: TestClient) -> None:
    setup_account(client)
    for job, cost in (("waits", 1), ("runs", 1), ("dropped", 1), ("poor", 10_000)):
        client.post("/v1/jobs", json={"job": job, "account": "a", "cost": cost,
                                      "priority": 1 if job == "runs" else 0})
    client.post("/v1/jobs/start-next", json={})
    client.post("/v1/jobs/dropped/cancel", json={})
    answers = {job: client.get(f"/v1/jobs/{job}").json()
               for job in ("waits", "runs", "dropped", "poor")}
    assert {job: (a["state"], a["charged"]) for job, a in answers.items()} == {
        "waits": ("pending", None), "runs": ("running", None),
        "dropped": ("cancelled", None), "poor": ("rejected", None)}
    assert [job for job, a in answers.items() if a["reason"] is not None] == ["poor"]
    assert len({frozenset(a) for a in answers.values()}) == 1


def test_cancel(client: TestClient) -> None:
    setup_account(client)
    client.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 30, "priority": 1})
    r = client.post("/v1/jobs/j1/cancel", json={})
    assert r.status_code == 200 and r.json() == {"job": "j1", "state": "cancelled"}
    at = head(client)
    assert client.post("/v1/jobs/j1/cancel").json() == {"job": "j1", "state": "cancelled"}
    assert head(client) == at
    assert client.get("/v1/accounts/a/balance").json()["reserved"] == 0


def test_idempotent_retries_answer_the_same_and_append_once(client: TestClient,
                                                            clock: Clock) -> None:
    setup_account(client)
    key = {"Idempotency-Key": "use-1"}
    first = client.post("/v1/accounts/a/usage", json={"amount": 7}, headers=key)
    at = head(client)
    clock.now += 50
    again = client.post("/v1/accounts/a/usage", json={"amount": 7}, headers=key)
    assert (again.status_code, again.json()) == (first.status_code, first.json())
    assert head(client) == at
    problem(client.post("/v1/accounts/a/usage", json={"amount": 8}, headers=key), 409)
    problem(client.post("/v1/accounts/b/grants", json={"amount": 8}, headers=key), 409)
    sub = {"Idempotency-Key": "sub-1"}
    body = {"job": "j1", "account": "a", "cost": 1, "priority": 1}
    one = client.post("/v1/jobs", json=body, headers=sub)
    two = client.post("/v1/jobs", json=body, headers=sub)
    assert (one.status_code, one.json()) == (two.status_code, two.json())
    assert head(client) == at + 1


def test_a_retry_that_spells_out_a_default_is_the_same_request_with_the_same_answer(
        db_url: str, clock: Clock) -> None:
    """A body that records the same event as the first (a default written out, a time as
    ISO-8601 text) is that request's retry, in this process and after a restart alike:
    the same status and body, nothing appended. Another event under the key is 409."""
    key = {"Idempotency-Key": "inv-1"}
    first_body = {"amount": 5, "time": 10, "expiry": 40}
    spelled = [{**first_body, "priority": 50}, {**first_body, "pool": "general"},
               {**first_body, "time": "1970-01-01T00:00:10Z"},
               {**first_body, "priority": 50, "pool": "general", "memo": None}]
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        first = c.post("/v1/accounts/a/grants", json=first_body, headers=key)
        assert first.status_code == 201 and first.json()["priority"] == 50
        at = head(c)
        for body in spelled:
            again = c.post("/v1/accounts/a/grants", json=body, headers=key)
            assert (again.status_code, again.json()) == (201, first.json()), body
        problem(c.post("/v1/accounts/a/grants", json={**first_body, "priority": 49},
                       headers=key), 409)
        assert head(c) == at
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        for body in [first_body, *spelled]:
            again = c.post("/v1/accounts/a/grants", json=body, headers=key)
            assert (again.status_code, again.json()) == (201, first.json()), body
        assert head(c) == at


def test_a_completion_with_a_null_refund_fraction_is_one_without_it(
        client: TestClient) -> None:
    """`"refund_fraction": null` is the field left out (a full refund on failure), as
    `import` and `POST /v1/events` read it; its retry without the field, or with 1.0
    written out, is the same request."""
    setup_account(client)
    for job in ("j1", "j2"):
        assert client.post("/v1/jobs", json={"job": job, "account": "a", "cost": 30,
                                             "priority": 1, "time": 1}).status_code == 201
    assert client.post("/v1/jobs/start-next", json={"time": 2}).status_code == 200
    key = {"Idempotency-Key": "done-1"}
    done = client.post("/v1/jobs/j1/complete", json={"success": False, "refund_fraction": None,
                                                     "time": 3}, headers=key)
    assert (done.status_code, done.json()) == (200, {"job": "j1", "state": "failed",
                                                     "charged": 0})
    at = head(client)
    for retry in ({"success": False, "time": 3},
                  {"success": False, "refund_fraction": 1.0, "time": 3}):
        again = client.post("/v1/jobs/j1/complete", json=retry, headers=key)
        assert (again.status_code, again.json()) == (200, done.json()), retry
    assert head(client) == at
    batch = client.post("/v1/events", json={"events": [
        {"type": "start", "job": "j2", "time": 4},
        {"type": "complete", "job": "j2", "success": False, "refund_fraction": None,
         "time": 5}]})
    assert batch.status_code == 200, batch.text
    assert client.get("/v1/jobs/j2").json()["charged"] == 0


@pytest.mark.parametrize("fast_routes", [True, False], ids=["fast", "fastapi"])
def test_a_batch_that_spells_out_a_default_is_the_same_batch_with_the_same_answer(
        tmp_path: Path, clock: Clock, fast_routes: bool) -> None:
    """As for a single write: a batch whose records would record the same events (a
    default written out, a time as ISO-8601 text, the id the key would give written out)
    is the first batch's retry under its key, in this process and after a restart; a
    record that would record another event is 409. A binding made by an earlier release,
    whose digest is of the body as sent, still answers the body it was made from."""
    import hashlib
    import sqlite3

    path = tmp_path / "journal.db"
    url = f"sqlite:///{path}"
    grant = {"type": "grant", "account": "a", "amount": 5, "time": 80}
    consume = {"type": "consume", "account": "a", "amount": 1, "time": 81, "id": "own"}
    first_body = {"events": [grant, consume]}
    spelled = [{"events": [{**grant, "pool": "general", "priority": 50, "expiry": None,
                            "memo": None}, consume]},
               {"events": [{**grant, "time": "1970-01-01T00:01:20Z"}, consume]},
               {"events": [{**grant, "id": "k"}, {**consume, "pool": "general"}]}]
    other = {"events": [{**grant, "priority": 49}, consume]}
    key = {"Idempotency-Key": "k"}

    def start() -> TestClient:
        return TestClient(create_app(url, clock=clock, mount_web=False,
                                     fast_routes=fast_routes))

    with start() as c:
        first = c.post("/v1/events", json=first_body, headers=key)
        assert first.json() == {"appended": 2, "already_present": 0, "positions": [1, 2]}
        for body in spelled:
            again = c.post("/v1/events", json=body, headers=key)
            assert (again.status_code, again.json()) == (200, first.json()), body
        problem(c.post("/v1/events", json=other, headers=key), 409)
    with start() as c:
        for body in [first_body, *spelled]:
            again = c.post("/v1/events", json=body, headers=key)
            assert (again.status_code, again.json()) == (200, first.json()), body
        problem(c.post("/v1/events", json=other, headers=key), 409)
        assert head(c) == 2
    legacy = hashlib.sha256(json.dumps(first_body["events"], sort_keys=True).encode()
                            ).hexdigest()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE request_keys SET fingerprint = ? WHERE key = 'k'", (legacy,))
    db.close()
    with start() as c:
        again = c.post("/v1/events", json=first_body, headers=key)
        assert (again.status_code, again.json()) == (200, first.json())
        problem(c.post("/v1/events", json=other, headers=key), 409)
        assert head(c) == 2


def test_a_retry_without_time_is_the_same_request_whatever_time_its_event_holds(
        db_url: str, clock: Clock) -> None:
    """A live write's retry comes after the clock moved on: without `time` it matches
    the recorded event at any time, also one first sent with a time; a retry naming
    another time than the event's is another request (409)."""
    live, given = {"Idempotency-Key": "use-live"}, {"Idempotency-Key": "use-given"}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        c.post("/v1/accounts/a/grants", json={"amount": 5, "time": 0})
        first_live = c.post("/v1/accounts/a/usage", json={"amount": 1}, headers=live)
        assert first_live.status_code == 201 and first_live.json()["time"] == 100
        first_given = c.post("/v1/accounts/a/usage", json={"amount": 1, "time": 7},
                             headers=given)
        at = head(c)
        clock.now = 200
        for body, key, first in (({"amount": 1}, live, first_live),
                                 ({"amount": 1, "time": 100}, live, first_live),
                                 ({"amount": 1}, given, first_given)):
            again = c.post("/v1/accounts/a/usage", json=body, headers=key)
            assert (again.status_code, again.json()) == (201, first.json()), body
        problem(c.post("/v1/accounts/a/usage", json={"amount": 1, "time": 200},
                       headers=live), 409)
        assert head(c) == at
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        for key, first in ((live, first_live), (given, first_given)):
            again = c.post("/v1/accounts/a/usage", json={"amount": 1}, headers=key)
            assert (again.status_code, again.json()) == (201, first.json())
        assert head(c) == at


def test_a_write_without_a_key_is_recorded_whatever_ids_others_took(
        db_url: str, clock: Clock, tmp_path: Path) -> None:
    # The id the service gives a write without a key is the event's idempotency key:
    # had a client (or another writer) already taken it, the write would be a 409 its
    # sender never asked for, or, with the same content, a retry that appends nothing.
    # So it must not be one a client can foresee from the ids earlier answers showed.
    from typer.testing import CliRunner

    from tools.cli import app

    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as client:
        given = client.post("/v1/accounts/a/grants", json={"amount": 100}).json()["id"]
        stem, _, number = given.rpartition("-")
        foreseen = [f"{stem}-{int(number) + n}" for n in range(1, 7)] if number.isdigit() \
            else [f"{given}-{n}" for n in range(1, 7)]
        # Another writer's import of the very reports the next keyless writes will make,
        # under the first three; a worker's usage reports under the last three.
        lines = tmp_path / "other.jsonl"
        lines.write_text("".join(
            json.dumps({"type": "consume", "account": "a", "amount": 2, "time": clock.now,
                        "id": key}) + "\n" for key in foreseen[:3]))
        imported = CliRunner().invoke(app, ["--db", db_url, "import", str(lines)])
        assert imported.exit_code == 0, imported.stderr
        for key in foreseen[3:]:
            r = client.post("/v1/accounts/a/usage", json={"amount": 1},
                            headers={"Idempotency-Key": key})
            assert r.status_code == 201, r.text
        for amount in (2, 2, 2, 5, 5, 5):
            at = head(client)
            r = client.post("/v1/accounts/a/usage", json={"amount": amount})
            assert r.status_code == 201, r.text
            assert r.json()["id"] not in foreseen and r.json()["position"] == at + 1
        # 100 granted, 3 x 2 and 3 x 1 reported by the others, 3 x 2 and 3 x 5 here.
        assert client.get("/v1/accounts/a/balance").json()["balance"] == 100 - 9 - 21


def test_a_start_under_a_used_key_answers_as_it_first_did(client: TestClient,
                                                           clock: Clock) -> None:
    setup_account(client)
    key = {"Idempotency-Key": "poll-1"}
    assert client.post("/v1/jobs/start-next", json={}, headers=key).status_code == 204
    submit = client.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                           "priority": 1, "time": 100})
    assert submit.status_code == 201
    at = head(client)
    # The same request again: 204 again, though j1 could start now; nothing appended.
    again = client.post("/v1/jobs/start-next", json={}, headers=key)
    assert (again.status_code, again.content) == (204, b"")
    assert head(client) == at
    # A key that started a job, sent with another body that would start nothing: 409.
    clock.now = 200
    started = client.post("/v1/jobs/start-next", json={}, headers={"Idempotency-Key": "go"})
    assert started.status_code == 200 and started.json()["job"] == "j1"
    body = problem(client.post("/v1/jobs/start-next", json={"time": 99},
                               headers={"Idempotency-Key": "go"}), 409)
    assert "'go' is already recorded" in body["detail"]
    retry = client.post("/v1/jobs/start-next", json={}, headers={"Idempotency-Key": "go"})
    assert (retry.status_code, retry.json()) == (200, started.json())
    assert head(client) == at + 1


def test_a_start_that_found_nothing_answers_204_again_after_a_restart(
        database_url: str, clock: Clock) -> None:
    """A start-next that found nothing records no event, but binds its key in the
    journal: after a restart (or on another replica) its retry is `204` again, though a
    job could start now, and the key with another body, or under another request, is
    `409`; nothing is appended."""
    from tools.service import create_app

    key = {"Idempotency-Key": "poll-1"}
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        setup_account(c)
        assert c.post("/v1/jobs/start-next", json={}, headers=key).status_code == 204
        assert c.post("/v1/jobs/start-next", json={"time": 5},
                      headers={"Idempotency-Key": "poll-2"}).status_code == 204
        assert c.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                        "priority": 1, "time": 10}).status_code == 201
        at = head(c)
    clock.now = 100
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        again = c.post("/v1/jobs/start-next", json={}, headers=key)
        assert (again.status_code, again.content) == (204, b"")
        timed = c.post("/v1/jobs/start-next", json={"time": 5},
                       headers={"Idempotency-Key": "poll-2"})
        assert timed.status_code == 204
        for path, body in (("/v1/jobs/start-next", {"time": 50}),
                           ("/v1/accounts/a/usage", {"amount": 1}),
                           ("/v1/events", {"events": [{"type": "grant", "account": "a",
                                                       "amount": 1, "time": 1,
                                                       "id": "g-9"}]})):
            refused = problem(c.post(path, json=body, headers=key), 409)
            assert refused["type"].endswith("idempotency-conflict"), refused
            assert "poll-1" in refused["detail"] and "start-next" in refused["detail"]
        assert head(c) == at
        assert c.get("/v1/jobs/j1").json()["state"] == "pending"
        started = c.post("/v1/jobs/start-next", json={}, headers={"Idempotency-Key": "go"})
        assert started.status_code == 200 and started.json()["job"] == "j1"


def test_a_cancel_that_recorded_nothing_binds_its_key(database_url: str,
                                                       clock: Clock) -> None:
    """A keyed cancel of a job cancelled before records nothing, but its key is taken:
    another request under it is `409`, in this process and after a restart, and the
    cancel's own retry answers as before; nothing is appended."""
    from tools.service import create_app

    key = {"Idempotency-Key": "cancel-2"}
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        setup_account(c)
        assert c.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                        "priority": 1, "time": 3}).status_code == 201
        assert c.post("/v1/jobs/j1/cancel", json={"time": 4}).status_code == 200
        again = c.post("/v1/jobs/j1/cancel", json={"time": 4}, headers=key)
        assert (again.status_code, again.json()) == (200, {"job": "j1", "state": "cancelled"})
        at = head(c)
        refused = problem(c.post("/v1/accounts/a/usage", json={"amount": 5, "time": 5},
                                 headers=key), 409)
        assert "cancel of job 'j1'" in refused["detail"]
        assert head(c) == at
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        for path, body in (("/v1/accounts/a/usage", {"amount": 5, "time": 5}),
                           ("/v1/jobs/j1/cancel", {"time": 9})):
            problem(c.post(path, json=body, headers=key), 409)
        retry = c.post("/v1/jobs/j1/cancel", json={"time": 4}, headers=key)
        assert (retry.status_code, retry.json()) == (200, {"job": "j1", "state": "cancelled"})
        assert head(c) == at


def test_a_start_that_found_nothing_answers_204_on_a_replica_another_writer_moved_on(
        database_url: str, clock: Clock) -> None:
    """A replica that sees another writer's events first decides under the keys: the
    retry of a start that found nothing is answered from its binding there too."""
    from tools.service import create_app

    key = {"Idempotency-Key": "poll-1"}
    with (TestClient(create_app(database_url, clock=clock, mount_web=False)) as one,
          TestClient(create_app(database_url, clock=clock, mount_web=False)) as two):
        setup_account(two)
        assert two.post("/v1/jobs/start-next", json={}, headers=key).status_code == 204
        for job in ("j1", "j2"):  # the first replica has seen none of this
            assert two.post("/v1/jobs", json={"job": job, "account": "a", "cost": 1,
                                              "priority": 1, "time": 10}).status_code == 201
        for replica in (one, two):
            again = replica.post("/v1/jobs/start-next", json={}, headers=key)
            assert (again.status_code, again.content) == (204, b"")
            problem(replica.post("/v1/accounts/a/usage", json={"amount": 1}, headers=key),
                    409)
        assert one.get("/v1/jobs/j1").json()["state"] == "pending"




def test_a_key_bound_by_a_replica_after_another_looked_it_up_gets_one_answer(
        database_url: str, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica decides a batch ahead of its transaction, on a look-up of its keys made
    before it holds its locks. Another replica's start that found nothing may bind the
    key in between (appending nothing: the head does not move). The batch must not then
    record a start under that key as well, which would give the key two answers."""
    from eventstore import LookUp
    from tools.service import create_app
    from tools.service import ledger as service_ledger

    # `one` reads a job `two` submitted: a read sees another replica's commits once
    # its last look is older than the freshness window, which a fast run stays within.
    monkeypatch.setattr(service_ledger, "READ_FRESHNESS", 0.0)

    key = {"Idempotency-Key": "poll-1"}
    with (TestClient(create_app(database_url, clock=clock, mount_web=False)) as one,
          TestClient(create_app(database_url, clock=clock, mount_web=False)) as two):
        setup_account(one)
        assert one.post("/v1/jobs/start-next", json={}, headers=key).status_code == 204
        assert two.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                          "priority": 1, "time": 10}).status_code == 201
        service = two.app.state.ledger  # type: ignore[attr-defined]
        real = service.journal.look_up
        calls: list[object] = []

        def looked_up_before_the_binding(ids: Any, keys: Any = ()) -> LookUp:
            found: LookUp = real(ids, keys)
            calls.append(keys)
            if len(calls) == 1:  # the look-up made ahead of the batch's locks
                return LookUp(found.head, found.recorded, frozenset())
            return found

        service.journal.look_up = looked_up_before_the_binding
        service._defer_after = 0.0  # decide ahead now, though it caught up on `one`
        answer = two.post("/v1/jobs/start-next", json={}, headers=key)
        assert calls, "the batch was not decided ahead"
        assert (answer.status_code, answer.content) == (204, b"")
        for replica in (one, two):
            assert replica.get("/v1/jobs/j1").json()["state"] == "pending"
            again = replica.post("/v1/jobs/start-next", json={}, headers=key)
            assert (again.status_code, again.content) == (204, b"")

def test_a_key_of_an_event_recorded_before_the_job_is_a_conflict_not_an_unknown_job(
        client: TestClient) -> None:
    """Decided as the keyed event was, the job did not exist yet: the request is not
    that event's retry (409), and the job, which exists, is not reported unknown."""
    client.post("/v1/accounts", json={"account": "a"})
    grant = client.post("/v1/accounts/a/grants", json={"amount": 100, "time": 1},
                        headers={"Idempotency-Key": "g"})
    assert grant.status_code == 201
    submit = {"job": "j1", "account": "a", "cost": 10, "priority": 1, "time": 2}
    assert client.post("/v1/jobs", json=submit).json()["state"] == "pending"
    at = head(client)
    for path, body in (("/v1/jobs/j1/cancel", {"time": 3}),
                       ("/v1/jobs/j1/complete", {"success": True, "time": 3})):
        answer = problem(client.post(path, json=body, headers={"Idempotency-Key": "g"}),
                         409)
        assert answer["type"].endswith("idempotency-conflict"), answer
        assert "'g' is already recorded" in answer["detail"]
    assert head(client) == at
    assert client.get("/v1/jobs/j1").json()["state"] == "pending"


def test_idempotency_survives_a_restart(db_url: str, clock: Clock) -> None:
    from tools.service import create_app

    body = {"amount": 7, "time": 3}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        setup_account(c)
        first = c.post("/v1/accounts/a/usage", json=body, headers={"Idempotency-Key": "u"})
        events = c.post("/v1/events", json={"events": [
            {"type": "grant", "account": "b", "amount": 1, "time": 1},
            {"type": "grant", "account": "b", "amount": 2, "time": 2}]},
            headers={"Idempotency-Key": "batch"})
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        at = head(c)
        again = c.post("/v1/accounts/a/usage", json=body, headers={"Idempotency-Key": "u"})
        assert again.json() == first.json()
        repeat = c.post("/v1/events", json={"events": [
            {"type": "grant", "account": "b", "amount": 1, "time": 1},
            {"type": "grant", "account": "b", "amount": 2, "time": 2}]},
            headers={"Idempotency-Key": "batch"})
        assert repeat.json() == events.json()
        assert head(c) == at



def test_a_batch_under_a_writes_key_holding_that_writes_event_is_a_conflict(
        db_url: str, clock: Clock) -> None:
    # The batch's record takes the key as its id and holds what the grant recorded: it
    # must neither claim the grant's event as appended nor take the grant's key over.
    grant = {"amount": 100, "time": 1000}
    record = {"type": "grant", "account": "acme", "amount": 100, "time": 1000}
    key = {"Idempotency-Key": "inv-1"}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        first = c.post("/v1/accounts/acme/grants", json=grant, headers=key)
        assert first.status_code == 201, first.text
        at = head(c)
        body = problem(c.post("/v1/events", json={"events": [record]}, headers=key), 409)
        assert "inv-1" in body["detail"] and head(c) == at
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        again = c.post("/v1/accounts/acme/grants", json=grant, headers=key)
        assert (again.status_code, again.json()) == (201, first.json())
        problem(c.post("/v1/events", json={"events": [record]}, headers=key), 409)
        assert head(c) == at

def test_events_all_or_nothing(client: TestClient) -> None:
    bad = client.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 10},
        {"type": "consume", "account": "a", "amount": -1, "time": 3},
        {"type": "nonsense"},
    ]})
    body = problem(bad, 422)
    assert [e["index"] for e in body["errors"]] == [1, 2]
    assert head(client) == 0
    good = client.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 10, "id": "g"},
        {"type": "consume", "account": "a", "amount": 70, "time": 3},
    ]})
    assert good.status_code == 200
    assert good.json() == {"appended": 2, "already_present": 0, "positions": [1, 2]}
    again = client.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 10, "id": "g"},
    ]})
    assert again.json() == {"appended": 0, "already_present": 1, "positions": [1]}
    problem(client.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 99, "time": 0, "id": "g"}]}), 409)
    problem(client.post("/v1/events", json={"events": []}), 422)
    problem(client.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 1, "time": 9_999_999_999}]}), 422)


def test_verify_counts_every_event_of_the_journal_reversed_ones_included(
        client: TestClient) -> None:
    """`"events"` is the journal's size whose chain was checked, as `gpu-credits verify`
    says it: a reversed event and its reversal count, though the fold leaves one out."""
    sent = client.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 100, "time": 0, "id": "g1"},
        {"type": "consume", "account": "a", "amount": 5, "time": 1, "id": "c1"},
    ]})
    assert sent.status_code < 300, sent.text
    undone = client.post("/v1/events", json={"events": [
        {"type": "reverse", "event": "c1", "time": 1, "reason": "x"}]})
    assert undone.status_code < 300, undone.text
    assert head(client) == 3
    answer = client.post("/v1/journal/verify").json()
    assert answer == {"ok": True, "events": 3}


def test_a_refused_batch_names_every_bad_event_whatever_is_wrong_with_it(
        client: TestClient) -> None:
    """A field refused, an element that is no object, a reversal of an event that is
    nowhere: all named at once, by index, as `import` names every bad line."""
    good = {"type": "grant", "account": "a", "amount": 1, "time": 1}
    bad = client.post("/v1/events", json={"events": [
        good,
        {"type": "consume", "account": "a", "amount": 0, "time": 2},
        "not an object",
        {"type": "reverse", "event": "nowhere", "time": 7, "reason": "x"},
        good,
    ]})
    body = problem(bad, 422)
    assert [e["index"] for e in body["errors"]] == [1, 2, 3]
    assert "expected a JSON object, got str" in body["errors"][1]["detail"]
    assert "'nowhere'" in body["errors"][2]["detail"]
    assert all(f"event {i}:" in body["detail"] for i in (1, 2, 3))
    assert head(client) == 0


@pytest.mark.parametrize("key", [None, "k"])
def test_an_id_used_twice_in_a_batch_names_the_other_event_by_its_index(
        client: TestClient, key: str | None) -> None:
    """A batch's events are named by index from 0, not by `import`'s lines from 1: "line
    1" beside "event 1" read as the event itself."""
    grant = {"type": "grant", "account": "a", "time": 1, "id": "x"}
    bad = client.post("/v1/events", headers={} if key is None else {"Idempotency-Key": key},
                      json={"events": [{**grant, "amount": 1}, {**grant, "amount": 2}]})
    body = problem(bad, 422)
    assert body["errors"] == [{"index": 1,
                               "detail": "id 'x' is used by event 0 for another event"}]
    assert head(client) == 0


def test_a_refused_batch_shows_a_number_too_large_for_a_float_as_written(
        client: TestClient) -> None:
    # The body's 1e400 is read as an infinite float: the problem names what was sent.
    bad = client.post("/v1/events", headers={"Content-Type": "application/json"},
                      content=b'{"events": [{"type": "account", "account": "a", '
                              b'"max_running": 1e400}]}')
    body = problem(bad, 422)
    assert body["errors"] == [{"index": 0,
                               "detail": "max_running must be an integer, got 1e400 (float)"}]
    assert head(client) == 0


def test_a_record_repeated_in_a_batch_is_appended_once_and_counted_once(
        client: TestClient) -> None:
    """Two equal records with one id are one event, as `import` counts them: the
    repeat is already present, and the answer's counts add up to the records sent."""
    grant = {"type": "grant", "account": "a", "amount": 1, "time": 20, "id": "x"}
    usage = {"type": "consume", "account": "a", "amount": 1, "time": 21, "id": "u"}
    body = {"events": [grant, usage, grant]}
    first = client.post("/v1/events", json=body)
    assert first.json() == {"appended": 2, "already_present": 1, "positions": [1, 2, 1]}
    assert head(client) == 2
    keyed = {"events": [{k: v for k, v in grant.items() if k != "id"}] * 2}
    # Without ids, under a key, the two are the key's first and second events (KEY,
    # KEY/2): two grants.
    sent = client.post("/v1/events", json=keyed, headers={"Idempotency-Key": "k"})
    assert sent.json() == {"appended": 2, "already_present": 0, "positions": [3, 4]}


def test_a_batch_that_grew_another_submit_of_a_job_appends_only_its_new_records(
        client: TestClient) -> None:
    """A batch sent again with one more record, another account's submit of a job whose
    events were recorded before: those records are the same events, already present in
    the stream they were recorded in, as `import` of a file that grew counts them."""
    first = [{"type": "grant", "account": "b", "amount": 30, "time": 0, "id": "g"},
             {"type": "submit", "account": "b", "job": "j", "cost": 5, "priority": 0,
              "time": 13, "id": "s-b"},
             {"type": "start", "job": "j", "time": 14, "id": "st"},
             {"type": "complete", "job": "j", "success": True, "time": 15, "id": "c"}]
    grown = [*first, {"type": "submit", "account": "a", "job": "j", "cost": 0,
                      "priority": 0, "time": 10, "id": "s-a"}]
    assert client.post("/v1/events", json={"events": first}).json()["appended"] == 4
    again = client.post("/v1/events", json={"events": grown})
    assert again.status_code == 200, again.text
    assert again.json() == {"appended": 1, "already_present": 4,
                            "positions": [1, 2, 3, 4, 5]}
    assert head(client) == 5


def test_a_keyed_batch_of_records_with_their_own_ids_after_a_restart(
        db_url: str, clock: Clock) -> None:
    """The key is bound in the journal with the batch's events: after a restart its retry
    is answered as the batch was, and the same key with other records is 409, though
    every record carries its own id and so records nothing of the key."""
    from tools.service import create_app

    grant = {"type": "grant", "account": "a", "amount": 5, "time": 0, "id": "g"}
    other = {"type": "grant", "account": "a", "amount": 7, "time": 1, "id": "h"}
    key = {"Idempotency-Key": "batch-1"}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        first = c.post("/v1/events", json={"events": [grant]}, headers=key)
        assert first.json() == {"appended": 1, "already_present": 0, "positions": [1]}
        assert c.post("/v1/events", json={"events": [grant]}, headers=key).json() == (
            first.json())
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        again = c.post("/v1/events", json={"events": [grant]}, headers=key)
        assert (again.status_code, again.json()) == (200, first.json())
        refused = c.post("/v1/events", json={"events": [other]}, headers=key)
        assert refused.status_code == 409
        assert refused.json()["type"].endswith("idempotency-conflict"), refused.json()
        # Without a key, the same file delivered again counts its records as present.
        unkeyed = c.post("/v1/events", json={"events": [grant]})
        assert unkeyed.json() == {"appended": 0, "already_present": 1, "positions": [1]}
        assert head(c) == 1


def test_a_batch_key_is_bound_also_when_the_batch_appended_nothing(
        db_url: str, clock: Clock) -> None:
    """A keyed batch whose records were all recorded before binds its key all the same:
    its retry is answered `appended: 0` again, and another batch under the key is 409."""
    from tools.service import create_app

    grant = {"type": "grant", "account": "a", "amount": 5, "time": 0, "id": "g"}
    other = {"type": "grant", "account": "a", "amount": 7, "time": 1, "id": "h"}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        assert c.post("/v1/events", json={"events": [grant]}).status_code == 200
        known = c.post("/v1/events", json={"events": [grant]}, headers={"Idempotency-Key": "k"})
        assert known.json() == {"appended": 0, "already_present": 1, "positions": [1]}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        retried = c.post("/v1/events", json={"events": [grant]}, headers={"Idempotency-Key": "k"})
        assert retried.json() == known.json()
        assert c.post("/v1/events", json={"events": [other]},
                      headers={"Idempotency-Key": "k"}).status_code == 409
        assert head(c) == 1


def test_a_batch_under_the_key_of_a_single_write_is_409(client: TestClient) -> None:
    """A key is an event id: a batch whose records carry their own ids, under the key of
    a grant, is another request, refused; under the key of one of its own records (a
    batch sent again with that record's id as its key) it is not."""
    assert client.post("/v1/accounts/a/grants", json={"amount": 5, "time": 0},
                       headers={"Idempotency-Key": "inv-1"}).status_code == 201
    batch = {"events": [{"type": "grant", "account": "a", "amount": 7, "time": 1,
                         "id": "own-1"}]}
    refused = client.post("/v1/events", json=batch, headers={"Idempotency-Key": "inv-1"})
    assert "position 1 (grant on 'a')" in problem(refused, 409)["detail"]
    assert head(client) == 1
    taken = client.post("/v1/events", json=batch, headers={"Idempotency-Key": "own-1"})
    assert taken.json() == {"appended": 1, "already_present": 0, "positions": [2]}


def test_a_single_write_under_the_key_of_a_batch_is_409(database_url: str,
                                                        clock: Clock) -> None:
    """A batch whose records carry their own ids records nothing of its key, but the key
    names that batch (bound in the journal): any single write under it is another
    request, refused and not appended, also after a restart."""
    from tools.service import create_app

    batch = {"events": [{"type": "grant", "account": "a", "amount": 50, "time": 0,
                         "expiry": 1000, "id": "own-1"}]}
    key = {"Idempotency-Key": "batch-1"}
    writes: list[tuple[str, dict[str, Any]]] = [
        ("/v1/accounts", {"account": "b"}),
        ("/v1/accounts/a/grants", {"amount": 50, "time": 0, "expiry": 1000}),
        ("/v1/accounts/a/usage", {"amount": 5, "time": 1}),
        ("/v1/jobs", {"job": "j", "account": "a", "cost": 5, "priority": 1, "time": 1}),
        ("/v1/jobs/start-next", {"time": 2}),
        ("/v1/jobs/j/complete", {"success": True, "time": 3}),
        ("/v1/jobs/j/cancel", {"time": 3}),
    ]
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        assert c.post("/v1/events", json=batch, headers=key).status_code == 200
        assert c.post("/v1/jobs", json=writes[3][1]).status_code == 201
        for path, body in writes:
            refused = problem(c.post(path, json=body, headers=key), 409)
            assert refused["type"].endswith("idempotency-conflict"), (path, refused)
            assert "batch-1" in refused["detail"] and "/v1/events" in refused["detail"]
        assert head(c) == 2
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        for path, body in writes:
            problem(c.post(path, json=body, headers=key), 409)
        assert head(c) == 2
        # The batch's retry is still its own answer.
        assert c.post("/v1/events", json=batch, headers=key).json() == {
            "appended": 1, "already_present": 0, "positions": [1]}


def test_a_single_write_the_same_as_a_batch_s_record_under_its_key_is_still_409(
        client: TestClient) -> None:
    """A batch's record without an id takes the key as its id; a usage report under the
    key that would record that very event is still another request, not its retry."""
    record = {"type": "consume", "account": "a", "amount": 5, "time": 3}
    setup_account(client)
    assert client.post("/v1/events", json={"events": [record]},
                       headers={"Idempotency-Key": "k"}).status_code == 200
    at = head(client)
    refused = problem(client.post("/v1/accounts/a/usage", json={"amount": 5, "time": 3},
                                  headers={"Idempotency-Key": "k"}), 409)
    assert "batch of events" in refused["detail"]
    assert head(client) == at


@pytest.mark.parametrize("kind", ["start", "usage"])
def test_a_key_bound_while_a_batch_decided_ahead_waits_to_be_written_wins(
        database_url: str, clock: Clock, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Another replica binds a key (a start that found nothing, a batch of events) after
    this one decided a batch ahead under the same key, before the batch is written. The
    binding was first: the batch is decided again and answered from it, never written
    as a second answer under the key, and the answers hold after a restart."""
    from eventstore import Journal
    from tools.service import create_app
    from tools.service.batching import BatchJournal, Deferred

    written = BatchJournal.written
    fingerprint = {"start": "start-next:", "usage": "a-batch-of-events"}[kind]

    def another_replica_binds_meanwhile(self: BatchJournal, deferred: Deferred) -> Any:
        if any(event.id == "k" for event in deferred.events):
            with Journal(database_url) as other:
                other.bind_request("k", fingerprint, "null")
        return written(self, deferred)

    def ask(c: TestClient) -> Any:
        if kind == "start":
            return c.post("/v1/jobs/start-next", json={}, headers={"Idempotency-Key": "k"})
        return c.post("/v1/accounts/a/usage", json={"amount": 5},
                      headers={"Idempotency-Key": "k"})

    def check(answer: Any) -> None:
        if kind == "start":
            assert (answer.status_code, answer.content) == (204, b"")
        else:
            problem(answer, 409)

    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        setup_account(c)
        assert c.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                        "priority": 1, "time": 10}).status_code == 201
        at = head(c)
        monkeypatch.setattr(BatchJournal, "written", another_replica_binds_meanwhile)
        check(ask(c))
        monkeypatch.undo()
        assert head(c) == at
    with Journal(database_url) as journal:
        assert journal.get("k") is None
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        check(ask(c))
        assert c.get("/v1/jobs/j1").json()["state"] == "pending"


def test_erasing_a_batch_s_memo_drops_its_key_binding(db_url: str, clock: Clock) -> None:
    """The binding's digest was made from the batch, memo and all: erasing the memo drops
    it, and a retry then counts the batch's records as already present."""
    from eventstore import Journal
    from projections.personal import erase_events
    from tools.service import create_app

    grant = {"type": "grant", "account": "a", "amount": 5, "time": 0, "id": "g",
             "memo": "for Zebulon Quayle"}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        first = c.post("/v1/events", json={"events": [grant]}, headers={"Idempotency-Key": "k"})
        assert first.json() == {"appended": 1, "already_present": 0, "positions": [1]}
    with Journal(db_url) as journal:
        assert journal.request("k") is not None
        erase_events(journal, ["g"], reason="asked to")
        assert journal.request("k") is None and journal.verify() is None
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        again = c.post("/v1/events", json={"events": [grant]}, headers={"Idempotency-Key": "k"})
        assert again.json() == {"appended": 0, "already_present": 1, "positions": [1]}


def test_a_running_service_forgets_a_batch_answer_once_erasure_drops_its_binding(
        db_url: str, clock: Clock) -> None:
    """The answer a process remembers for a keyed batch was the last trace of the erased
    memo: once the binding is gone, a guess sent under the key is no longer told apart
    (409) from the memo itself; it is answered as a restarted process answers it."""
    from eventstore import Journal
    from projections.personal import erase_events
    from tools.service import create_app

    grant = {"type": "grant", "account": "a", "amount": 5, "time": 0, "id": "g",
             "memo": "for Zebulon Quayle"}
    guess = {**grant, "memo": "for Zebedee Quayle"}
    key = {"Idempotency-Key": "k"}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        first = c.post("/v1/events", json={"events": [grant]}, headers=key)
        assert first.json() == {"appended": 1, "already_present": 0, "positions": [1]}
        assert c.post("/v1/events", json={"events": [guess]}, headers=key).status_code == 409
        with Journal(db_url) as journal:
            erase_events(journal, ["g"], reason="asked to")
        again = c.post("/v1/events", json={"events": [guess]}, headers=key)
        assert (again.status_code, again.json()) == (
            200, {"appended": 0, "already_present": 1, "positions": [1]})


@pytest.mark.parametrize("unbound_by", ["export and import", "erasure"])
def test_a_batch_retried_where_its_binding_is_gone_is_decided_from_the_journal(
        tmp_path: Path, clock: Clock, unbound_by: str) -> None:
    """An export does not carry `request_keys`, and an erasure drops the binding of a
    batch that named an erased record. A batch whose records carry their own ids then
    counts them as already present; one whose records took their ids from the key (KEY,
    KEY/2...) is 409, since the journal no longer tells its record under the key from a
    single write's event (whose retry must keep its key); its detail says so, and nothing
    is appended either way."""
    from typer.testing import CliRunner

    from eventstore import Journal
    from projections.personal import erase_events
    from tools.cli import app

    first, other = f"sqlite:///{tmp_path / 'first.db'}", f"sqlite:///{tmp_path / 'other.db'}"
    keyed = {"events": [{"type": "grant", "account": "a", "amount": 5, "time": 0,
                         "memo": "for Zebulon Quayle"},
                        {"type": "consume", "account": "a", "amount": 1, "time": 1}]}
    own = {"events": [{"type": "grant", "account": "a", "amount": 2, "time": 2, "id": "own",
                       "memo": "for Zebulon Quayle"}]}
    with TestClient(create_app(first, clock=clock, mount_web=False)) as c:
        assert c.post("/v1/events", json=keyed, headers={"Idempotency-Key": "k"}).json() == {
            "appended": 2, "already_present": 0, "positions": [1, 2]}
        assert c.post("/v1/events", json=own, headers={"Idempotency-Key": "o"}).json() == {
            "appended": 1, "already_present": 0, "positions": [3]}
    if unbound_by == "erasure":
        with Journal(first) as journal:
            erase_events(journal, ["k", "own"], reason="asked to")
            assert journal.request("k") is None and journal.request("o") is None
        url = first
    else:
        exported = CliRunner().invoke(app, ["--db", first, "export"])
        assert exported.exit_code == 0, exported.output
        (tmp_path / "journal.jsonl").write_text(exported.stdout)
        imported = CliRunner().invoke(app, ["--db", other, "import",
                                            str(tmp_path / "journal.jsonl")])
        assert imported.exit_code == 0, imported.output
        url = other
    with TestClient(create_app(url, clock=clock, mount_web=False)) as c:
        at = head(c)
        again = c.post("/v1/events", json=own, headers={"Idempotency-Key": "o"})
        assert (again.status_code, again.json()) == (
            200, {"appended": 0, "already_present": 1, "positions": [3]})
        refused = problem(c.post("/v1/events", json=keyed, headers={"Idempotency-Key": "k"}),
                          409)
        assert "position 1" in refused["detail"], refused
        assert "binding" in refused["detail"], refused
        assert head(c) == at


def test_a_refused_batch_binds_no_key(db_url: str, clock: Clock) -> None:
    """A 422 appended nothing and bound nothing: the key is free for the corrected batch."""
    from tools.service import create_app

    bad = {"type": "grant", "account": "a", "amount": -5, "time": 0, "id": "g"}
    good = {**bad, "amount": 5}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        assert c.post("/v1/events", json={"events": [bad]},
                      headers={"Idempotency-Key": "k"}).status_code == 422
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        fixed = c.post("/v1/events", json={"events": [good]}, headers={"Idempotency-Key": "k"})
        assert fixed.json() == {"appended": 1, "already_present": 0, "positions": [1]}


@pytest.mark.parametrize("fast_routes", [True, False], ids=["fast", "fastapi"])
def test_a_batch_binding_edited_behind_the_journal_s_back_is_not_answered(
        tmp_path: Path, clock: Clock, fast_routes: bool) -> None:
    """`request_keys` is outside the hash chain, but the positions a batch's answer
    names are in it: a retry after a restart is answered from the binding only when those
    positions hold the batch's records. An answer edited to name other positions, or a
    row forged for a batch never sent, is a 500 naming the key and the mismatch, never an
    answer (a forged "appended" would tell a client its events are recorded)."""
    import hashlib
    import sqlite3

    path = tmp_path / "journal.db"
    url = f"sqlite:///{path}"
    keyed = {"events": [{"type": "grant", "account": "c", "amount": 3, "time": 80},
                        {"type": "consume", "account": "c", "amount": 1, "time": 81}]}
    own = {"events": [{"type": "grant", "account": "c", "amount": 2, "time": 82, "id": "own"}]}
    never = {"events": [{"type": "grant", "account": "c", "amount": 9, "time": 85,
                         "id": "never-sent"}]}
    with TestClient(create_app(url, clock=clock, mount_web=False,
                               fast_routes=fast_routes)) as c:
        assert c.post("/v1/events", json=keyed, headers={"Idempotency-Key": "b1"}).json() == {
            "appended": 2, "already_present": 0, "positions": [1, 2]}
        assert c.post("/v1/events", json=own, headers={"Idempotency-Key": "b2"}).json() == {
            "appended": 1, "already_present": 0, "positions": [3]}
    digest = hashlib.sha256(json.dumps(never["events"], sort_keys=True).encode()).hexdigest()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE request_keys SET answer = ? WHERE key = 'b1'",
                   ('{"already_present":0,"appended":2,"positions":[7,8]}',))
        db.execute("UPDATE request_keys SET answer = ? WHERE key = 'b2'",
                   ('{"already_present":0,"appended":1,"positions":[2]}',))
        db.execute("INSERT INTO request_keys (key, fingerprint, answer, position, recorded_at,"
                   " first_position, last_position) VALUES ('b3', ?, ?, 3, 0, 1, 3)",
                   (digest, '{"already_present":0,"appended":1,"positions":[3]}'))
    db.close()
    with TestClient(create_app(url, clock=clock, mount_web=False,
                               fast_routes=fast_routes)) as c:
        for key, body, named in (("b1", keyed, "[7, 8]"), ("b2", own, "[2]"),
                                 ("b3", never, "[3]")):
            refused = problem(c.post("/v1/events", json=body, headers={"Idempotency-Key": key}),
                              500)
            assert f"Idempotency-Key {key!r}" in refused["detail"], refused
            assert named in refused["detail"] and "request_keys" in refused["detail"], refused
        assert head(c) == 3


def test_a_retry_is_answered_as_the_request_was_even_once_a_late_event_revised_it(
        db_url: str, clock: Clock) -> None:
    """The same key and body answer the same body; the revision is listed apart. A
    process that no longer remembers the answer (after a restart) rebuilds it from the
    journal as known when the request was recorded: the same body again."""
    from tools.service import create_app

    usage = {"amount": 30}
    job = {"job": "j", "account": "a", "cost": 50, "priority": 0}
    late = {"events": [{"type": "grant", "account": "a", "amount": 100, "time": 1,
                        "id": "late"}]}
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        setup_account(c, "a", amount=10)
        used = c.post("/v1/accounts/a/usage", json=usage, headers={"Idempotency-Key": "u"})
        submitted = c.post("/v1/jobs", json=job, headers={"Idempotency-Key": "s"})
        assert used.json()["debt"] == 20 and submitted.json()["accepted"] is False
        assert c.post("/v1/events", json=late).status_code == 200
        assert {r["event_id"] for r in c.get("/v1/revisions").json()["revisions"]} >= {
            "u", "s"}
        for path, body, first, key in [("/v1/accounts/a/usage", usage, used, "u"),
                                       ("/v1/jobs", job, submitted, "s")]:
            again = c.post(path, json=body, headers={"Idempotency-Key": key})
            assert (again.status_code, again.json()) == (first.status_code, first.json())
        assert head(c) == 5
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        for path, body, first, key in [("/v1/accounts/a/usage", usage, used, "u"),
                                       ("/v1/jobs", job, submitted, "s")]:
            rebuilt = c.post(path, json=body, headers={"Idempotency-Key": key})
            assert (rebuilt.status_code, rebuilt.json()) == (first.status_code, first.json())
        # The fold itself says what the late grant changed: the job was accepted after all.
        assert c.get("/v1/jobs/j").json()["state"] == "pending"
        assert c.get("/v1/accounts/a/balance").json()["balance"] == 80
        assert head(c) == 5


def test_late_event_through_events_revises(client: TestClient) -> None:
    client.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 10, "time": 0, "expiry": 100, "id": "g1"},
        {"type": "consume", "account": "a", "amount": 15, "time": 5, "id": "c1"},
    ]})
    late = client.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 10, "time": 1, "expiry": 100, "id": "g2"}]})
    assert late.status_code == 200
    assert client.get("/v1/accounts/a/balance").json()["balance"] == 5
    revs = client.get("/v1/revisions").json()
    assert revs["next"] is None
    assert revs["revisions"][0]["event_id"] == "c1"
    assert revs["revisions"][0]["late_event_id"] == "g2"
    assert revs["revisions"][0]["account"] == "a"
    assert client.post("/v1/accounts", json={"account": "b"}).status_code == 201
    assert client.get("/v1/revisions", params={"account": "b"}).json()["revisions"] == []


def test_reads(client: TestClient) -> None:
    setup_account(client, "a")
    setup_account(client, "b", 50)
    listed = client.get("/v1/accounts").json()
    assert [x["account"] for x in listed] == ["a", "b"]
    assert listed[1]["balance"] == 50
    st = client.get("/v1/accounts/a/statement").json()
    assert st["account"] == "a" and st["closing"]["balance"] == 100
    csv = client.get("/v1/accounts/a/statement", headers={"Accept": "text/csv"})
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.text.splitlines()[0].startswith("time,")
    problem(client.get("/v1/accounts/a/statement", params={"from": 5, "to": 1}), 422)
    page = client.get("/v1/journal", params={"limit": 3}).json()
    assert [e["position"] for e in page["events"]] == [1, 2, 3] and page["next"] == 3
    rest = client.get("/v1/journal", params={"after": 3}).json()
    assert [e["position"] for e in rest["events"]] == [4] and rest["next"] is None
    assert {"id", "type", "position", "recorded_at"} <= set(rest["events"][0])
    h = client.get("/v1/journal/head").json()
    assert h["position"] == 4 and len(h["hash"]) == 64
    ok = client.post("/v1/journal/verify", json={"anchor": f"{h['position']}:{h['hash']}"})
    assert ok.json()["ok"] is True and ok.json()["events"] == 4
    # As `verify --anchor` reads it: the hash in either case, spaces around it.
    shouted = f" {h['position']}:{h['hash'].upper()} "
    assert client.post("/v1/journal/verify", json={"anchor": shouted}).json()["ok"] is True
    wrong = client.post("/v1/journal/verify", json={"anchor": f"2:{'0' * 64}"}).json()
    assert wrong["ok"] is False and wrong["first_bad_position"] == 2
    past = client.post("/v1/journal/verify", json={"anchor": f"9:{h['hash']}"}).json()
    assert past["ok"] is False
    problem(client.post("/v1/journal/verify", json={"anchor": "nonsense"}), 422)
    assert client.post("/v1/journal/verify").json()["ok"] is True
    problem(client.get("/v1/accounts/a/balance", params={"at": "yesterday"}), 422)
    problem(client.get("/v1/accounts/a/balance", params={"as_known_at": "-1"}), 422)


def test_operations(client: TestClient) -> None:
    assert client.get("/healthz").json()["status"] == "ok"
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    before = ready.json()
    setup_account(client)
    after = client.get("/readyz").json()
    # The writer's running totals: two more decisions, in one batch each, and the time
    # they took (the writes of batches decided ahead on the committer's thread).
    assert after["decisions"] - before["decisions"] == 2
    assert after["batches"] - before["batches"] == 2
    assert after["decide_seconds"] > before["decide_seconds"] >= 0
    assert after["write_seconds"] > before["write_seconds"] >= 0
    assert after["linger_seconds"] >= before["linger_seconds"] >= 0
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    paths = doc["paths"]
    for path, method in [("/v1/events", "post"), ("/v1/accounts", "post"),
                         ("/v1/accounts/{account}/grants", "post"),
                         ("/v1/accounts/{account}/usage", "post"), ("/v1/jobs", "post"),
                         ("/v1/jobs/start-next", "post"), ("/v1/jobs/{job}/complete", "post"),
                         ("/v1/jobs/{job}/cancel", "post"), ("/v1/accounts", "get"),
                         ("/v1/accounts/{account}/balance", "get"),
                         ("/v1/accounts/{account}/statement", "get"),
                         ("/v1/jobs/{job}", "get"), ("/v1/revisions", "get"),
                         ("/v1/journal", "get"), ("/v1/journal/head", "get"),
                         ("/v1/journal/verify", "post")]:
        assert method in paths[path], (path, method)
    assert client.get("/docs").status_code == 200
    problem(client.get("/v1/nothing-here"), 404)


def test_a_retry_answered_in_this_process_rebuilds_nothing(client: TestClient,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    from projections.session import LedgerSession

    setup_account(client)
    key = {"Idempotency-Key": "sub-r"}
    body = {"job": "jr", "account": "a", "cost": 5, "priority": 1}
    first = client.post("/v1/jobs", json=body, headers=key)
    use = client.post("/v1/accounts/a/usage", json={"amount": 3},
                      headers={"Idempotency-Key": "use-r"})
    at = head(client)

    def refold(*_: Any) -> Any:
        raise AssertionError("a remembered answer refolded the account")

    monkeypatch.setattr(LedgerSession, "_state_before", refold)
    assert client.post("/v1/jobs", json=body, headers=key).json() == first.json()
    again = client.post("/v1/accounts/a/usage", json={"amount": 3},
                        headers={"Idempotency-Key": "use-r"})
    assert (again.status_code, again.json()) == (201, use.json())
    monkeypatch.undo()
    # Another command under a remembered key is still a conflict, and appends nothing.
    problem(client.post("/v1/jobs", json={**body, "cost": 6}, headers=key), 409)
    problem(client.post("/v1/accounts/a/usage", json={"amount": 4},
                        headers={"Idempotency-Key": "use-r"}), 409)
    assert head(client) == at


@pytest.mark.parametrize(("method", "path", "allowed"), [
    # HEAD with GET: it is answered wherever GET is.
    ("DELETE", "/v1/accounts", "GET, HEAD, POST"),
    ("PUT", "/v1/journal/head", "GET, HEAD"),
    ("GET", "/v1/journal/verify", "POST"),
    ("DELETE", "/v1/accounts/a/balance", "GET, HEAD"),
    # Not the GET of a job so named: the path's own methods.
    ("OPTIONS", "/v1/jobs/start-next", "POST"),
    ("PUT", "/v1/jobs/j-1/complete", "POST"),
])
def test_a_method_a_path_does_not_take_is_405_naming_those_it_takes(
        client: TestClient, method: str, path: str, allowed: str) -> None:
    """RFC 9110: a 405 says, in `Allow`, which methods the path does take."""
    refused = client.request(method, path)
    body = problem(refused, 405)
    assert refused.headers["allow"] == allowed, body


def test_revisions_of_an_unknown_account_are_404_not_an_empty_list(client: TestClient) -> None:
    """A misspelt account must not read as "no late event changed anything"."""
    setup_account(client, "a")
    assert client.get("/v1/revisions", params={"account": "a"}).json() == {
        "revisions": [], "next": None, "seen": 0}
    body = problem(client.get("/v1/revisions", params={"account": "nobody"}), 404)
    assert body["type"].endswith("/unknown-account") and "nobody" in body["detail"]


def test_a_new_name_padded_with_spaces_is_422_and_appends_nothing(client: TestClient) -> None:
    setup_account(client)
    before = head(client)
    for path, body in (("/v1/accounts", {"account": " b"}),
                       ("/v1/accounts/%20b/grants", {"amount": 5, "time": 1}),
                       ("/v1/accounts/a/grants", {"amount": 5, "time": 1, "pool": "h100 "}),
                       ("/v1/accounts/a/usage", {"amount": 1, "time": 1, "pool": " "}),
                       ("/v1/jobs", {"job": "j1 ", "account": "a", "cost": 1,
                                     "priority": 1})):
        detail = problem(client.post(path, json=body), 422)["detail"]
        assert "whitespace" in detail, (path, detail)
    assert head(client) == before
    inside = client.post("/v1/jobs", json={"job": "j 1", "account": "a", "cost": 1,
                                           "priority": 1})
    assert inside.status_code == 201 and inside.json()["job"] == "j 1"


def test_a_bad_name_is_named_by_the_field_the_request_sent(client: TestClient) -> None:
    # The service's fields are `account` and `job`, not the facade's `account_id` and
    # `job_id`, in a body and in a path alike.
    setup_account(client)
    before = head(client)
    for path, body, field in (
            ("/v1/accounts", {"account": "a\u200fb"}, "account"),
            ("/v1/jobs", {"job": "j\u200f", "account": "a", "cost": 1, "priority": 1}, "job"),
            ("/v1/jobs", {"job": "j", "account": "a\u00a0", "cost": 1, "priority": 1},
             "account"),
            ("/v1/jobs/j%E2%80%8F/cancel", {}, "job"),
            ("/v1/jobs/j%E2%80%8F/complete", {"success": True}, "job")):
        detail = problem(client.post(path, json=body), 422)["detail"]
        assert detail.startswith(f"{field} must be printable text"), (path, detail)
    assert head(client) == before


def test_a_new_name_in_decomposed_unicode_is_422_naming_the_composed_one(
        client: TestClient) -> None:
    # "cafe" and a combining accent looks exactly like "caf\u00e9": another account
    # nobody could tell apart.
    setup_account(client)
    before = head(client)
    for path, body in (("/v1/accounts", {"account": "cafe\u0301"}),
                       ("/v1/accounts/cafe%CC%81/grants", {"amount": 5, "time": 1}),
                       ("/v1/accounts/a/usage", {"amount": 1, "time": 1,
                                                 "pool": "cafe\u0301"}),
                       ("/v1/jobs", {"job": "cafe\u0301", "account": "a", "cost": 1,
                                     "priority": 1})):
        detail = problem(client.post(path, json=body), 422)["detail"]
        assert "NFC" in detail and "write it as 'caf\u00e9'" in detail, (path, detail)
    assert head(client) == before


def test_live_job_writes_after_a_far_event_are_refused_like_grants(db_url: str,
                                                                    clock: Clock) -> None:
    # A far event that stands (written by a caller that allowed it) would carry every
    # later live decision to its time: each write without a time says so instead.
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as first:
        setup_account(first)
        assert first.post("/v1/jobs", json={"job": "run", "account": "a", "cost": 1,
                                            "priority": 1, "time": 5}).status_code == 201
    Corrections(db_url, allow_far_times=True).consume("a", 1, at=1796083200000,
                                                      event_id="u-ms")
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as client:
        before = head(client)
        for path, body in (("/v1/accounts", {"account": "b"}),
                           ("/v1/jobs", {"job": "j1", "account": "a", "cost": 1,
                                         "priority": 1}),
                           ("/v1/jobs/start-next", {}),
                           ("/v1/jobs/run/cancel", {}),
                           ("/v1/accounts/a/grants", {"amount": 5})):
            detail = problem(client.post(path, json=body), 422)["detail"]
            assert "latest event time on the timeline, 1796083200000" in detail, path
            assert f"(position {before})" in detail and "reverse that event" in detail
        assert head(client) == before
        # A time given explicitly is the caller's to choose.
        assert client.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                             "priority": 1, "time": 10}).status_code == 201
    with TestClient(create_app(db_url, clock=clock, mount_web=False,
                               allow_far_times=True)) as allowed:
        late = allowed.post("/v1/jobs/run/cancel", json={})
        assert late.status_code == 200, late.text


def test_opening_an_account_below_its_running_jobs_is_409(client: TestClient) -> None:
    assert client.post("/v1/accounts/a/grants", json={"amount": 100, "time": 0}).status_code == 201
    for job in ("j1", "j2"):
        assert client.post("/v1/jobs", json={"job": job, "account": "a", "cost": 1,
                                             "priority": 1}).status_code == 201
        assert client.post("/v1/jobs/start-next", json={}).status_code == 200
    before = head(client)
    detail = problem(client.post("/v1/accounts", json={"account": "a", "max_running": 1}),
                     409)["detail"]
    assert "runs 2 jobs, more than the cap of 1" in detail
    assert head(client) == before


@pytest.mark.parametrize(("path", "headers", "named"), [
    ("/v1/accounts/caf%E9/grants", {}, "not UTF-8"),
    ("/v1/jobs/%FF/cancel", {}, "not UTF-8"),
    ("/v1/accounts/a/grants%0A", {}, "control character (U+000A)"),
    ("/v1/accounts/a%0Ab/grants", {}, "control character (U+000A)"),
    ("/v1/jobs/j%09/cancel", {}, "control character (U+0009)"),
    ("/v1/accounts/a/grants", [("Idempotency-Key", "k1"), ("Idempotency-Key", "k2")],
     "sent 2 times"),
    ("/v1/accounts/a/grants", {"Idempotency-Key": "café".encode()}, "not ASCII"),
])
def test_a_request_the_server_would_read_ambiguously_is_422(
        client: TestClient, path: str, headers: Any, named: str) -> None:
    """Read as sent, `caf%E9` and `caf%E8` would both name `caf\\ufffd`, and a UTF-8 key
    another id: refused, nothing appended."""
    at = head(client)
    body = problem(client.post(path, json={"amount": 5, "time": 1}, headers=headers), 422)
    assert named in body["detail"]
    assert head(client) == at
    assert client.get("/accounts/caf%E9").status_code == 422  # the web view too


def test_retries_elsewhere_after_the_jobs_submit_was_reversed_answer_as_told(
        database_url: str, clock: Clock) -> None:
    """A start and a completion retried after a restart, once the job's submit has been
    reversed: the same status and body as first told (the job has left the timeline)."""
    from tools.service import create_app

    calls = [("/v1/jobs/start-next", "st-1", {"time": 11}),
             ("/v1/jobs/j1/complete", "done-1", {"success": True, "time": 12})]
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        setup_account(c)
        assert c.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 1,
                                        "priority": 1, "time": 10},
                      headers={"Idempotency-Key": "sub-j1"}).status_code == 201
        told = [c.post(path, json=body, headers={"Idempotency-Key": key})
                for path, key, body in calls]
        assert [r.status_code for r in told] == [200, 200]
        assert c.post("/v1/events", json={"events": [
            {"type": "reverse", "event": "sub-j1", "time": 13, "reason": "twice"}]}
        ).status_code == 200
        at = head(c)
    with TestClient(create_app(database_url, clock=clock, mount_web=False)) as c:
        again = [c.post(path, json=body, headers={"Idempotency-Key": key})
                 for path, key, body in calls]
        assert [(r.status_code, r.json()) for r in again] == [
            (r.status_code, r.json()) for r in told]
        assert head(c) == at


def test_every_route_refuses_a_query_parameter_it_does_not_take(client: TestClient) -> None:
    """A misspelt parameter is a 422 naming it and those the route takes (the ones the
    OpenAPI document declares), on every /v1 operation, before anything is decided; a
    body's unknown field is refused the same way."""
    setup_account(client)
    before = head(client)
    operations = [(method.upper(), path, [p["name"] for p in op.get("parameters", [])
                                          if p["in"] == "query"])
                  for path, ops in client.get("/openapi.json").json()["paths"].items()
                  for method, op in ops.items() if path.startswith("/v1/")]
    assert len(operations) >= 16
    for method, template, declared in operations:
        path = template.replace("{account}", "a").replace("{job}", "j1")
        route = f"{method} {template}"
        for query in ({"as_knwon_at": "1"}, {**dict.fromkeys(declared[:1], "1"), "x": ""}):
            answer = client.request(method, path, params=query, json={"amount": 1})
            misspelt = next(name for name in query if name not in declared)
            takes = ", ".join(declared) or "no query parameters"
            assert problem(answer, 422)["detail"] == (
                f"unknown query parameter {misspelt!r} for {route}: "
                f"it takes {takes}"), route
    assert head(client) == before
    both = client.get("/v1/accounts/a/balance", params={"at": 1, "x": 1, "y": 2})
    assert problem(both, 422)["detail"] == (
        "unknown query parameters 'x', 'y' for GET /v1/accounts/{account}/balance: "
        "it takes at, as_known_at")
    # The parameters a route takes still answer, and the paths no route answers are 404.
    assert client.get("/v1/accounts/a/balance", params={"at": 1,
                                                         "as_known_at": 2}).status_code == 200
    assert client.get("/v1/journal", params={"after": 0, "limit": 1}).status_code == 200
    assert client.get("/v1/nowhere", params={"x": 1}).status_code == 404


def test_a_query_parameter_given_twice_is_refused(client: TestClient) -> None:
    """Only one of the values would be read: `?at=5&at=900` answers neither silently."""
    setup_account(client)
    for path, name in (("/v1/accounts/a/balance", "at"), ("/v1/journal", "after"),
                       ("/v1/revisions", "limit")):
        answer = client.get(f"{path}?{name}=1&{name}=2")
        route = path.replace("/a/", "/{account}/")
        assert problem(answer, 422)["detail"] == (
            f"query parameter {name!r} given 2 times for GET {route}: give it once")
        assert client.get(f"{path}?{name}=1").status_code == 200


def test_a_body_over_32_mib_is_413_as_the_document_says(client: TestClient) -> None:
    """The limits of a batch: a body over 32 MiB is 413 (declared on every operation that
    takes a body), more than 10,000 events 422; nothing appended either way."""
    from tools.service.strict_body import MAX_BODY

    doc = client.get("/openapi.json").json()
    posts = [(path, ops["post"]) for path, ops in doc["paths"].items() if "post" in ops]
    assert ("/v1/events", doc["paths"]["/v1/events"]["post"]) in posts
    for path, operation in posts:
        assert "413" in operation["responses"], path
    before = head(client)
    padding = "x" * (MAX_BODY - 10)
    big = client.post("/v1/events", content=f'{{"events": [{{"memo": "{padding}"}}]}}',
                      headers={"Content-Type": "application/json"})
    assert "32 MiB" in problem(big, 413)["detail"]
    # Between the fast path's limit and 32 MiB, in one message: the route reads it whole.
    long_memo = {"type": "grant", "account": "a", "amount": 1, "time": 0,
                 "memo": "x" * (5 * 1024 * 1024)}
    answer = client.post("/v1/events", json={"events": [long_memo]})
    assert "memo" in problem(answer, 422)["detail"]
    many = [{"type": "grant", "account": "a", "amount": 1, "time": 0}] * 10_001
    assert "at most 10000" in problem(client.post("/v1/events", json={"events": many}),
                                      422)["detail"]
    assert head(client) == before


@pytest.mark.parametrize("anchor", ["5:abc", "x:y", "", "-1:" + "a" * 64, "1:" + "g" * 64,
                                    "1:" + "a" * 65, "1" * 30 + ":" + "a" * 64])
def test_a_malformed_anchor_is_refused_as_the_command_line_refuses_it(
        client: TestClient, db_url: str, anchor: str) -> None:
    from typer.testing import CliRunner

    from tools.cli import app

    setup_account(client)
    refused = problem(client.post("/v1/journal/verify", json={"anchor": anchor}), 422)
    cli = CliRunner().invoke(app, ["--db", db_url, "verify", "--anchor", anchor])
    assert cli.exit_code == 2
    assert refused["detail"].startswith("anchor ") and "pattern" not in refused["detail"]
    assert "64 hex digits" in refused["detail"] and "lowercase" not in refused["detail"]
    assert refused["detail"] in " ".join(cli.stderr.split())


def test_an_anchor_is_read_in_either_case_as_its_message_says(client: TestClient,
                                                            db_url: str) -> None:
    from typer.testing import CliRunner

    from tools.cli import app

    setup_account(client)
    taken = client.get("/v1/journal/head").json()
    for digest in (taken["hash"], taken["hash"].upper()):
        anchor = f"{taken['position']}:{digest}"
        answer = client.post("/v1/journal/verify", json={"anchor": f" {anchor}\n"})
        assert answer.status_code == 200 and answer.json()["ok"], answer.text
        cli = CliRunner().invoke(app, ["--db", db_url, "verify", "--anchor", anchor])
        assert cli.exit_code == 0, cli.stderr


def test_problems_quote_values_exactly_as_given(client: TestClient) -> None:
    """A problem's detail is one line, but the names it quotes keep every space: 'team  a'
    is not the account 'team a' it lists as known."""
    setup_account(client, "team a")
    missing = problem(client.get("/v1/accounts/team  a/balance"), 404)
    assert missing["detail"] == (
        "unknown account 'team  a'; the journal holds 'team a', spelled otherwise only in "
        "letter case, spaces or Unicode form (known: team a)")
    bad = {"events": [{"type": "void", "grant": "g  1", "time": 0}]}
    refused = problem(client.post("/v1/events", json=bad), 422)
    assert refused["errors"] == [{"index": 0, "detail": "void names event 'g  1', which is "
                                  "neither in the journal nor in the file"}]


def test_a_body_not_sent_as_json_is_told_to_be(client: TestClient) -> None:
    """A body sent without a Content-Type (urllib's `data=`, httpx's `content=`) or as
    another type (urllib's and `curl -d`'s form) is refused, saying to send JSON: FastAPI
    said it was "not a valid dictionary" of a body that was one. Not read as JSON anyway:
    a web page can make a browser post those cross-origin without a CORS preflight."""
    assert client.post("/v1/accounts/a/grants", json={"amount": 5, "time": 1}).status_code \
        == 201
    before = head(client)
    raw = b'{"amount": 5, "time": 1}'
    for route in ("/v1/accounts/a/usage", "/v1/accounts/a/grants", "/v1/jobs/start-next"):
        for headers, said in (({}, "without a Content-Type"),
                              ({"Content-Type": "text/plain"}, "as 'text/plain'"),
                              ({"Content-Type": "application/x-www-form-urlencoded"},
                               "as 'application/x-www-form-urlencoded'")):
            refused = client.post(route, content=raw, headers=headers)
            detail = problem(refused, 422)["detail"]
            assert said in detail and "Content-Type: application/json" in detail, detail
    # Not said of a JSON body that is not an object, nor of a missing body.
    listed = client.post("/v1/accounts/a/usage", json=[1])
    assert "Content-Type" not in problem(listed, 422)["detail"]
    missing = client.post("/v1/accounts/a/usage")
    assert "Content-Type" not in problem(missing, 422)["detail"]
    assert head(client) == before


def test_a_content_type_sent_twice_is_422_and_appends_nothing(client: TestClient) -> None:
    """The strict reader took the last Content-Type, FastAPI the first: JSON then text
    let a body with a repeated key past the strict reader, and `json.loads` let the last
    `amount` win (a grant of 700 recorded for a body that also said 5)."""
    at = head(client)
    for types in (("application/json", "text/plain"), ("text/plain", "application/json"),
                  ("application/json", "application/json")):
        refused = client.post("/v1/accounts/a/grants",
                              content=b'{"amount": 5, "amount": 700, "time": 1}',
                              headers=[("Content-Type", kind) for kind in types])
        assert "Content-Type was sent 2 times" in problem(refused, 422)["detail"]
    assert head(client) == at


@pytest.mark.parametrize("sent", [b"application/json\xa0", b"application/json\x85",
                                  b"\xa0application/json; charset=utf-8"])
def test_a_body_fastapi_reads_as_json_is_read_strictly_first(db_url: str,
                                                             sent: bytes) -> None:
    """FastAPI strips a Content-Type with `str.strip`, which takes the Latin-1 bytes
    0x85 and 0xA0 for spaces; the strict reader stripped bytes, and so skipped a body
    FastAPI then read with `json.loads`, where a repeated key's last value won. Sent
    over a socket: the test client would re-encode those bytes."""
    import socket

    from tests.service.server import in_thread
    from tools.service.connections import GuardedProtocol

    app = create_app(db_url, mount_web=False)
    app.state.ledger.start()
    body = b'{"amount": 5, "amount": 700, "time": 1}'
    try:
        with in_thread(app, http=GuardedProtocol) as port, \
                socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(b"POST /v1/accounts/a/grants HTTP/1.1\r\nHost: localhost\r\n"
                         b"Connection: close\r\nContent-Type: " + sent + b"\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(body) + body)
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 422 "), answer
        assert b"appears more than once" in answer
        assert app.state.ledger.journal.head() == 0
    finally:
        app.state.ledger.stop()
        app.state.ledger.close()


def test_a_completions_retry_after_a_restart_answers_the_charge_told_once_reversed(
        db_url: str, clock: Clock) -> None:
    """A keyed completion retried after a restart, once the completion itself has been
    reversed (the job is running again, it holds no charge): the same answer as first
    told, the charge included, not the job's charge as it stands; nothing appended."""
    complete = ("/v1/jobs/j1/complete", {"success": False, "refund_fraction": 0.5,
                                         "time": 12})
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        setup_account(c)
        assert c.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 9,
                                        "priority": 1, "time": 10}).status_code == 201
        assert c.post("/v1/jobs/start-next", json={"time": 11}).status_code == 200
        told = c.post(complete[0], json=complete[1], headers={"Idempotency-Key": "done-1"})
        assert (told.status_code, told.json()) == (
            200, {"job": "j1", "state": "failed", "charged": 4})
        assert c.post("/v1/events", json={"events": [
            {"type": "reverse", "event": "done-1", "time": 13, "reason": "twice"}]}
        ).status_code == 200
        assert c.get("/v1/jobs/j1").json()["state"] == "running"
        at = head(c)
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        again = c.post(complete[0], json=complete[1], headers={"Idempotency-Key": "done-1"})
        assert (again.status_code, again.json()) == (told.status_code, told.json())
        assert head(c) == at


def test_a_completions_retry_on_a_replica_answers_as_told_once_the_job_completed_again(
        database_url: str, clock: Clock) -> None:
    """A keyed completion whose event was reversed, the job then completed again the
    other way: its retry on another replica of the journal is told what it was told
    (failed), not the state the second completion left the job in."""
    complete = ("/v1/jobs/j1/complete", {"success": False, "time": 12})
    with (TestClient(create_app(database_url, clock=clock, mount_web=False)) as one,
          TestClient(create_app(database_url, clock=clock, mount_web=False)) as two):
        setup_account(one)
        assert one.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 9,
                                          "priority": 1, "time": 10}).status_code == 201
        assert one.post("/v1/jobs/start-next", json={"time": 11}).status_code == 200
        told = one.post(complete[0], json=complete[1], headers={"Idempotency-Key": "done-1"})
        assert (told.status_code, told.json()) == (
            200, {"job": "j1", "state": "failed", "charged": 0})
        assert one.post("/v1/events", json={"events": [
            {"type": "reverse", "event": "done-1", "time": 13, "reason": "wrong run"}]}
        ).status_code == 200
        assert one.post("/v1/jobs/j1/complete", json={"success": True, "time": 14}
                        ).json()["state"] == "succeeded"
        at = head(one)
        again = two.post(complete[0], json=complete[1], headers={"Idempotency-Key": "done-1"})
        assert (again.status_code, again.json()) == (told.status_code, told.json())
        assert head(two) == at


def test_the_batch_answer_cache_keeps_the_most_recent_answers_up_to_its_size() -> None:
    """A process remembers the answers of its most recent keyed batches, as many as its
    size (10,000 by default): a new one pushes out the oldest, and a forgotten key is
    looked up in the journal again."""
    from tools.service.writes import AnswerCache

    assert AnswerCache()._size == 10_000
    cache = AnswerCache(size=2)
    for key in ("k1", "k2", "k3"):
        cache.put(key, f"fp-{key}", {"appended": int(key[1])})
    assert cache.get("k1") is None
    assert cache.get("k2") == ("fp-k2", {"appended": 2})
    assert cache.get("k3") == ("fp-k3", {"appended": 3})
    cache.forget("k3")
    cache.forget("k3")  # forgetting a key not held is no error
    assert cache.get("k3") is None and cache.get("k2") is not None


@pytest.mark.parametrize("bad", [20, 21])
def test_a_refused_batch_names_twenty_bad_events_and_counts_the_rest(
        client: TestClient, bad: int) -> None:
    """The detail of a batch refused for its bad events names up to 20 of them one by one
    and says how many more there are only when there are more; `errors` names each."""
    body = problem(client.post("/v1/events", json={"events": [7] * bad}), 422)
    named = "; ".join(f"event {i}: expected a JSON object, got int" for i in range(20))
    more = "" if bad == 20 else "; and 1 more"
    assert body["detail"] == f"{bad} invalid event(s), nothing appended; {named}{more}"
    assert [error["index"] for error in body["errors"]] == list(range(bad))
    assert head(client) == 0


def test_a_far_write_under_a_key_a_start_next_bound_is_a_conflict(client: TestClient) -> None:
    """A write with a far event time sent under the key of a start-next that found
    nothing is another request, not a retry: 409 naming that start-next, nothing
    appended (a write that cannot answer from the binding does not fail instead)."""
    from tools.service.times import FAR_TIME

    setup_account(client)
    assert client.post("/v1/jobs/start-next", json={"time": 5},
                       headers={"Idempotency-Key": "k"}).status_code == 204
    at = head(client)
    for path, body in [("/v1/accounts/a/grants", {"amount": 1, "time": FAR_TIME + 1}),
                       ("/v1/accounts/a/usage", {"amount": 1, "time": FAR_TIME + 1})]:
        detail = problem(client.post(path, json=body, headers={"Idempotency-Key": "k"}),
                         409)["detail"]
        assert "a start-next that found no job to start" in detail, detail
    assert head(client) == at


def test_the_bindings_of_requests_that_record_nothing_keep_their_stored_form() -> None:
    """The fingerprint a start-next or a cancel that recorded nothing binds its key to is
    kept in the journal as long as the journal: its form (the job's name as written, not
    escaped) must stay what earlier bindings hold, or their retries become conflicts."""
    from tools.service.bindings import cancel_fingerprint, start_next_fingerprint

    assert start_next_fingerprint(None) == "start-next:"
    assert start_next_fingerprint(12) == "start-next:12"
    assert cancel_fingerprint("café", None) == 'cancel:["café", null]'
    assert cancel_fingerprint("j1", 7) == 'cancel:["j1", 7]'


def test_a_batch_takes_iso_times_each_on_its_own(client: TestClient) -> None:
    """An event of a batch may give its `time` or its `expiry` as ISO 8601 text with an
    offset, either one alone, with or without a key: each is read as the seconds it
    names."""
    events = [
        {"type": "grant", "account": "a", "amount": 5, "time": "1970-01-01T00:01:40Z",
         "id": "g1"},
        {"type": "grant", "account": "a", "amount": 5, "time": 100,
         "expiry": "1970-01-01T00:16:40Z", "id": "g2"},
        {"type": "consume", "account": "a", "amount": 1, "time": "1970-01-01T00:02:00Z"}]
    sent = client.post("/v1/events", json={"events": events})
    assert sent.status_code == 200, sent.text
    keyed = client.post("/v1/events", json={"events": [
        {"type": "consume", "account": "a", "amount": 1, "time": "1970-01-01T00:03:00Z"}]},
        headers={"Idempotency-Key": "use-2"})
    assert keyed.status_code == 200, keyed.text
    recorded = client.get("/v1/journal").json()["events"]
    assert [(e["time"], e.get("expiry")) for e in recorded] == [
        (100, None), (100, 1000), (120, None), (180, None)]


def test_verify_answers_a_checkpoint_that_does_not_check_out(client: TestClient,
                                                            db_url: str) -> None:
    """The chain intact, a checkpoint's recorded digest not its state's: the endpoint
    answers what `gpu-credits verify` does, not the chain's verdict alone."""
    from eventstore import Journal
    from projections.checkpoint import CHECKPOINT, chain_hash_at, encode_checkpoint
    from projections.replay import fold_canonical

    setup_account(client, "a")
    with Journal(db_url) as journal:
        at = journal.head()
        blob = encode_checkpoint(fold_canonical(journal), at, chain_hash_at(journal, at))
        ends_at = max(event.time for event in journal.read())
        journal.save_snapshot(CHECKPOINT, at, ends_at, "0" * 64, blob)
    answer = client.post("/v1/journal/verify").json()
    assert answer["ok"] is False and answer["first_bad_position"] == at
    assert "does not match its recorded digest" in answer["problem"]


def test_a_grant_in_the_past_that_would_undo_a_started_job_is_a_conflict(
        client: TestClient) -> None:
    """Credits at 1 would make the job rejected at 2 affordable, holding what the job
    started at 4 was accepted against: `409`, nothing appended; at 4 it is taken."""
    assert client.post("/v1/accounts", json={"account": "a", "time": 0}).status_code == 201
    client.post("/v1/accounts/a/grants", json={"amount": 10, "time": 0})
    submit = {"account": "a", "cost": 15, "priority": 1, "time": 2}
    assert client.post("/v1/jobs", json={**submit, "job": "j1"}).json()["accepted"] is False
    submit.update(cost=10, time=3)
    assert client.post("/v1/jobs", json={**submit, "job": "j2"}).json()["accepted"] is True
    assert client.post("/v1/jobs/start-next", json={"time": 4}).json()["job"] == "j2"
    before = head(client)
    late = client.post("/v1/accounts/a/grants", json={"amount": 5, "time": 1})
    assert "would invalidate the start" in problem(late, 409)["detail"]
    assert head(client) == before
    assert client.post("/v1/accounts/a/grants", json={"amount": 5, "time": 4}).status_code == 201
    assert client.get("/v1/jobs/j2").json()["state"] == "running"
