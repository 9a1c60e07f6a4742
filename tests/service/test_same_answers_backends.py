"""The service answers a journal alike from every backend: the same history held in
memory, in a SQLite file and in PostgreSQL gives the same bytes for every read (but the
recorded-at times, which are when each database took the events, and the head's hash,
which chains them)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from eventstore import JournalLike
from eventstore.testing import open_journal
from projections.importing import import_file
from tools.service.app import create_app

NAMES = ["Zebra", "apple", "\u00c4pfel", "\u0130stanbul", "\u0131stanbul", "9", "10",
         "\u65e5\u672c", "\u00e4b", "a\u0308b"]
FRACTIONS = [0.1, 0.7, 1 / 3, 0.9, 0.29, 0.57, 0.15, 2 / 3, 0.01, 0.99]
T0 = 1764547200


def month() -> bytes:
    events: list[dict[str, object]] = []
    for i, name in enumerate(NAMES):
        pool = ["h100", "\u00e9pool", "Pool"][i % 3]
        events += [
            {"type": "account", "account": name, "max_running": 2},
            {"type": "grant", "account": name, "amount": 100 + i, "time": T0 + i,
             "expiry": T0 + 864000, "pool": pool, "id": f"g-{i}"},
            {"type": "grant", "account": name, "amount": 50, "time": T0 + i,
             "expiry": T0 + 3600},
            {"type": "consume", "account": name, "amount": 30 + i, "time": T0 + 100 + i,
             "pool": pool, "id": f"u-{i}"},
            {"type": "submit", "account": name, "job": f"j-{i}", "cost": 37 + 3 * i,
             "priority": i % 3, "time": T0 + 200 + i, "pool": pool},
            {"type": "start", "job": f"j-{i}", "time": T0 + 300 + i},
            {"type": "complete", "job": f"j-{i}", "success": False, "time": T0 + 400 + i,
             "refund_fraction": FRACTIONS[i]},
        ]
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events).encode()


def late() -> bytes:
    events = [
        {"type": "consume", "account": "apple", "amount": 500, "time": T0 + 50},
        {"type": "void", "grant": "g-3", "time": T0 + 150, "reason": "cancelled"},
        {"type": "reverse", "event": "u-5", "time": T0 + 600, "reason": "wrong unit"},
        {"type": "submit", "account": "9", "job": "waiting", "cost": 5, "priority": 1,
         "time": T0 + 700},
    ]
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events).encode()


def reads() -> list[tuple[str, dict[str, str]]]:
    asked: list[tuple[str, dict[str, str]]] = [
        # Not the journal's head: its hash chains the recorded-at times.
        ("/v1/accounts", {}), ("/v1/revisions", {}), ("/v1/journal?limit=1000", {}),
        ("/v1/accounts?at=2025-12-01T00:02:00Z&as_known_at=40", {}),
    ]
    for name in NAMES:
        base = f"/v1/accounts/{quote(name, safe='')}"
        asked += [(f"{base}/balance", {}), (f"{base}/statement", {}),
                  (f"{base}/statement", {"Accept": "text/csv"}),
                  (f"{base}/balance?as_known_at=70", {})]
    asked += [(f"/v1/jobs/j-{i}", {}) for i in range(len(NAMES))] + [("/v1/jobs/waiting", {})]
    return asked


def answers(journal: JournalLike) -> dict[str, bytes]:
    for name, data in (("month.jsonl", month()), ("late.jsonl", late())):
        import_file(journal, data, name)
    with TestClient(create_app(journal, clock=lambda: T0 + 10**6, mount_web=False)
                    ) as client:
        said = {}
        for path, headers in reads():
            got = client.get(path, headers=headers)
            assert got.status_code == 200, (path, got.text)
            said[f"{path} {headers}"] = _without_recorded_at(got.content)
        return said


def _without_recorded_at(body: bytes) -> bytes:
    """A JSON body with every `recorded_at` emptied (when each database took the event);
    anything else as it is."""
    try:
        value = json.loads(body)
    except ValueError:
        return body

    def strip(v: object) -> object:
        if isinstance(v, dict):
            return {k: None if k == "recorded_at" else strip(x) for k, x in v.items()}
        if isinstance(v, list):
            return [strip(x) for x in v]
        return v

    return json.dumps(strip(value), ensure_ascii=False).encode()


@pytest.fixture(scope="module")
def from_memory() -> dict[str, bytes]:
    return answers(open_journal("memory"))


@pytest.fixture
def journal(database_url: str) -> Iterator[JournalLike]:
    opened = open_journal(database_url)
    yield opened
    opened.close()


def test_every_read_is_the_same_from_every_backend(
        journal: JournalLike, from_memory: dict[str, bytes]) -> None:
    said = answers(journal)
    assert [k for k in from_memory if said[k] != from_memory[k]] == []
    # The history meets what it is about: late events revised outcomes.
    assert json.loads(from_memory["/v1/revisions {}"])["revisions"]
