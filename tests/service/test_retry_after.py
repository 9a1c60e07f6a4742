"""A 503 says when a retry may get past it (`Retry-After`), and only then."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from eventstore import (
    ConnectionProblem,
    Journal,
    JournalError,
    LockTimeout,
    ReadOnlyJournal,
    SchemaError,
)
from tools.service import create_app
from tools.service.problems import Unavailable, from_exception, retry_after


def test_only_a_503_that_waiting_can_get_past_names_a_wait() -> None:
    assert retry_after(LockTimeout("held")) == "1"
    assert retry_after(Unavailable("the service is starting")) == "1"
    assert retry_after(ConnectionProblem("refused")) == "5"
    for lasting in (ReadOnlyJournal("read-only"), SchemaError("behind"),
                    JournalError("the disk is full")):
        assert retry_after(lasting) is None
        assert "retry-after" not in from_exception(lasting).headers
    assert from_exception(LockTimeout("held")).headers["retry-after"] == "1"
    # Not on an answer other than a 503, whatever the exception carries.
    assert "retry-after" not in from_exception(ValueError("bad")).headers


def test_a_write_behind_another_writer_s_lock_is_told_to_retry_in_a_second(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    journal = Journal(url, lock_timeout=0.2)
    with TestClient(create_app(journal, clock=lambda: 100, mount_web=False)) as client:
        assert client.post("/v1/accounts", json={"account": "a"}).status_code == 201
        other = sqlite3.connect(tmp_path / "j.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            refused = client.post("/v1/accounts/a/grants", json={"amount": 5},
                                  headers={"Idempotency-Key": "g-1"})
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["content-type"] == "application/problem+json"
        # Retried as told, with the same key: recorded once.
        again = client.post("/v1/accounts/a/grants", json={"amount": 5},
                            headers={"Idempotency-Key": "g-1"})
        assert again.status_code == 201
        assert client.get("/v1/accounts/a/balance").json()["balance"] == 5


def test_a_write_to_a_journal_open_read_only_names_no_wait(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with TestClient(create_app(url, clock=lambda: 100, mount_web=False)) as client:
        assert client.post("/v1/accounts", json={"account": "a"}).status_code == 201
    read_only = Journal(url, read_only=True)
    with TestClient(create_app(read_only, clock=lambda: 100, mount_web=False)) as client:
        refused = client.post("/v1/accounts/a/grants", json={"amount": 5})
        assert refused.status_code == 503
        assert "retry-after" not in refused.headers
        # Said to an HTTP client, which has no read_only=True to change.
        detail = refused.json()["detail"]
        assert "read-only" in detail and "read_only=True" not in detail
        assert "nothing was written" in detail


def test_serve_waits_for_another_writer_s_lock_as_long_as_told(tmp_path: Path) -> None:
    """`serve --lock-timeout`: how long a write waits behind another writer (an import
    of millions of lines may want more than the 10 s default), said in the 503."""
    import httpx

    from tests.service import server

    path = tmp_path / "j.db"
    Journal(f"sqlite:///{path}").close()
    with server.running(f"sqlite:///{path}", tmp_path / "serve.log",
                        "--lock-timeout", "0.5") as svc:
        assert httpx.post(f"{svc.base}/v1/accounts", json={"account": "a"}).status_code == 201
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            refused = httpx.post(f"{svc.base}/v1/accounts/a/grants", json={"amount": 5},
                                 headers={"Idempotency-Key": "g-1"}, timeout=60)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert refused.status_code == 503, refused.text
        assert "for 0.5 s" in refused.json()["detail"]
        assert refused.headers["retry-after"] == "1"


def test_serve_refuses_a_lock_timeout_that_is_no_wait(tmp_path: Path) -> None:
    import subprocess

    from tests.service.server import GPU_CREDITS

    done = subprocess.run([GPU_CREDITS, "--db", f"sqlite:///{tmp_path / 'j.db'}", "serve",
                           "--lock-timeout", "0"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert "--lock-timeout" in done.stderr and "0.01" in done.stderr
    assert not (tmp_path / "j.db").exists()


def test_a_projection_that_cannot_be_reloaded_says_why_and_when_to_retry(
        tmp_path: Path) -> None:
    """After a batch that did not commit, the projection is rebuilt from the journal on
    the next request; if the database is out of reach then, the 503 names the server and
    says to retry in 5 s, as any other request's does (it said only the exception's class
    name, and 1 s)."""
    url = f"sqlite:///{tmp_path / 'j.db'}"
    app = create_app(url, clock=lambda: 100, mount_web=False)
    with TestClient(app) as client:
        assert client.post("/v1/accounts", json={"account": "a"}).status_code == 201
        service = app.state.ledger
        reload = service._load
        causes = [ConnectionProblem("cannot reach PostgreSQL at db:5432: refused"),
                  SchemaError("the journal's schema is behind: run gpu-credits db upgrade")]
        for cause in causes:
            def unreachable(*, only_if_stale: bool = False, cause: Exception = cause) -> None:
                raise cause

            service._load = unreachable
            service._stale = True
            refused = client.get("/v1/accounts/a/balance", params={"at": 100})
            assert refused.status_code == 503, refused.text
            assert str(cause) in refused.json()["detail"]
            assert refused.headers.get("retry-after") == retry_after(cause)
        service._load = reload
        assert client.get("/v1/accounts/a/balance").status_code == 200


def test_a_start_up_that_cannot_load_says_when_to_retry_as_its_cause_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the start-up load fails and is retried, a request's 503 names the cause and
    its Retry-After: none for a journal whose chain is broken (no wait mends it), 5 s for
    a database out of reach. (It said 1 s whatever the cause: a client told so retried a
    broken journal every second, forever.) A shutdown meanwhile does not wait for the
    next try: with an hour between tries, it still ends (it waited the wait out)."""
    import threading
    import time

    from tools.service import app as app_module

    monkeypatch.setattr(app_module, "LOAD_RETRY_SECONDS", 3600.0)

    path = tmp_path / "j.db"
    url = f"sqlite:///{path}"
    with TestClient(create_app(url, clock=lambda: 100, mount_web=False)) as client:
        for n in range(3):  # the checkpoint at shutdown verifies position 3
            assert client.post("/v1/accounts", json={"account": f"a{n}"}).status_code == 201
    with sqlite3.connect(path) as db:  # the tail cut behind the journal's back
        db.execute("DELETE FROM events WHERE position = 3")
    app = create_app(url, clock=lambda: 100, mount_web=False, load_in_background=True)
    client = TestClient(app).__enter__()
    deadline = time.monotonic() + 30
    while app.state.ledger.load_error is None:
        assert time.monotonic() < deadline, "the load did not fail"
        time.sleep(0.02)
    refused = client.get("/v1/accounts")
    assert refused.status_code == 503, refused.text
    assert "ChainBroken" in refused.json()["detail"]
    assert "retry-after" not in refused.headers
    assert client.get("/readyz").status_code == 503
    shutdown = threading.Thread(target=client.__exit__, args=(None, None, None),
                                daemon=True)
    shutdown.start()
    shutdown.join(60)
    assert not shutdown.is_alive(), "the shutdown waited for the next try to load"
