"""The HTTP service under arbitrary bodies: a rejected request appends nothing, and what it
accepts is exactly what `import` accepts (one validation for every entry)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal
from projections.importing import ImportRejected, import_file
from tools.service import create_app

_scalars = st.one_of(st.none(), st.booleans(), st.integers(),
                     st.floats(allow_nan=False, allow_infinity=False),
                     st.text(max_size=6),
                     st.sampled_from([2**53 - 1, 2**53, 2**63, -(2**63), 10**30, "a\x00",
                                      "team[/red]", 7258118401]))
_events = st.dictionaries(
    st.sampled_from(["type", "account", "amount", "time", "expiry", "pool", "job", "cost",
                     "priority", "success", "refund_fraction", "max_running", "memo"]),
    st.one_of(_scalars, st.sampled_from(["grant", "consume", "submit", "account", "start",
                                         "complete", "cancel", "a"])),
    max_size=7,
)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "service.db"
    with TestClient(create_app(f"sqlite:///{path}", clock=lambda: 100, mount_web=False)) as c:
        yield c


def _head(client: TestClient) -> int:
    position: int = client.get("/v1/journal/head").json()["position"]
    return position


def _import_accepts(events: list[dict[str, Any]]) -> bool:
    data = "".join(json.dumps(e) + "\n" for e in events).encode()
    try:
        import_file(MemoryJournal(), data, "body.jsonl")
    except ImportRejected:
        return False
    return True


@settings(max_examples=75, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_events, min_size=1, max_size=3), st.integers(0, 10**9))
def test_a_rejected_body_appends_nothing(client: TestClient, events: list[dict[str, Any]],
                                         salt: int) -> None:
    before = _head(client)
    answer = client.post("/v1/events", json={"events": events},
                         headers={"Idempotency-Key": f"fuzz-{salt}-{before}"})
    assert answer.status_code in (200, 422), answer.text
    if answer.status_code == 422:
        assert _head(client) == before
        assert answer.headers["content-type"].startswith("application/problem+json")
    # Whatever the service decides about a batch, import decides the same about the file.
    # (Far times are the one rule both refuse alike only without --allow-far-times.)
    assert (answer.status_code == 200) == _import_accepts(events), (events, answer.text)


@pytest.mark.parametrize("body", [
    '{"events": [{"type": "consume", "type": "grant", "account": "a", "amount": 5, '
    '"time": 1}]}',
    '{"events": [{"type": "grant", "account": "a", "amount": 5, "time": NaN}]}',
    '{"events": [{"type": "grant", "account": "a", "amount": ' + "9" * 30 + ', "time": 1}]}',
])
def test_bodies_a_strict_reader_refuses(client: TestClient, body: str) -> None:
    before = _head(client)
    answer = client.post("/v1/events", content=body,
                         headers={"Idempotency-Key": f"strict-{hash(body)}",
                                  "Content-Type": "application/json"})
    assert answer.status_code == 422
    assert _head(client) == before
