"""`GET /v1/revisions` keeps the projector a replay folds with and feeds it only what was
recorded since it last answered: after a write it reads the new events, not the journal,
and says what a replay of the whole journal says (`gpu-credits revisions`), accounts
included. The web view, mounted beside it, catches up the same projector."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal
from projections import owners, queries
from projections.replay import replay
from tests.arrivals import arrival, histories
from tools import wording
from tools.service.app import create_app


def replayed(journal: MemoryJournal) -> list[dict[str, Any]]:
    """The revisions as one replay of the whole journal finds them, with each revised
    event's account as that replay's fold holds it."""
    report = replay(journal)
    accounts = owners.revision_accounts(journal, report.ledger,
                                        (r.event_id for r in report.revisions))
    return [{**wording.to_dict(row), "account": accounts[row.revision.event_id]}
            for row in queries.revision_rows(journal, report.revisions)]


def all_revisions(client: TestClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after: int | None = 0
    while after is not None:
        page = client.get(f"/v1/revisions?after={after}&limit=2").json()
        found += page["revisions"]
        after = page["next"]
    return found


GRANT = {"type": "grant", "account": "a", "amount": 100, "time": 0, "id": "g1"}


def test_after_a_write_only_the_new_events_are_folded() -> None:
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 1_000)) as client:
        # Another account on the ledger: the late event's own account is refolded alone,
        # from its own stream (an account alone on the ledger refolds the whole timeline,
        # its own, which reads the journal from the start when no snapshot is held yet).
        other = {"type": "grant", "account": "b", "amount": 1, "time": 0, "id": "g-b"}
        events = [GRANT, other, *({"type": "consume", "account": "a", "amount": 1,
                                   "time": 10 + i, "id": f"u{i}"} for i in range(20))]
        assert client.post("/v1/events", json={"events": events}).status_code == 200
        assert client.get("/v1/revisions").json() == {"revisions": [], "next": None, "seen": 0}
        froms: list[int] = []

        def spy(read: Any) -> Any:
            def reading(**filters: Any) -> Any:
                if filters.get("stream") is None:
                    froms.append(filters.get("after_position", 0))
                return read(**filters)
            return reading

        journal.read = spy(journal.read)  # type: ignore[method-assign]
        journal.read_lean = spy(journal.read_lean)  # type: ignore[method-assign]
        # Usage earlier on the timeline than the 20 reports: each of them now goes into debt.
        late = [{"type": "consume", "account": "a", "amount": 95, "time": 5, "id": "late"}]
        assert client.post("/v1/events", json={"events": late}).status_code == 200
        revisions = client.get("/v1/revisions").json()["revisions"]
        assert revisions and {r["late_event_id"] for r in revisions} == {"late"}
        assert froms and min(froms) == 22  # what came after the 22 events folded before
        assert revisions == replayed(journal)


def test_the_web_view_and_the_api_share_one_projector() -> None:
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 1_000)) as client:
        assert client.post("/v1/events", json={"events": [GRANT]}).status_code == 200
        assert client.get("/").status_code == 200  # the web view made its source
        state = client.app.state  # type: ignore[attr-defined]
        assert state.web_source.revision_log is state.revision_log


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories(), st.data())
def test_revisions_asked_after_every_batch_are_a_replays(
        events: list[dict[str, Any]], data: st.DataObject) -> None:
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 1_000)) as client:
        for batch in arrival(events, data, "order"):
            assert client.post("/v1/events", json={"events": batch}).status_code == 200
            assert all_revisions(client) == replayed(journal)
