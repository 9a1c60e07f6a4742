"""The service when the journal's storage misbehaves: a full disk, a read-only journal.

A full disk is SQLite's own SQLITE_FULL, made with `PRAGMA max_page_count` on the
service's connections: each write is refused with a problem+json 503 that names the
disk, nothing of it is stored, and once there is room the same requests go through.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from eventstore import Journal, NewEvent
from tests.service import server
from tools.service import create_app


def _grant(client: TestClient, key: str, memo_size: int = 1000) -> Any:
    return client.post("/v1/accounts/acct/grants", json={"amount": 5, "memo": "m" * memo_size},
                       headers={"Idempotency-Key": key})


def test_a_full_disk_is_a_503_naming_it_and_the_service_recovers(tmp_path: Path) -> None:
    path = tmp_path / "service.db"
    journal = Journal(f"sqlite:///{path}")
    journal.append([NewEvent("open", "account:acct", "account", 0, {"account": "acct"})])
    with journal._engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
    assert isinstance(pages, int)
    limit = {"pages": pages + 2}

    def no_more_pages(dbapi_conn: sqlite3.Connection, record: Any) -> None:
        dbapi_conn.execute(f"PRAGMA max_page_count = {limit['pages']}")

    event.listen(journal._engine, "connect", no_more_pages)
    journal._engine.dispose()
    with TestClient(create_app(journal, clock=lambda: 100, mount_web=False,
                               checkpoint_every=1)) as client:
        answers = [_grant(client, f"k{i}") for i in range(40)]
        codes = [a.status_code for a in answers]
        assert 201 in codes and 503 in codes, codes
        refused = [a for a in answers if a.status_code == 503]
        for answer in refused:
            assert answer.headers["content-type"] == "application/problem+json"
            assert f"the disk holding {tmp_path} is full" in answer.json()["detail"]
        acknowledged = [f"k{i}" for i, code in enumerate(codes) if code == 201]
        assert journal.head() == 1 + len(acknowledged)
        assert journal.verify() is None
        # Room again (the limit lifted): every refused request goes through on retry,
        # and every acknowledged one is answered as before, recorded once.
        limit["pages"] = 1_000_000
        journal._engine.dispose()
        again = [_grant(client, f"k{i}") for i in range(40)]
        assert [a.status_code for a in again] == [201] * 40
        assert journal.head() == 41
        assert client.get("/v1/accounts/acct/balance").json()["balance"] == 200
    with Journal(f"sqlite:///{path}", read_only=True) as reopened:
        assert reopened.head() == 41
        assert reopened.verify() is None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.skipif(not Path(server.GPU_CREDITS).exists(), reason="no gpu-credits script")
def test_serve_read_only_answers_reads_and_refuses_writes(tmp_path: Path) -> None:
    """An auditor's copy: `serve --read-only` opens it read-only (so it serves a file on
    a read-only mount too); reads and the web view answer, a write is a 503 saying the
    journal is read-only, and the file is left as it was."""
    path = tmp_path / "copy.db"
    with Journal(f"sqlite:///{path}") as journal:
        journal.append([NewEvent("open", "account:acct", "account", 0, {"account": "acct"}),
                        NewEvent("g1", "account:acct", "grant", 1,
                                 {"account": "acct", "amount": 7})])
    before = _digest(path)
    import httpx

    with server.running(f"sqlite:///{path}", tmp_path / "serve.log", "--read-only") as svc:
        balance = httpx.get(f"{svc.base}/v1/accounts/acct/balance")
        assert balance.status_code == 200
        assert balance.json()["balance"] == 7
        assert httpx.get(f"{svc.base}/").status_code == 200
        write = httpx.post(f"{svc.base}/v1/accounts/acct/grants", json={"amount": 5})
        assert write.status_code == 503
        assert write.headers["content-type"] == "application/problem+json"
        assert "read-only" in write.json()["detail"]
    log = (tmp_path / "serve.log").read_text()
    assert "the journal is open read-only" in log
    assert _digest(path) == before
