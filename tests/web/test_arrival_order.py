"""The same events, each at its own event time, give the same answers whatever order they
arrived in, in every answer that groups events by account: a job's state and payers,
each account's statement (the API's and the web view's ledger), its lineage and its
jobs' explanations; only positions differ. Revisions depend on the arrival order (they
are what late events changed), but each is filed under the account of the event it
revised, the same one in every order.

An import files a job's start, completion or cancel under the account its job had when
it arrived: `job:<id>` before any submit of it, or the stream of another account's
submit of the same id while that was the one known. The arrival orders drawn here make
both happen, with reversals of such steps, and the answers are compared with each other
and with a small model of which account each event belongs to."""

from __future__ import annotations

import csv
import io
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pagetext import cells

from eventstore import MemoryJournal
from projections import queries
from tests.arrivals import ACCOUNTS, JOBS, Event, arrival, histories
from tools.service.app import create_app


def owners(events: list[Event]) -> dict[str, str | None]:
    """The model: the account each event belongs to. A job is the account's whose submit
    comes first on the timeline among those no reversal took out (a rejected one too:
    it holds the id), else, when every submit of it was taken out, the account's of the
    first of those (what the reversal revised was that account's); a job's step is its
    job's account's, or none's when no submit names the job; a reversal is the account's
    of the event it names."""
    by_id = {e["id"]: e for e in events}
    reversals = [e for e in events if e["type"] == "reverse"]

    def out(event_id: str) -> bool:
        return any(r["event"] == event_id and not out(r["id"]) for r in reversals)

    submits = sorted((e for e in events if e["type"] == "submit"), key=lambda e: e["time"])
    job_account: dict[str, str] = {}
    for submit in submits:
        if not out(submit["id"]):
            job_account.setdefault(submit["job"], submit["account"])
    for submit in submits:  # jobs whose every submit was taken out
        job_account.setdefault(submit["job"], submit["account"])

    def owner(event: Event) -> str | None:
        if event["type"] == "reverse":
            return owner(by_id[event["event"]])
        if "account" in event:
            return str(event["account"])
        return job_account.get(event["job"])

    return {e["id"]: owner(e) for e in events}


UNPLACED = ("position", "recorded_at", "late_position")
"""What depends on arrival order: where each event was recorded, and when."""


def unplaced(value: Any) -> Any:
    """`value` (an answer's JSON) without positions and recorded times."""
    if isinstance(value, dict):
        return {k: unplaced(v) for k, v in value.items() if k not in UNPLACED}
    if isinstance(value, list):
        return [unplaced(v) for v in value]
    return value


def answer(response: Any) -> Any:
    return response.status_code, unplaced(response.json())


def ledger_rows(web: TestClient, account: str) -> Any:
    """The web view's ledger of the account, as CSV rows without the position column."""
    r = web.get(f"/accounts/{account}/ledger.csv")
    if r.status_code != 200:
        return r.status_code
    rows = list(csv.DictReader(io.StringIO(r.text)))
    return [{k: v for k, v in row.items() if k != "position"} for row in rows]


def answers(batches: list[list[Event]], model: dict[str, str | None]) -> dict[str, Any]:
    """Every account-grouped answer of a journal the batches were imported into, in order
    (`POST /v1/events`, as `import` files them); checks its revisions against `model`."""
    journal = MemoryJournal()
    found: dict[str, Any] = {}
    with TestClient(create_app(journal, clock=lambda: 1_000)) as web:
        for batch in batches:
            r = web.post("/v1/events", json={"events": batch})
            assert r.status_code == 200, r.text
        for job in JOBS:
            found[f"GET /v1/jobs/{job}"] = answer(web.get(f"/v1/jobs/{job}"))
            try:
                found[f"explain --job {job}"] = unplaced(queries.to_dict(
                    queries.explain_job(journal, job)))
            except LookupError as exc:
                found[f"explain --job {job}"] = str(exc)
        revisions = web.get("/v1/revisions").json()["revisions"]
        for revision in revisions:  # filed under the account of the event it revised
            assert revision["account"] == model[revision["event_id"]], revision
        for account in ACCOUNTS:
            found[f"statement {account}"] = answer(web.get(f"/v1/accounts/{account}/statement"))
            found[f"web ledger {account}"] = ledger_rows(web, account)
            try:
                found[f"explain {account}"] = unplaced(queries.to_dict(
                    queries.explain_account(journal, account)))
            except LookupError as exc:
                found[f"explain {account}"] = str(exc)
            mine = web.get(f"/v1/revisions?account={account}").json()["revisions"]
            assert mine == [r for r in revisions if r["account"] == account]
            page = web.get(f"/accounts/{account}")
            if page.status_code == 200 and mine:
                listed = [row[2].split(" ")[0] for row in cells(page.text, "revisions-table")]
                assert listed == [r["event_id"] for r in mine]
    return found


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories(), st.data())
def test_every_account_grouped_answer_is_the_same_whatever_the_arrival_order(
        events: list[Event], data: st.DataObject) -> None:
    model = owners(events)
    first = answers(arrival(events, data, "first"), model)
    second = answers(arrival(events, data, "second"), model)
    for question, said in first.items():
        assert second[question] == said, question
