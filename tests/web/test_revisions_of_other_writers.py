"""An account's revisions on the web view of a service whose live projection has not yet
read what another writer (another replica, the command line) recorded: the revisions are
found from the journal, so the account each revised event belongs to must be too, or a
job's step whose submit the projection has not read yet belongs to no account and the
page leaves its revision out (and keeps leaving it out while the head stays)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from eventstore import Journal, NewEvent
from projections.replay import replay
from tests.web.pagetext import cells
from tools.service import ledger as service_ledger
from tools.service.app import create_app


def event(stream: str, type_: str, time: int, event_id: str, **payload: object) -> NewEvent:
    return NewEvent(stream=stream, type=type_, time=time, id=event_id, payload=payload)


def test_a_job_step_submitted_by_another_writer_keeps_its_revision_on_the_page(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with TestClient(create_app(url, clock=lambda: 1_000)) as client:
        grant = {"type": "grant", "account": "b", "amount": 50, "time": 0, "id": "gb"}
        assert client.post("/v1/events", json={"events": [grant]}).status_code == 200
        assert client.get("/accounts/b").status_code == 200  # the projection is caught up
        # Another writer records a job of b, then usage earlier on the timeline that
        # leaves too little for it: its submit is refused, its start and completion
        # become anomalies. The service's projection has not looked again yet.
        monkeypatch.setattr(service_ledger, "READ_FRESHNESS", 3600.0)
        with Journal(url) as other:
            other.append([event("b", "submit", 10, "ks", account="b", job="k", cost=40,
                                priority=1),
                          event("b", "start", 20, "kst", job="k"),
                          event("b", "complete", 30, "kc", job="k", success=True)])
            other.append([event("b", "consume", 5, "late", account="b", amount=45)])
            expected = [[r.late_event_id, r.event_id] for r in replay(other).revisions]
        assert len(expected) == 3
        for freshness in (3600.0, 0.0):  # behind, then caught up at the same head
            monkeypatch.setattr(service_ledger, "READ_FRESHNESS", freshness)
            page = client.get("/accounts/b")
            assert page.status_code == 200
            shown = [[row[0].split(" ")[0], row[2].split(" ")[0]]
                     for row in cells(page.text, "revisions-table")]
            assert shown == expected, freshness
