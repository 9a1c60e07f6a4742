"""`GET /v1/jobs/{job}` reads the job's streams (its account's whole history, for a
finished job) without holding the projection's lock, so decisions go on meanwhile; what
was recorded during that read is read under the lock, and the answer is the projection's
at one position: the one `explain --job` gives once the journal holds it."""

from __future__ import annotations

import threading
from typing import Any

from fastapi.testclient import TestClient

from eventstore import MemoryJournal
from projections.queries.explain import explain_job
from tools.service.app import create_app
from tools.service.commands import Grant
from tools.service.ledger import LedgerService


def _lock_is_free(service: LedgerService) -> bool:
    """Whether another thread could take the projection's lock right now."""
    got: list[bool] = []

    def take() -> None:
        lock = service.session.lock
        got.append(lock.acquire(blocking=False))
        if got[0]:
            lock.release()

    thread = threading.Thread(target=take)
    thread.start()
    thread.join()
    return got[0]


def test_a_job_read_lets_decisions_commit_while_it_reads_the_account_history() -> None:
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 1_000)) as client:
        service: LedgerService = client.app.state.ledger  # type: ignore[attr-defined]
        history = [
            {"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 900,
             "id": "ga"},
            {"type": "submit", "account": "a", "job": "j1", "cost": 40, "priority": 1,
             "time": 10, "id": "s1"},
            {"type": "start", "job": "j1", "time": 20, "id": "st1"},
            {"type": "complete", "job": "j1", "success": True, "time": 30, "id": "c1"},
            *({"type": "consume", "account": "a", "amount": 1, "time": 40 + i,
               "id": f"u{i}"} for i in range(20)),
        ]
        assert client.post("/v1/events", json={"events": history}).status_code == 200
        assert client.get("/v1/jobs/j1").json()["paid_by"] == [{"grant": "ga", "amount": 40}]

        free_during_read: list[bool] = []
        read = journal.read

        def spy(**filters: Any) -> Any:
            if filters.get("stream") == "a" and not free_during_read:
                free_during_read.append(_lock_is_free(service))
                if free_during_read[0]:
                    # A late grant expiring first: it, not `ga`, paid for j1 now. The
                    # decision commits while the read is under way.
                    service.decide_now(Grant(key="gb", account="a", amount=100,
                                             expiry=500, pool=None, priority=None,
                                             memo=None, time=0))
            return read(**filters)

        journal.read = spy  # type: ignore[method-assign]
        answer = client.get("/v1/jobs/j1").json()
        journal.read = read  # type: ignore[method-assign]
        assert free_during_read == [True]
        # The grant committed meanwhile is in the answer: the projection's at the
        # position the read finished at, as a read now and `explain --job` say.
        assert answer["paid_by"] == [{"grant": "gb", "amount": 40}]
        assert client.get("/v1/jobs/j1").json() == answer
        explained = explain_job(journal, "j1")
        assert [{"grant": g, "amount": a} for g, a in explained.paid_by] == answer["paid_by"]
        assert (answer["state"], answer["charged"]) == (explained.state, explained.charge)
