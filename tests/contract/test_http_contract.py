"""The HTTP service as the public contract states it, through FastAPI's TestClient."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tools.service import create_app


class Clock:
    def __init__(self) -> None:
        self.now = 100

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def http(tmp_path: Path) -> Iterator[TestClient]:
    url = f"sqlite:///{tmp_path / 'service.db'}"
    with TestClient(create_app(url, clock=Clock(), mount_web=False)) as client:
        yield client


def head(http: TestClient) -> int:
    r = http.get("/v1/journal/head")
    assert r.status_code == 200
    position = r.json()["position"]
    assert isinstance(position, int)
    return position


def is_problem(r: Any, status: int) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert {"type", "title", "status", "detail"} <= set(body)
    assert body["status"] == status


def opened(http: TestClient, account: str = "a", amount: int = 100) -> None:
    assert http.post("/v1/accounts", json={"account": account}).status_code == 201
    r = http.post(f"/v1/accounts/{account}/grants", json={"amount": amount, "time": 0})
    assert r.status_code == 201, r.text


def test_openapi_and_docs(http: TestClient) -> None:
    r = http.get("/openapi.json")
    assert r.status_code == 200
    assert r.json()["openapi"].startswith("3.1")
    assert http.get("/docs").status_code == 200


def test_post_events_all_or_nothing(http: TestClient) -> None:
    events = [
        {"type": "account", "account": "a", "max_running": 2},
        {"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 10,
         "pool": "h100"},
        {"type": "consume", "account": "a", "amount": 70, "time": 3, "pool": "h100"},
    ]
    r = http.post("/v1/events", json={"events": events})
    assert r.status_code == 200, r.text
    body = r.json()
    assert {"appended", "already_present", "positions"} <= set(body)
    assert body["appended"] == 3
    assert body["already_present"] == 0
    assert body["positions"] == [1, 2, 3]
    bad = [{"type": "grant", "account": "a", "amount": 1, "time": 5},
           {"type": "grant", "account": "a", "amount": -1, "time": 5},
           {"type": "nonsense"}]
    r = http.post("/v1/events", json={"events": bad})
    is_problem(r, 422)
    text = r.text
    assert "1" in text and "2" in text
    assert head(http) == 3


def test_post_events_with_ids_is_idempotent(http: TestClient) -> None:
    events = [{"type": "grant", "id": "g1", "account": "a", "amount": 100, "time": 0}]
    assert http.post("/v1/events", json={"events": events}).json()["appended"] == 1
    r = http.post("/v1/events", json={"events": events})
    assert r.status_code == 200
    assert r.json()["appended"] == 0
    assert r.json()["already_present"] == 1


def test_far_times_are_422(http: TestClient) -> None:
    r = http.post("/v1/events", json={"events": [
        {"type": "grant", "account": "a", "amount": 1, "time": 1_700_000_000_000}]})
    is_problem(r, 422)
    r = http.post("/v1/accounts/a/grants", json={"amount": 1, "time": 1_700_000_000_000})
    assert r.status_code in (404, 422)
    assert head(http) == 0


def test_account_grant_usage(http: TestClient) -> None:
    r = http.post("/v1/accounts", json={"account": "a", "max_running": 2})
    assert r.status_code == 201, r.text
    r = http.post("/v1/accounts/a/grants",
                  json={"amount": 100, "expiry": 1000, "pool": "h100", "priority": 10,
                        "time": 0, "memo": "PO 1"})
    assert r.status_code == 201, r.text
    assert "id" in r.json()
    r = http.post("/v1/accounts/a/usage", json={"amount": 130, "pool": "h100", "time": 5})
    assert r.status_code == 201, r.text
    assert set(r.json()) >= {"id", "debt"}
    assert r.json()["debt"] == 30
    b = http.get("/v1/accounts/a/balance").json()
    assert {"account", "balance", "available", "pools"} <= set(b)
    assert b["balance"] == -30
    assert b["pools"] == {"h100": -30}


def test_grant_time_as_iso_string(http: TestClient) -> None:
    http.post("/v1/accounts", json={"account": "a"})
    r = http.post("/v1/accounts/a/grants",
                  json={"amount": 5, "time": "1970-01-01T00:00:50+00:00"})
    assert r.status_code == 201, r.text
    assert http.get("/v1/accounts/a/balance", params={"at": 49}).json()["balance"] == 0
    assert http.get("/v1/accounts/a/balance",
                    params={"at": "1970-01-01T00:00:50Z"}).json()["balance"] == 5


def test_balance_at_and_as_known_at(http: TestClient) -> None:
    opened(http)
    http.post("/v1/accounts/a/usage", json={"amount": 30, "time": 5})
    assert http.get("/v1/accounts/a/balance", params={"at": 4}).json()["balance"] == 100
    assert http.get("/v1/accounts/a/balance", params={"at": 5}).json()["balance"] == 70
    known = http.get("/v1/accounts/a/balance", params={"at": 5, "as_known_at": 2}).json()
    assert known["balance"] == 100
    listed = http.get("/v1/accounts")
    assert listed.status_code == 200
    assert isinstance(listed.json(), list)
    assert [x["account"] for x in listed.json()] == ["a"]


def test_unknown_account_or_job_is_404(http: TestClient) -> None:
    is_problem(http.get("/v1/accounts/nobody/balance"), 404)
    is_problem(http.get("/v1/accounts/nobody/statement"), 404)
    is_problem(http.get("/v1/jobs/ghost"), 404)
    is_problem(http.post("/v1/jobs/ghost/complete", json={"success": True}), 404)
    is_problem(http.post("/v1/jobs/ghost/cancel", json={}), 404)
    is_problem(http.post("/v1/jobs", json={"job": "j", "account": "nobody", "cost": 1,
                                           "priority": 1}), 404)
    assert head(http) == 0


def test_job_lifecycle(http: TestClient) -> None:
    opened(http)
    r = http.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 40, "priority": 1,
                                    "time": 1})
    assert r.status_code == 201, r.text
    assert r.json()["job"] == "j1"
    assert r.json()["accepted"] is True
    assert r.json()["state"] == "pending"
    r = http.post("/v1/jobs", json={"job": "j2", "account": "a", "cost": 80, "priority": 1,
                                    "time": 1})
    assert r.status_code == 201
    assert r.json()["accepted"] is False
    assert r.json()["state"] == "rejected"
    assert r.json()["reason"]
    is_problem(http.post("/v1/jobs/j1/complete", json={"success": True, "time": 2}), 409)
    r = http.post("/v1/jobs/start-next", json={"time": 2})
    assert r.status_code == 200, r.text
    assert r.json() == {"job": "j1", "account": "a", "cost": 40, "priority": 1} or \
        {"job", "account", "cost", "priority"} <= set(r.json())
    r = http.post("/v1/jobs/start-next", json={"time": 3})
    assert r.status_code == 204
    assert r.content == b""
    r = http.post("/v1/jobs/j1/complete", json={"success": False, "refund_fraction": 0.5,
                                                "time": 4})
    assert r.status_code == 200, r.text
    assert r.json()["job"] == "j1"
    assert r.json()["charged"] == 20
    assert r.json()["state"]
    job = http.get("/v1/jobs/j1")
    assert job.status_code == 200
    assert {"job", "account", "state", "cost", "priority", "charged", "paid_by"} <= set(
        job.json())
    assert job.json()["charged"] == 20
    rejected = http.get("/v1/jobs/j2").json()
    assert rejected["state"] == "rejected"
    assert rejected.get("reason")


def test_cancel_and_transitions(http: TestClient) -> None:
    opened(http)
    http.post("/v1/jobs", json={"job": "j", "account": "a", "cost": 1, "priority": 1,
                                "time": 1})
    r = http.post("/v1/jobs/j/cancel", json={"time": 2})
    assert r.status_code == 200, r.text
    assert r.json()["job"] == "j"
    assert r.json()["state"] == "cancelled"
    before = head(http)
    r = http.post("/v1/jobs/j/cancel", json={"time": 3})
    assert r.status_code == 200
    assert head(http) == before
    is_problem(http.post("/v1/jobs/j/complete", json={"success": True}), 409)


def test_start_next_without_body(http: TestClient) -> None:
    assert http.post("/v1/jobs/start-next").status_code == 204


def test_invalid_bodies_are_422_and_append_nothing(http: TestClient) -> None:
    opened(http)
    before = head(http)
    is_problem(http.post("/v1/accounts/a/grants", json={"amount": -5}), 422)
    is_problem(http.post("/v1/accounts/a/grants", json={"amount": "x"}), 422)
    is_problem(http.post("/v1/accounts/a/usage", json={}), 422)
    is_problem(http.post("/v1/jobs", json={"job": "j", "account": "a", "cost": -1,
                                           "priority": 1}), 422)
    is_problem(http.post("/v1/events", json={"nope": []}), 422)
    is_problem(http.get("/v1/accounts/a/balance", params={"at": "yesterday"}), 422)
    assert head(http) == before


def test_refund_fraction_out_of_range_is_422(http: TestClient) -> None:
    opened(http)
    http.post("/v1/jobs", json={"job": "j", "account": "a", "cost": 1, "priority": 1})
    http.post("/v1/jobs/start-next", json={})
    before = head(http)
    is_problem(http.post("/v1/jobs/j/complete", json={"success": False,
                                                      "refund_fraction": 1.5}), 422)
    assert head(http) == before


def test_idempotency_key_replays_and_conflicts(http: TestClient) -> None:
    http.post("/v1/accounts", json={"account": "a"})
    key = {"Idempotency-Key": "grant-1"}
    first = http.post("/v1/accounts/a/grants", json={"amount": 5, "time": 1}, headers=key)
    assert first.status_code == 201
    before = head(http)
    again = http.post("/v1/accounts/a/grants", json={"amount": 5, "time": 1}, headers=key)
    assert again.status_code == first.status_code
    assert again.json() == first.json()
    assert head(http) == before
    is_problem(http.post("/v1/accounts/a/grants", json={"amount": 6, "time": 1},
                         headers=key), 409)
    assert head(http) == before


def test_idempotency_key_on_jobs(http: TestClient) -> None:
    opened(http)
    key = {"Idempotency-Key": "submit-1"}
    body = {"job": "j", "account": "a", "cost": 1, "priority": 1}
    first = http.post("/v1/jobs", json=body, headers=key)
    again = http.post("/v1/jobs", json=body, headers=key)
    assert (again.status_code, again.json()) == (first.status_code, first.json())
    start = {"Idempotency-Key": "start-1"}
    s1 = http.post("/v1/jobs/start-next", json={}, headers=start)
    s2 = http.post("/v1/jobs/start-next", json={}, headers=start)
    assert s1.status_code == s2.status_code == 200
    assert s1.json() == s2.json()
    c = {"Idempotency-Key": "complete-1"}
    c1 = http.post("/v1/jobs/j/complete", json={"success": True}, headers=c)
    c2 = http.post("/v1/jobs/j/complete", json={"success": True}, headers=c)
    assert (c1.status_code, c1.json()) == (c2.status_code, c2.json()) == (
        200, c1.json())
    is_problem(http.post("/v1/jobs/j/complete", json={"success": False}, headers=c), 409)


def test_statement_json_and_csv(http: TestClient) -> None:
    opened(http)
    http.post("/v1/accounts/a/usage", json={"amount": 30, "time": 5})
    r = http.get("/v1/accounts/a/statement", params={"from": 0, "to": 10})
    assert r.status_code == 200
    r = http.get("/v1/accounts/a/statement", headers={"Accept": "text/csv"})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert len(list(csv.reader(io.StringIO(r.text)))) >= 3
    assert http.get("/v1/accounts/a/statement", params={"as_known_at": 1}).status_code == 200


def test_journal_pagination(http: TestClient) -> None:
    opened(http)
    for t in range(1, 6):
        http.post("/v1/accounts/a/usage", json={"amount": 1, "time": t})
    seen: list[dict[str, Any]] = []
    after = 0
    while True:
        r = http.get("/v1/journal", params={"after": after, "limit": 2})
        assert r.status_code == 200
        page = r.json()
        assert set(page) >= {"events", "next"}
        seen.extend(page["events"])
        if page["next"] is None:
            break
        after = page["next"]
    assert [e["position"] for e in seen] == list(range(1, head(http) + 1))
    assert all({"id", "position", "recorded_at", "type"} <= set(e) for e in seen)


def test_journal_events_reimport_as_events(http: TestClient) -> None:
    opened(http)
    events = http.get("/v1/journal").json()["events"]
    # position and recorded_at are the journal's, not the event's: left out on the way back.
    events = [{k: v for k, v in e.items() if k not in ("position", "recorded_at")}
              for e in events]
    r = http.post("/v1/events", json={"events": events})
    assert r.status_code == 200, r.text
    assert r.json()["appended"] == 0


def test_revisions_pagination(http: TestClient) -> None:
    opened(http, amount=10)
    http.post("/v1/jobs", json={"job": "j1", "account": "a", "cost": 8, "priority": 1,
                                "time": 10})
    http.post("/v1/jobs", json={"job": "j2", "account": "a", "cost": 8, "priority": 1,
                                "time": 11})
    # Late: a grant before the rejected submit revises its outcome.
    http.post("/v1/accounts/a/grants", json={"amount": 100, "time": 5})
    r = http.get("/v1/revisions")
    assert r.status_code == 200
    body = r.json()
    assert set(body) >= {"revisions", "next"}
    assert isinstance(body["revisions"], list)
    r = http.get("/v1/revisions", params={"limit": 1, "account": "a"})
    assert r.status_code == 200
    page = r.json()
    assert len(page["revisions"]) <= 1


def test_head_and_verify(http: TestClient) -> None:
    opened(http)
    h = http.get("/v1/journal/head").json()
    assert set(h) >= {"position", "hash"}
    r = http.post("/v1/journal/verify", json={})
    assert r.status_code == 200
    assert r.json()["ok"] is True
    assert r.json()["events"] == h["position"]
    r = http.post("/v1/journal/verify", json={"anchor": f"{h['position']}:{h['hash']}"})
    assert r.json()["ok"] is True
    r = http.post("/v1/journal/verify", json={"anchor": f"{h['position']}:{'0' * 64}"})
    assert r.status_code == 200
    assert r.json()["ok"] is False
    assert "first_bad_position" in r.json()
    is_problem(http.post("/v1/journal/verify", json={"anchor": "nonsense"}), 422)


def test_web_view_at_root(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'web.db'}"
    with TestClient(create_app(url, clock=Clock())) as client:
        assert client.get("/").status_code == 200


def test_idempotency_key_becomes_the_event_id(http: TestClient) -> None:
    http.post("/v1/accounts", json={"account": "a"})
    r = http.post("/v1/accounts/a/grants", json={"amount": 5, "time": 1},
                  headers={"Idempotency-Key": "grant-po-1"})
    assert r.json()["id"] == "grant-po-1"
    ids = [e["id"] for e in http.get("/v1/journal").json()["events"]]
    assert "grant-po-1" in ids
    # The same key on another kind of write is a conflict, and appends nothing.
    before = head(http)
    is_problem(http.post("/v1/accounts/a/usage", json={"amount": 1, "time": 1},
                         headers={"Idempotency-Key": "grant-po-1"}), 409)
    assert head(http) == before


def test_a_write_without_time_is_never_earlier_than_the_latest_event(
        http: TestClient) -> None:
    http.post("/v1/accounts", json={"account": "a"})
    http.post("/v1/accounts/a/grants", json={"amount": 5, "time": 500})
    r = http.post("/v1/accounts/a/usage", json={"amount": 1})  # the clock says 100
    assert r.status_code == 201
    last = http.get("/v1/journal").json()["events"][-1]
    assert last["time"] == 500


def test_verify_reports_a_tampered_journal(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "t.db"
    url = f"sqlite:///{path}"
    with TestClient(create_app(url, clock=Clock(), mount_web=False)) as client:
        opened(client)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE events SET payload = replace(payload, '100', '900') "
                     "WHERE position = 2")
    conn.close()
    with TestClient(create_app(url, clock=Clock(), mount_web=False)) as client:
        r = client.post("/v1/journal/verify", json={})
        assert r.status_code == 200
        assert r.json()["ok"] is False
        assert r.json()["first_bad_position"] == 2


def test_balance_answer_is_the_same_object_as_the_cli_prints(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from tools.cli import app

    url = f"sqlite:///{tmp_path / 'same.db'}"
    with TestClient(create_app(url, clock=Clock(), mount_web=False)) as client:
        opened(client)
        client.post("/v1/accounts/a/grants", json={"amount": 7, "pool": "h100", "time": 1})
        client.post("/v1/jobs", json={"job": "j", "account": "a", "cost": 3, "priority": 1,
                                      "time": 2})
        served = client.get("/v1/accounts/a/balance", params={"at": 2}).json()
    printed = CliRunner().invoke(app, ["balance", "a", "--at", "2", "--json", "--db", url])
    assert printed.exit_code == 0, printed.stderr
    assert json.loads(printed.stdout) == served


def test_journal_events_give_recorded_at_as_iso_8601_with_an_offset(
        http: TestClient) -> None:
    opened(http)
    events = http.get("/v1/journal").json()["events"]
    assert events
    for event in events:
        assert isinstance(event["position"], int)
        assert isinstance(event["time"], int)
        # Like every time the service gives or takes: text that names its offset.
        recorded = datetime.fromisoformat(event["recorded_at"])
        assert recorded.utcoffset() is not None, event["recorded_at"]


def _revised_three_times(http: TestClient) -> None:
    """Account a: three usage reports, each leaving a debt, then a late grant before
    them that pays for all three (revising each); account b: the same with one report."""
    for account, reports in (("a", 3), ("b", 1)):
        assert http.post("/v1/accounts", json={"account": account, "time": 0}
                         ).status_code == 201
        for t in range(10, 10 + reports):
            http.post(f"/v1/accounts/{account}/usage", json={"amount": 5, "time": t})
        http.post(f"/v1/accounts/{account}/grants", json={"amount": 20, "time": 5})


def _follow(http: TestClient, **params: Any) -> list[Any]:
    """Every revision, a page of one at a time, following `next` until it is null."""
    seen: list[Any] = []
    after = 0
    for _ in range(100):
        page = http.get("/v1/revisions", params={**params, "after": after, "limit": 1})
        assert page.status_code == 200, page.text
        seen.extend(page.json()["revisions"])
        if page.json()["next"] is None:
            return seen
        after = page.json()["next"]
    raise AssertionError("next never became null")


def test_revision_pages_following_next_give_every_revision_once(http: TestClient) -> None:
    _revised_three_times(http)
    everything = http.get("/v1/revisions").json()
    assert everything["next"] is None
    revisions = everything["revisions"]
    assert len(revisions) >= 3
    assert _follow(http) == revisions
    assert _follow(http, account="b") == [r for r in revisions if r["account"] == "b"]


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/accounts", {"account": "c"}),
    ("/v1/accounts/a/grants", {"amount": 5}),
    ("/v1/accounts/a/usage", {"amount": 1}),
    ("/v1/jobs", {"job": "k", "account": "a", "cost": 1, "priority": 1}),
    ("/v1/jobs/start-next", {}),
    ("/v1/jobs/run/complete", {"success": True}),
    ("/v1/jobs/wait/cancel", {}),
])
def test_every_write_without_time_is_never_earlier_than_the_latest_event(
        http: TestClient, path: str, body: dict[str, Any]) -> None:
    opened(http)  # the clock says 100; the journal's latest event will be at 500
    http.post("/v1/jobs", json={"job": "run", "account": "a", "cost": 1, "priority": 9,
                                "time": 1})
    http.post("/v1/jobs/start-next", json={"time": 2})
    http.post("/v1/jobs", json={"job": "wait", "account": "a", "cost": 1, "priority": 0,
                                "time": 3})
    http.post("/v1/accounts/a/grants", json={"amount": 5, "time": 500})
    before = head(http)
    r = http.post(path, json=body)
    assert r.status_code in (200, 201), r.text
    appended = http.get("/v1/journal", params={"after": before}).json()["events"]
    assert appended
    assert [e["time"] for e in appended] == [500] * len(appended)


def test_times_are_taken_as_iso_8601_with_an_offset_in_every_body_and_query(
        http: TestClient) -> None:
    def at(seconds: int) -> str:  # the same instant, written one hour east of UTC
        return (datetime(1970, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
                + timedelta(seconds=seconds)).isoformat()

    assert http.post("/v1/accounts", json={"account": "a", "time": at(0)}).status_code == 201
    r = http.post("/v1/accounts/a/grants", json={"amount": 50, "time": at(1),
                                                 "expiry": at(40)})
    assert r.status_code == 201, r.text
    assert (r.json()["time"], r.json()["expiry"]) == (1, 40)
    assert http.post("/v1/accounts/a/usage", json={"amount": 5, "time": at(2)}).json()[
        "debt"] == 0
    assert http.post("/v1/jobs", json={"job": "j", "account": "a", "cost": 10, "priority": 1,
                                       "time": at(3)}).json()["accepted"] is True
    assert http.post("/v1/jobs", json={"job": "k", "account": "a", "cost": 1, "priority": 0,
                                       "time": at(3)}).status_code == 201
    assert http.post("/v1/jobs/start-next", json={"time": at(4)}).json()["job"] == "j"
    assert http.post("/v1/jobs/k/cancel", json={"time": at(5)}).status_code == 200
    done = http.post("/v1/jobs/j/complete", json={"success": True, "time": at(6)})
    assert done.status_code == 200, done.text
    times = [e["time"] for e in http.get("/v1/journal").json()["events"]]
    assert times == [0, 1, 2, 3, 3, 4, 5, 6]
    assert http.get("/v1/accounts/a/balance", params={"at": at(39)}).json()[
        "balance"] == 35
    assert http.get("/v1/accounts/a/balance", params={"at": at(40)}).json()[
        "balance"] == 0
    lines = http.get("/v1/accounts/a/statement",
                     params={"from": at(2), "to": at(3)}).json()["lines"]
    assert sorted({line["time"] for line in lines}) == [2, 3]
    # Without its offset, the same text could mean any of 25 hours: refused.
    before = head(http)
    is_problem(http.post("/v1/accounts/a/usage",
                         json={"amount": 1, "time": "1970-01-01T00:00:07"}), 422)
    is_problem(http.get("/v1/accounts/a/balance", params={"at": "1970-01-01T00:00:07"}),
               422)
    assert head(http) == before


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/accounts/a/grants", {"amount": True, "time": 1}),
    ("/v1/accounts/a/grants", {"amount": 5, "time": 10, "expiry": 10}),
    ("/v1/accounts/a/grants", {"amount": 5, "time": 10, "expiry": 9}),
    ("/v1/accounts/a/usage", {"amount": True, "time": 1}),
    ("/v1/jobs", {"job": "j", "account": "a", "cost": True, "priority": 1}),
    ("/v1/jobs", {"job": "j", "account": "a", "cost": 1, "priority": 1, "time": 1.5}),
    ("/v1/jobs/start-next", {"time": True}),
    ("/v1/events", {"events": [{"type": "grant", "account": "a", "amount": True,
                                "time": 1}]}),
])
def test_bools_for_numbers_and_expiries_not_after_their_time_are_422(
        http: TestClient, path: str, body: dict[str, Any]) -> None:
    opened(http)
    before = head(http)
    is_problem(http.post(path, json=body), 422)
    assert head(http) == before


def test_transitions_the_job_state_does_not_allow_are_409_and_append_nothing(
        http: TestClient) -> None:
    opened(http)
    http.post("/v1/jobs", json={"job": "j", "account": "a", "cost": 1, "priority": 1,
                                "time": 1})
    http.post("/v1/jobs/start-next", json={"time": 2})
    before = head(http)
    is_problem(http.post("/v1/jobs/j/cancel", json={"time": 3}), 409)  # running
    assert http.post("/v1/jobs/j/complete", json={"success": True, "time": 3}
                     ).status_code == 200
    before = head(http)
    is_problem(http.post("/v1/jobs/j/cancel", json={"time": 4}), 409)  # finished
    is_problem(http.post("/v1/jobs/j/complete", json={"success": True, "time": 4}), 409)
    assert head(http) == before


def test_retries_of_the_other_writes_answer_the_same_status_and_body(
        http: TestClient) -> None:
    def twice(path: str, body: dict[str, Any], key: str) -> Any:
        first = http.post(path, json=body, headers={"Idempotency-Key": key})
        before = head(http)
        again = http.post(path, json=body, headers={"Idempotency-Key": key})
        assert (again.status_code, again.content) == (first.status_code, first.content)
        assert head(http) == before
        return first

    assert twice("/v1/accounts", {"account": "a", "time": 0}, "open-a").status_code == 201
    events = {"events": [{"type": "grant", "account": "a", "amount": 10, "time": 0}]}
    assert twice("/v1/events", events, "batch-1").json()["appended"] == 1
    assert twice("/v1/jobs/start-next", {"time": 1}, "start-none").status_code == 204
    http.post("/v1/jobs", json={"job": "j", "account": "a", "cost": 1, "priority": 1,
                                "time": 2})
    assert twice("/v1/jobs/j/cancel", {"time": 3}, "cancel-j").json() == {
        "job": "j", "state": "cancelled"}
    # The key of a cancel that recorded nothing (the job was cancelled already) too.
    assert twice("/v1/jobs/j/cancel", {"time": 4}, "cancel-j-again").status_code == 200


FAR = 7_258_118_401  # one second after 2200-01-01T00:00Z


FAR_WRITES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/events", {"events": [{"type": "consume", "account": "a", "amount": 1,
                                "time": FAR}]}),
    ("/v1/accounts", {"account": "b", "time": FAR}),
    ("/v1/accounts/a/grants", {"amount": 1, "time": FAR}),
    ("/v1/accounts/a/grants", {"amount": 1, "time": "2200-01-01T00:00:01Z"}),
    ("/v1/accounts/a/usage", {"amount": 1, "time": FAR}),
    ("/v1/jobs", {"job": "k", "account": "a", "cost": 1, "priority": 1, "time": FAR}),
    ("/v1/jobs/start-next", {"time": FAR}),
    ("/v1/jobs/run/complete", {"success": True, "time": FAR}),
    ("/v1/jobs/wait/cancel", {"time": FAR}),
]


def test_far_event_times_are_422_on_every_write_and_append_nothing(
        http: TestClient) -> None:
    opened(http)
    http.post("/v1/jobs", json={"job": "run", "account": "a", "cost": 1, "priority": 9,
                                "time": 1})
    http.post("/v1/jobs/start-next", json={"time": 2})
    http.post("/v1/jobs", json={"job": "wait", "account": "a", "cost": 1, "priority": 0,
                                "time": 3})
    before = head(http)
    for path, body in FAR_WRITES:
        r = http.post(path, json=body)
        assert r.status_code == 422, (path, body, r.text)
        is_problem(r, 422)
    assert head(http) == before


def test_the_first_second_of_2200_and_far_expiries_are_ordinary(http: TestClient) -> None:
    opened(http)
    r = http.post("/v1/accounts/a/grants", json={"amount": 1, "time": 1, "expiry": FAR + 9})
    assert r.status_code == 201, r.text
    r = http.post("/v1/accounts/a/usage", json={"amount": 1, "time": "2200-01-01T00:00:00Z"})
    assert r.status_code == 201, r.text


KEYED_WRITES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("/v1/events", {"events": [{"type": "grant", "account": "a", "amount": 1, "time": 1}]},
     {"events": [{"type": "grant", "account": "a", "amount": 2, "time": 1}]}),
    ("/v1/accounts", {"account": "b"}, {"account": "b", "max_running": 1}),
    ("/v1/accounts/a/usage", {"amount": 1, "time": 5}, {"amount": 2, "time": 5}),
    ("/v1/jobs", {"job": "k", "account": "a", "cost": 1, "priority": 1, "time": 5},
     {"job": "k", "account": "a", "cost": 2, "priority": 1, "time": 5}),
    ("/v1/jobs/start-next", {"time": 5}, {"time": 6}),
    ("/v1/jobs/wait/cancel", {"time": 5}, {"time": 6}),
]


def test_every_write_replays_its_key_and_refuses_it_with_another_body(
        http: TestClient) -> None:
    opened(http)
    http.post("/v1/jobs", json={"job": "wait", "account": "a", "cost": 1, "priority": 0,
                                "time": 3})
    for n, (path, body, other) in enumerate(KEYED_WRITES):
        key = {"Idempotency-Key": f"key-{n}"}
        first = http.post(path, json=body, headers=key)
        assert first.status_code in (200, 201), (path, first.text)
        before = head(http)
        again = http.post(path, json=body, headers=key)
        assert (again.status_code, again.content) == (first.status_code, first.content), path
        assert head(http) == before
        r = http.post(path, json=other, headers=key)
        assert r.status_code == 409, (path, r.text)
        is_problem(r, 409)
        assert head(http) == before


def test_write_answers_have_their_status_and_keys(http: TestClient) -> None:
    r = http.post("/v1/accounts", json={"account": "a", "max_running": 1})
    assert r.status_code == 201, r.text
    r = http.post("/v1/accounts/a/grants", json={"amount": 10, "time": 0})
    assert r.status_code == 201 and isinstance(r.json()["id"], str)
    r = http.post("/v1/accounts/a/usage", json={"amount": 4, "time": 1})
    assert r.status_code == 201
    assert isinstance(r.json()["id"], str) and r.json()["debt"] == 0
    accepted = http.post("/v1/jobs", json={"job": "j", "account": "a", "cost": 5,
                                           "priority": 1, "time": 2})
    assert accepted.status_code == 201
    assert {k: accepted.json()[k] for k in ("job", "accepted", "state")} == {
        "job": "j", "accepted": True, "state": "pending"}
    before = head(http)
    rejected = http.post("/v1/jobs", json={"job": "r", "account": "a", "cost": 5,
                                           "priority": 1, "time": 2})
    assert rejected.status_code == 201
    assert {k: rejected.json()[k] for k in ("job", "accepted", "state")} == {
        "job": "r", "accepted": False, "state": "rejected"}
    assert isinstance(rejected.json()["reason"], str) and rejected.json()["reason"]
    assert head(http) == before + 1  # a recorded rejection, not an error
    started = http.post("/v1/jobs/start-next", json={"time": 3})
    assert (started.status_code, started.json()) == (
        200, {"job": "j", "account": "a", "cost": 5, "priority": 1})
    done = http.post("/v1/jobs/j/complete", json={"success": True, "time": 4})
    assert done.status_code == 200
    assert {k: done.json()[k] for k in ("job", "state", "charged")} == {
        "job": "j", "state": "succeeded", "charged": 5}
    job = http.get("/v1/jobs/j").json()
    assert {k: job[k] for k in ("job", "account", "state", "cost", "priority", "charged")} \
        == {"job": "j", "account": "a", "state": "succeeded", "cost": 5, "priority": 1,
            "charged": 5}
    assert http.get("/v1/jobs/r").json()["reason"] == rejected.json()["reason"]


def test_accounts_lists_the_balance_object_of_each_account(http: TestClient) -> None:
    opened(http, "a", 100)
    opened(http, "b", 7)
    http.post("/v1/accounts/b/grants", json={"amount": 3, "pool": "h100", "time": 1})
    listed = http.get("/v1/accounts")
    assert listed.status_code == 200
    by_account = {item["account"]: item for item in listed.json()}
    assert set(by_account) == {"a", "b"}
    for account, item in by_account.items():
        assert item == http.get(f"/v1/accounts/{account}/balance").json()
        for key in ("balance", "available"):
            assert isinstance(item[key], int) and not isinstance(item[key], bool)
    assert by_account["b"]["pools"] == {"general": 7, "h100": 3}


def test_an_account_event_without_time_takes_effect_from_the_start(
        http: TestClient) -> None:
    jobs = [{"type": "grant", "account": "a", "amount": 100, "time": 0},
            {"type": "submit", "account": "a", "job": "j1", "cost": 1, "priority": 1,
             "time": 1},
            {"type": "submit", "account": "a", "job": "j2", "cost": 1, "priority": 1,
             "time": 1},
            {"type": "start", "job": "j1", "time": 2}]
    cap = {"type": "account", "account": "a", "max_running": 1}
    assert http.post("/v1/events", json={"events": [*jobs, cap]}).status_code == 200
    # Recorded last but without a time: the cap held from the start, so j2 waits.
    assert http.post("/v1/jobs/start-next", json={"time": 3}).status_code == 204
    assert http.post("/v1/jobs/j1/complete", json={"success": True, "time": 4}
                     ).status_code == 200
    assert http.post("/v1/jobs/start-next", json={"time": 5}).json()["job"] == "j2"


def test_a_retry_without_time_answers_the_same_after_the_clock_moved(
        tmp_path: Path) -> None:
    ticks = iter(range(100, 10_000, 10))  # every call of the clock is a later second
    url = f"sqlite:///{tmp_path / 'moving.db'}"
    with TestClient(create_app(url, clock=lambda: next(ticks), mount_web=False)) as client:
        writes: list[tuple[str, dict[str, Any]]] = [
            ("/v1/accounts", {"account": "a"}),
            ("/v1/accounts/a/grants", {"amount": 100}),
            ("/v1/accounts/a/usage", {"amount": 1}),
            ("/v1/jobs", {"job": "j", "account": "a", "cost": 1, "priority": 1}),
            ("/v1/jobs", {"job": "w", "account": "a", "cost": 1, "priority": 0}),
            ("/v1/jobs/start-next", {}),
            ("/v1/jobs/j/complete", {"success": True}),
            ("/v1/jobs/w/cancel", {}),
        ]
        for n, (path, body) in enumerate(writes):
            key = {"Idempotency-Key": f"live-{n}"}
            first = client.post(path, json=body, headers=key)
            assert first.status_code in (200, 201), (path, first.text)
            before = head(client)
            again = client.post(path, json=body, headers=key)
            assert (again.status_code, again.content) == (first.status_code,
                                                          first.content), path
            assert head(client) == before
