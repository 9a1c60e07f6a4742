"""A job's start, completion or cancel that arrived before its job's submit is filed in the
stream `job:<id>`, and one that arrived while another account's submit of the same id was
the one known stays in that account's stream. The reads that group by account find them
wherever they were filed: a job's payers, the revisions of an account, its statement."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from tests.service.test_api import problem


def post(client: TestClient, *events: dict[str, Any]) -> None:
    """Append `events` as one batch, as an import would."""
    r = client.post("/v1/events", json={"events": list(events)})
    assert r.status_code == 200, r.text


def stream_of(client: TestClient, event_id: str) -> str:
    """The stream the journal filed the event under (as `GET /v1/journal` cannot say, from
    the journal itself)."""
    journal = client.app.state.ledger.journal  # type: ignore[attr-defined]
    rec = journal.get(event_id)
    assert rec is not None
    return str(rec.stream)


GRANT_A = {"type": "grant", "account": "a", "amount": 100, "time": 0, "id": "g1"}


def test_a_job_charged_by_a_completion_that_came_before_its_submit_names_its_payers(
        client: TestClient) -> None:
    # A usage feed faster than the scheduler's: the completion first.
    post(client, GRANT_A, {"type": "complete", "job": "j1", "success": True, "time": 30,
                           "id": "c1"})
    post(client, {"type": "submit", "account": "a", "job": "j1", "cost": 40, "priority": 1,
                  "time": 10, "id": "s1"},
         {"type": "start", "job": "j1", "time": 20, "id": "st1"})
    assert stream_of(client, "c1") == "job:j1"
    assert client.get("/v1/jobs/j1").json() == {
        "job": "j1", "account": "a", "state": "succeeded", "cost": 40, "priority": 1,
        "pool": "general", "charged": 40, "paid_by": [{"grant": "g1", "amount": 40}],
        "reason": None}


def test_a_job_whose_owners_submit_arrived_last_names_its_payers_and_its_revisions(
        client: TestClient) -> None:
    post(client, GRANT_A,
         {"type": "grant", "account": "b", "amount": 100, "time": 0, "id": "gb"},
         {"type": "submit", "account": "a", "job": "j1", "cost": 40, "priority": 1,
          "time": 10, "id": "sa"},
         {"type": "start", "job": "j1", "time": 20, "id": "st1"},
         {"type": "complete", "job": "j1", "success": True, "time": 30, "id": "c1"})
    # b's submit of the same id, earlier on the timeline: the job is b's.
    post(client, {"type": "submit", "account": "b", "job": "j1", "cost": 25, "priority": 1,
                  "time": 5, "id": "sb"})
    assert stream_of(client, "c1") == "a"
    job = client.get("/v1/jobs/j1").json()
    assert (job["account"], job["charged"], job["paid_by"]) == (
        "b", 25, [{"grant": "gb", "amount": 25}])
    revised = {r["event_id"]: r["account"]
               for r in client.get("/v1/revisions").json()["revisions"]}
    assert revised == {"sa": "a", "c1": "b"}  # a's submit, b's job's completion
    assert [r["event_id"] for r in client.get("/v1/revisions?account=b").json()[
        "revisions"]] == ["c1"]
    assert [r["event_id"] for r in client.get("/v1/revisions?account=a").json()[
        "revisions"]] == ["sa"]


def test_the_revision_of_a_start_that_came_before_its_submit_is_its_accounts(
        client: TestClient) -> None:
    post(client, GRANT_A, {"type": "start", "job": "j1", "time": 20, "id": "st1"})
    post(client, {"type": "submit", "account": "a", "job": "j1", "cost": 10, "priority": 1,
                  "time": 10, "id": "s1"})
    assert stream_of(client, "st1") == "job:j1"
    (revision,) = client.get("/v1/revisions").json()["revisions"]
    assert (revision["event_id"], revision["account"]) == ("st1", "a")
    assert client.get("/v1/revisions?account=a").json()["revisions"] == [revision]
    # The stream of the job's early events is no account: 404, as for a misspelt name.
    problem(client.get("/v1/revisions?account=job:j1"), 404)
    problem(client.get("/v1/revisions?account=nobody"), 404)
    # A blank name is a bad parameter, in the API's words (not the journal's "stream").
    blank = problem(client.get("/v1/revisions?account="), 422)
    assert blank["detail"].startswith("query.account:") and "stream" not in blank["detail"]


def test_a_statement_keeps_the_reversal_of_a_start_that_came_before_its_submit(
        client: TestClient) -> None:
    post(client, GRANT_A)
    post(client, {"type": "start", "job": "j1", "time": 20, "id": "st1"})
    post(client, {"type": "submit", "account": "a", "job": "j1", "cost": 10, "priority": 1,
                  "time": 10, "id": "s1"})
    post(client, {"type": "reverse", "event": "st1", "time": 30, "reason": "wrong job",
                  "id": "r1"})
    assert stream_of(client, "r1") == "job:j1"  # the stream of the event it names
    lines = client.get("/v1/accounts/a/statement").json()["lines"]
    assert [(line["event_id"], line["status"]) for line in lines] == [
        ("g1", "ok"), ("s1", "ok"), ("st1", "reversed"), ("r1", "ok")]


def test_the_statement_answers_in_the_order_of_statement_json(client: TestClient) -> None:
    post(client, GRANT_A)
    body = client.get("/v1/accounts/a/statement").json()
    assert list(body) == ["account", "from", "to", "as_known_at", "opening", "lines",
                          "closing", "subtotals"]


def test_a_job_whose_submit_was_reversed_is_404_naming_the_reversed_submit(
        client: TestClient) -> None:
    post(client, GRANT_A, {"type": "submit", "account": "a", "job": "j1", "cost": 10,
                           "priority": 1, "time": 10, "id": "s1"})
    post(client, {"type": "reverse", "event": "s1", "reason": "wrong account", "time": 10,
                  "id": "r1"})
    assert problem(client.get("/v1/jobs/j1"), 404)["detail"] == (
        "unknown job 'j1': its submit 's1' was reversed, so it was never submitted "
        "(`explain --job` lists its events)")
    assert problem(client.get("/v1/jobs/j2"), 404)["detail"] == (
        "unknown job 'j2' (no submit names it)")


def test_an_unknown_job_is_named_shortened_and_a_decomposed_one_escaped(
        client: TestClient) -> None:
    # A path may hold any length of id: the refusal stays one short line (it echoed
    # every character of a 10,000-character id), and a decomposed id is told apart from
    # the composed one it looks exactly like, as an unknown account is.
    long = "j" * 10_000
    assert problem(client.get(f"/v1/jobs/{long}"), 404)["detail"] == (
        f"unknown job '{'j' * 39}... (10000 characters) (no submit names it)")
    assert problem(client.get("/v1/jobs/cafe\u0301"), 404)["detail"] == (
        "unknown job 'cafe\\u0301' (no submit names it)")


def test_a_job_whose_submits_were_reversed_names_them_in_timeline_order(
        client: TestClient) -> None:
    """The answer is the same whatever order the submits arrived in: the later one on the
    timeline, recorded first, is still named second."""
    post(client, GRANT_A, {"type": "submit", "account": "a", "job": "j1", "cost": 10,
                           "priority": 1, "time": 30, "id": "s-late"})
    post(client, {"type": "reverse", "event": "s-late", "reason": "duplicate", "time": 40,
                  "id": "r1"})
    post(client, {"type": "submit", "account": "a", "job": "j1", "cost": 10,
                  "priority": 1, "time": 20, "id": "s-early"})
    post(client, {"type": "reverse", "event": "s-early", "reason": "duplicate", "time": 40,
                  "id": "r2"})
    assert problem(client.get("/v1/jobs/j1"), 404)["detail"] == (
        "unknown job 'j1': its submits 's-early', 's-late' were reversed, so it was never "
        "submitted (`explain --job` lists its events)")


def test_the_revisions_of_the_steps_of_a_job_whose_submit_was_reversed_are_its_accounts(
        client: TestClient) -> None:
    """The reversal of a submit revises what the job's start and completion did for the
    submit's account (the charge is gone): those revisions are that account's, in
    `GET /v1/revisions` and `gpu-credits revisions` alike, though the fold at the head no
    longer holds the job. A step no submit ever named stays no account's."""
    from projections import owners
    from projections.replay import replay

    post(client, GRANT_A, {"type": "grant", "account": "b", "amount": 100, "time": 0,
                           "id": "g2"},
         {"type": "submit", "account": "a", "job": "j1", "cost": 10, "priority": 1,
          "time": 10, "id": "s1"},
         {"type": "start", "job": "j1", "time": 20, "id": "st1"},
         {"type": "complete", "job": "j1", "success": True, "time": 30, "id": "c1"},
         {"type": "start", "job": "j9", "time": 25, "id": "st9"})
    post(client, {"type": "reverse", "event": "s1", "reason": "wrong account", "time": 40,
                  "id": "r1"})
    revised = {r["event_id"]: r["account"]
               for r in client.get("/v1/revisions").json()["revisions"]}
    assert revised == {"s1": "a", "st1": "a", "c1": "a"}
    listed = client.get("/v1/revisions?account=a").json()["revisions"]
    assert [r["event_id"] for r in listed] == ["s1", "st1", "c1"]
    journal = client.app.state.ledger.journal  # type: ignore[attr-defined]
    report = replay(journal)
    assert owners.revision_accounts(journal, report.ledger,
                                    [r.event_id for r in report.revisions]) == revised
    # The step of a job no submit names: no account's figures hold it, then or now.
    assert owners.revision_accounts(journal, report.ledger, ["st9"]) == {"st9": None}
