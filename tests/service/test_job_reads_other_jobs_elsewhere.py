"""A job's payers and reason depend on the account's other jobs too: what they held when
the job was submitted decides which grants its hold took and whether it was refused. A
step of another job of the account recorded before that job's submit lies in the other
job's own stream, `job:<id>`: the job read of a service resumed from a checkpoint, and
the web view's job page, must still say what `explain --job` says."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from eventstore import MemoryJournal
from projections.queries.explain import explain_job
from tools.service.app import create_app

GRANTS = [
    # Used first (lower priority number): the cheap grant the first job held.
    {"type": "grant", "account": "a", "amount": 10, "priority": 10, "time": 0, "id": "g1"},
    {"type": "grant", "account": "a", "amount": 100, "time": 0, "id": "g2"},
]
# The first job's cancel arrives before its submit: it is filed in `job:j0`.
EARLY_CANCEL = [{"type": "cancel", "job": "j0", "time": 15, "id": "x0"}]
JOBS = [
    {"type": "submit", "account": "a", "job": "j0", "cost": 10, "priority": 1, "time": 10,
     "id": "s0"},
    {"type": "submit", "account": "a", "job": "j1", "cost": 10, "priority": 1, "time": 20,
     "id": "s1"},
    {"type": "start", "job": "j1", "time": 25, "id": "t1"},
    {"type": "complete", "job": "j1", "success": True, "time": 30, "id": "c1"},
]


def answers(journal: MemoryJournal, job: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A resumed service's job read (nothing remembered), and the first service's."""
    with TestClient(create_app(journal, clock=lambda: 1_000)) as first:
        for batch in (GRANTS + EARLY_CANCEL, JOBS):
            assert first.post("/v1/events", json={"events": batch}).status_code == 200
        remembered = first.get(f"/v1/jobs/{job}").json()
    with TestClient(create_app(journal, clock=lambda: 1_000)) as resumed:
        return resumed.get(f"/v1/jobs/{job}").json(), remembered


def test_payers_follow_a_cancel_of_another_job_filed_in_its_own_stream() -> None:
    journal = MemoryJournal()
    resumed, remembered = answers(journal, "j1")
    # j0 was cancelled before j1 was submitted: j1's hold, and so its charge, took g1.
    assert list(explain_job(journal, "j1").paid_by) == [("g1", 10)]
    assert remembered["paid_by"] == [{"grant": "g1", "amount": 10}]
    assert resumed["paid_by"] == remembered["paid_by"]


def test_the_job_page_names_the_payers_explain_names(tmp_path: Any) -> None:
    journal = MemoryJournal()
    answers(journal, "j1")
    with TestClient(create_app(journal, clock=lambda: 1_000)) as client:
        page = client.get("/jobs/j1")
        assert page.status_code == 200
        paid = page.text[page.text.index('id="paid"'):]
        paid = paid[:paid.index("</table>")]
        assert ">g1<" in paid and ">g2<" not in paid


def test_payers_follow_a_cancel_filed_in_another_accounts_stream() -> None:
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 1_000)) as first:
        known_first = [
            *GRANTS,
            {"type": "grant", "account": "b", "amount": 100, "time": 0, "id": "gb"},
            # b's submit of j0 is the one known when the cancel arrives: the cancel is
            # filed in b's stream; a's earlier submit of the id, arriving next, owns it.
            {"type": "submit", "account": "b", "job": "j0", "cost": 1, "priority": 1,
             "time": 12, "id": "sb0"},
            {"type": "cancel", "job": "j0", "time": 15, "id": "x0"},
        ]
        for batch in (known_first, JOBS):
            assert first.post("/v1/events", json={"events": batch}).status_code == 200
        remembered = first.get("/v1/jobs/j1").json()
    cancel = journal.get("x0")
    assert cancel is not None and cancel.stream == "b"
    assert remembered["paid_by"] == [{"grant": "g1", "amount": 10}]
    with TestClient(create_app(journal, clock=lambda: 1_000)) as resumed:
        assert resumed.get("/v1/jobs/j1").json() == remembered
        page = resumed.get("/jobs/j1").text
        paid = page[page.index('id="paid"'):]
        assert ">g1<" in paid[:paid.index("</table>")]



def test_a_refusal_counts_only_the_holds_the_fold_counts() -> None:
    """b's stream holds its submit of an id a submitted first: the fold does not count it
    (an anomaly), so it holds nothing when b's next submit is refused; b's stream alone
    would take it as accepted."""
    journal = MemoryJournal()
    events = [
        {"type": "grant", "account": "a", "amount": 5, "time": 10, "id": "ga"},
        {"type": "grant", "account": "b", "amount": 5, "time": 20, "id": "gb"},
        {"type": "submit", "account": "a", "job": "j1", "cost": 1, "priority": 1,
         "time": 30, "id": "sa1"},
        {"type": "submit", "account": "b", "job": "j1", "cost": 1, "priority": 1,
         "time": 40, "id": "sb1"},
        {"type": "submit", "account": "b", "job": "j2", "cost": 6, "priority": 1,
         "time": 50, "id": "sb2"},
    ]
    with TestClient(create_app(journal, clock=lambda: 1_000)) as first:
        for one in events:  # an import each: the duplicate id is taken, as an anomaly
            assert first.post("/v1/events", json={"events": [one]}).status_code == 200
        remembered = first.get("/v1/jobs/j2").json()
    said = explain_job(journal, "j2").reason
    assert said is not None and "held by 0 jobs" in said
    assert remembered["reason"] == said
    with TestClient(create_app(journal, clock=lambda: 1_000)) as resumed:
        assert resumed.get("/v1/jobs/j2").json() == remembered
        page = resumed.get("/jobs/j2")
        assert page.status_code == 200 and "held by 0 jobs" in page.text
