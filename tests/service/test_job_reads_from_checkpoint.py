"""A job read of a service that started from a checkpoint: the projection remembers no
outcome from before it, so who paid and why a submit was refused are found by folding
the streams that hold the job's events (its account's, `job:<id>`, the streams of other
submits of its id), never the whole journal, and say what a service that folded every
event itself says."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal
from tests.arrivals import JOBS, arrival, histories
from tools.service.app import create_app


@contextmanager
def serving(journal: MemoryJournal) -> Iterator[TestClient]:
    with TestClient(create_app(journal, clock=lambda: 1_000)) as client:
        yield client


def whole_journal_reads(journal: MemoryJournal) -> list[dict[str, Any]]:
    """Record the filters of every read of `journal` that is not of one stream."""
    seen: list[dict[str, Any]] = []
    read = journal.read

    def spy(**filters: Any) -> Any:
        if filters.get("stream") is None:
            seen.append(filters)
        return read(**filters)

    journal.read = spy  # type: ignore[method-assign]
    return seen


def job_answers(client: TestClient) -> dict[str, Any]:
    return {job: client.get(f"/v1/jobs/{job}").json() for job in JOBS}


def test_a_resumed_service_names_payers_and_reasons_from_the_jobs_streams() -> None:
    journal = MemoryJournal()
    with serving(journal) as first:
        events = [
            {"type": "grant", "account": "a", "amount": 50, "time": 0, "id": "ga"},
            {"type": "grant", "account": "b", "amount": 500, "time": 0, "id": "gb"},
            {"type": "submit", "account": "a", "job": "j1", "cost": 40, "priority": 1,
             "time": 10, "id": "s1"},
            {"type": "submit", "account": "a", "job": "j2", "cost": 40, "priority": 1,
             "time": 11, "id": "s2"},  # 10 left: refused
            {"type": "start", "job": "j1", "time": 20, "id": "st1"},
            {"type": "complete", "job": "j1", "success": True, "time": 30, "id": "c1"},
            *({"type": "consume", "account": "b", "amount": 1, "time": 40 + i,
               "id": f"u{i}"} for i in range(50)),
        ]
        assert first.post("/v1/events", json={"events": events}).status_code == 200
        remembered = {"j1": first.get("/v1/jobs/j1").json(),
                      "j2": first.get("/v1/jobs/j2").json()}
    assert remembered["j1"]["paid_by"] == [{"grant": "ga", "amount": 40}]
    assert remembered["j2"]["reason"]
    # The first service's graceful stop left a checkpoint of all 56 events.
    with serving(journal) as resumed:
        session = resumed.app.state.ledger.session  # type: ignore[attr-defined]
        assert session.remembered_outcome(journal.get("c1")) is None
        whole = whole_journal_reads(journal)
        assert {"j1": resumed.get("/v1/jobs/j1").json(),
                "j2": resumed.get("/v1/jobs/j2").json()} == remembered
    assert whole == []


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories(), st.data())
def test_a_resumed_service_answers_every_job_read_as_one_that_folded_every_event(
        events: list[dict[str, Any]], data: st.DataObject) -> None:
    journal = MemoryJournal()
    with serving(journal) as first:
        for batch in arrival(events, data, "order"):
            assert first.post("/v1/events", json={"events": batch}).status_code == 200
        folded = job_answers(first)
    with serving(journal) as resumed:
        session = resumed.app.state.ledger.session  # type: ignore[attr-defined]
        assert all(session.remembered_outcome(rec) is None
                   for rec in journal.read(order="position"))
        assert job_answers(resumed) == folded
