"""Statements, the service's largest reads: a few at a time, and none for a client gone.

A statement reads the account's whole history from the journal and holds its answer in
memory until it is sent: 200 of them at once held 1.5 GB, and clients that had hung up
kept the service busy for minutes with answers nobody read."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.requests import Request

from tools.service import reads


def _setup(client: TestClient) -> None:
    assert client.post("/v1/accounts/a/grants", json={"amount": 5, "time": 1}
                       ).status_code == 201


def test_statements_are_read_a_few_at_a_time(client: TestClient,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _setup(client)
    real = reads.queries.statement
    lock, running, most = threading.Lock(), [0], [0]
    gate = threading.Event()

    def counted(*args: Any, **kwargs: Any) -> Any:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == reads.STATEMENTS_AT_ONCE:
                gate.set()
        gate.wait(10)
        try:
            return real(*args, **kwargs)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(reads.queries, "statement", counted)
    many = reads.STATEMENTS_AT_ONCE * 3
    with ThreadPoolExecutor(many) as pool:
        answers = list(pool.map(lambda _: client.get("/v1/accounts/a/statement"),
                                range(many)))
    assert [a.status_code for a in answers] == [200] * many
    assert answers[0].json()["lines"]
    assert most[0] == reads.STATEMENTS_AT_ONCE


def test_a_statement_whose_client_left_while_it_waited_is_not_read(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    _setup(client)
    read: list[str] = []
    real = reads.queries.statement

    def noted(journal: Any, account: str, **kwargs: Any) -> Any:
        read.append(account)
        return real(journal, account, **kwargs)

    async def gone(self: Request) -> bool:
        return True

    monkeypatch.setattr(reads.queries, "statement", noted)
    monkeypatch.setattr(Request, "is_disconnected", gone)
    answer = client.get("/v1/accounts/a/statement")
    assert answer.status_code == 499 and answer.content == b""
    assert read == []
    monkeypatch.undo()
    assert client.get("/v1/accounts/a/statement").status_code == 200
