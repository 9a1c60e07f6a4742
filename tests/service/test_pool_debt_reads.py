"""The service's answers about pools and debt are the model's
(`tests.projections.pool_debt_model`): balances per pool at the latest time and at
earlier ones, every account, and as known at a position, while batches of events arrive
late over the HTTP API, then again from a service restarted on a checkpoint saved
mid-history with more late events recorded after it, and restarted once more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from hypothesis import given, note, settings
from hypothesis import strategies as st

from eventstore import Journal
from projections.replay import replay
from tests.projections import pool_debt_model as model
from tests.replay.test_pool_debt_surfaces import ACCOUNTS, Row, _events, recorded
from tools.service import create_app


def _line(row: Row) -> dict[str, Any]:
    event_id, kind, time, payload, _ = row
    return {"type": kind, "id": event_id, "time": time, **payload}


def _assert_model(client: TestClient, batches: list[list[Row]], head: int,
                  times: list[int]) -> None:
    latest = max(time for _, _, time, _ in _events(batches, head))
    for at in (None, *times):
        when = latest if at is None else at
        want = model.fold(_events(batches, head), when)
        params = {} if at is None else {"at": at}
        listed = {row["account"]: row for row in client.get("/v1/accounts",
                                                             params=params).json()}
        for account in ACCOUNTS:
            got = client.get(f"/v1/accounts/{account}/balance", params=params)
            if account not in want:
                continue
            expected = want[account]
            answer = got.json()
            assert got.status_code == 200, answer
            assert (answer["pools"], answer["debt"], answer["balance"]) == (
                expected.pools, sum(expected.debt.values()), expected.balance), (at, answer)
            assert listed[account]["pools"] == expected.pools, (at, listed[account])
    # As known at a position: the model of the events recorded up to it.
    for position in range(1, head + 1, 3):
        want = model.fold(_events(batches, position), latest)
        for account, expected in want.items():
            answer = client.get(f"/v1/accounts/{account}/balance",
                                params={"at": latest, "as_known_at": position}).json()
            assert (answer["pools"], answer["debt"]) == (
                expected.pools, sum(expected.debt.values())), (position, answer)


@settings(max_examples=6, deadline=None)
@given(recorded().filter(lambda b: len(b) > 1), st.data())
def test_the_services_pools_and_debt_are_the_models(tmp_path_factory: Any,
                                                    batches: list[list[Row]],
                                                    data: st.DataObject) -> None:
    note(f"batches: {batches!r}")
    url = f"sqlite:///{Path(tmp_path_factory.mktemp('pools')) / 'service.db'}"
    cut = data.draw(st.integers(1, len(batches) - 1), label="checkpoint after batch")
    times = [0, 3, 7, 13]
    head = 0
    with TestClient(create_app(url, clock=lambda: 20, mount_web=False)) as client:
        for batch in batches[:cut]:
            got = client.post("/v1/events", json={"events": [_line(row) for row in batch]})
            assert got.status_code == 200, got.json()
            head += len(batch)
        _assert_model(client, batches, head, times)
    replay(Journal(url), checkpoint=True, checkpoint_every=2)
    with TestClient(create_app(url, clock=lambda: 20, mount_web=False)) as client:
        _assert_model(client, batches, head, times)
        for batch in batches[cut:]:
            got = client.post("/v1/events", json={"events": [_line(row) for row in batch]})
            assert got.status_code == 200, got.json()
            head += len(batch)
        _assert_model(client, batches, head, times)
    # Restarted again: its newest checkpoint is one the events recorded since land
    # before, which a live projection resumes from all the same.
    with TestClient(create_app(url, clock=lambda: 20, mount_web=False)) as client:
        _assert_model(client, batches, head, times)
