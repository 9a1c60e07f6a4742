"""A keyed batch of events on two replicas of one PostgreSQL journal: the key is bound in
the journal with the batch's events, under a lock of its own, so two replicas given one
key with two different batches at the same moment append one of them and refuse the
other (409), and either replica answers the winner's retry as it was answered."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from eventstore import Journal
from tests.service.conftest import Clock

pytestmark = pytest.mark.postgres


def _batch(tag: str, n: int = 3) -> dict[str, Any]:
    return {"events": [{"type": "grant", "account": f"{tag}-{i}", "amount": 5, "time": i,
                        "id": f"{tag}-{i}"} for i in range(n)]}


def _at_once(posts: list[tuple[TestClient, dict[str, Any], dict[str, str]]]) -> list[Any]:
    """POST each (client, body, headers) to /v1/events from threads started together."""
    answers: list[Any] = [None] * len(posts)
    start = threading.Barrier(len(posts))

    def send(i: int) -> None:
        client, body, headers = posts[i]
        start.wait()
        answers[i] = client.post("/v1/events", json=body, headers=headers)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(posts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def test_one_key_two_batches_on_two_replicas_at_once(pg_fresh_url: str) -> None:
    from tools.service import create_app

    clock = Clock()
    with (TestClient(create_app(pg_fresh_url, clock=clock, mount_web=False)) as one,
          TestClient(create_app(pg_fresh_url, clock=clock, mount_web=False)) as two):
        for round_ in range(8):
            key = {"Idempotency-Key": f"race-{round_}"}
            bodies = [_batch(f"r{round_}a"), _batch(f"r{round_}b")]
            answers = _at_once([(one, bodies[0], key), (two, bodies[1], key)])
            statuses = sorted(a.status_code for a in answers)
            assert statuses == [200, 409], [a.text for a in answers]
            won = next(i for i, a in enumerate(answers) if a.status_code == 200)
            for client in (one, two):  # either replica, the winner's retry: its answer
                again = client.post("/v1/events", json=bodies[won], headers=key)
                assert (again.status_code, again.json()) == (200, answers[won].json())
                assert client.post("/v1/events", json=bodies[1 - won],
                                   headers=key).status_code == 409
    with Journal(pg_fresh_url) as journal:
        assert journal.head() == 8 * 3 and journal.verify() is None
        assert all(journal.request(f"race-{r}") is not None for r in range(8))
