"""A running service whose SQLite journal is restored from an older backup under it.

`sqlite3 ledger.db ".restore backup.db"` (SQLite's backup API, into the file the service
holds open) takes the journal back to the backup's head. The service then holds in
memory decisions the journal no longer has: it must say so (503) rather than answer
from them, and record nothing on top of a journal it no longer knows.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from eventstore import Journal
from projections import GPUCreditTracker
from tests.sqlite_copies import online_backup, restored_tables, saved_tables
from tools.service import create_app
from tools.service.ledger import READ_FRESHNESS


def _grant(client: TestClient, key: str) -> Any:
    return client.post("/v1/accounts/acct/grants", json={"amount": 5},
                       headers={"Idempotency-Key": key})


def test_a_restore_behind_what_the_service_served_is_refused_not_answered(
        tmp_path: Path) -> None:
    live, backup = tmp_path / "ledger.db", tmp_path / "backup.db"
    with TestClient(create_app(f"sqlite:///{live}", clock=lambda: 100,
                               mount_web=False)) as client:
        assert _grant(client, "k1").status_code == 201
        online_backup(live, backup)  # the backup holds position 1
        assert _grant(client, "k2").status_code == 201
        assert _grant(client, "k3").status_code == 201
        assert client.get("/v1/accounts/acct/balance").json()["balance"] == 15

        online_backup(backup, live)  # restored under the running service
        time.sleep(READ_FRESHNESS * 2)

        read = client.get("/v1/accounts/acct/balance")
        assert read.status_code == 503, read.text
        assert "ends at position 1" in read.json()["detail"]
        assert "2..3" in read.json()["detail"]
        # What to do, said to an HTTP client and its operator, not a facade's caller.
        assert "GPUCreditTracker" not in read.json()["detail"]
        assert "restart the service" in read.json()["detail"]
        # Readiness says what the reads do: a supervisor or load balancer reading it
        # must not keep sending traffic to a service that refuses every read, nor be
        # told a position the journal no longer has.
        time.sleep(READ_FRESHNESS * 2)
        ready = client.get("/readyz")
        assert ready.status_code == 503, ready.text
        assert ready.json() == {"status": "unavailable"}
        assert client.get("/healthz").status_code == 200  # alive: a write recovers it

        write = _grant(client, "k4")
        assert write.status_code == 503, write.text
        assert "GPUCreditTracker" not in write.json()["detail"]
        assert "retry it" in write.json()["detail"]
        with Journal(f"sqlite:///{live}", read_only=True) as journal:
            assert journal.head() == 1  # nothing recorded on a journal it did not know

        # The refused write rebuilt the projection from the journal as it stands: a
        # retry of a request acknowledged before, gone with the restore, is recorded
        # anew, never told it is held at a position the journal no longer has.
        retry = _grant(client, "k3")
        assert retry.status_code == 201, retry.text
        assert retry.json()["position"] == 2
        assert client.get("/v1/accounts/acct/balance").json()["balance"] == 10

    with Journal(f"sqlite:///{live}", read_only=True) as journal:
        assert [e.id for e in journal.read(order="position")] == ["k1", "k3"]
        assert journal.verify() is None


def _restored_and_written_on(client: TestClient, live: Path, backup: Path, grants: int,
                             *, read: bool = False) -> list[str]:
    """Three grants through the service (5 credits each; with `read`, its balance read
    after them), the file restored to its copy after the first, then `grants` of 100 by
    another process: the journal's ids."""
    assert _grant(client, "k1").status_code == 201
    online_backup(live, backup)
    assert _grant(client, "k2").status_code == 201
    assert _grant(client, "k3").status_code == 201
    if read:
        assert client.get("/v1/accounts/acct/balance").json()["balance"] == 15
    online_backup(backup, live)
    with Journal(f"sqlite:///{live}") as journal:
        tracker = GPUCreditTracker(journal, account="acct")
        for _ in range(grants):
            tracker.grant(100, 100, 10**6)
        return [e.id for e in journal.read(order="position")]


def test_a_restore_then_other_writes_past_what_the_service_read_are_not_mixed_in(
        tmp_path: Path) -> None:
    """Restored, then written on by another process until the journal is longer than
    what the service read: the service's projection holds records the journal does not,
    and the journal's new records do not follow them. Never folded together."""
    live, backup = tmp_path / "ledger.db", tmp_path / "backup.db"
    with TestClient(create_app(f"sqlite:///{live}", clock=lambda: 100,
                               mount_web=False)) as client:
        assert len(_restored_and_written_on(client, live, backup, 3)) == 4  # past 3 read
        time.sleep(READ_FRESHNESS * 2)

        read = client.get("/v1/accounts/acct/balance")
        assert read.status_code == 503, read.text
        assert "position 3" in read.json()["detail"]
        write = _grant(client, "k9")
        assert write.status_code == 503, write.text
        # Rebuilt from the journal as it stands: 5 + 3 * 100, then the retry of k9.
        assert _grant(client, "k9").status_code == 201
        assert client.get("/v1/accounts/acct/balance").json()["balance"] == 310


def test_a_restore_then_other_writes_up_to_what_the_service_read_are_refused(
        tmp_path: Path) -> None:
    """Restored, then written on by another process up to exactly the head the service
    read, with other events: the heads compare equal, the histories do not. A read is
    refused, and a write records nothing on the other history; then the service rebuilds
    from the journal as it stands."""
    live, backup = tmp_path / "ledger.db", tmp_path / "backup.db"
    with TestClient(create_app(f"sqlite:///{live}", clock=lambda: 100,
                               mount_web=False)) as client:
        # Where the service read up to, another history.
        assert len(_restored_and_written_on(client, live, backup, 2, read=True)) == 3
        time.sleep(READ_FRESHNESS * 2)

        # Readiness looks first, at the same head: the chain hash tells the histories apart.
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json() == {"status": "unavailable"}
        read = client.get("/v1/accounts/acct/balance")
        assert read.status_code == 503, read.text
        assert "position 3" in read.json()["detail"]
        assert "restore" in read.json()["detail"]


WRITE_PATHS = ["written-ahead", "opened-ahead", "own-transaction"]
"""How a write reaches the journal: a grant decided ahead of its transaction and
written by the committer (`append_at`'s after_hash); a batch of events with a job's,
which needs the journal while the batch is decided ahead, so that the transaction is
opened then (`BatchJournal.ahead`); a grant decided in the batch's own transaction, the
service deciding nothing ahead (`BatchJournal.batch`). Each names the hash it chains
from by a check of its own."""


def _write(client: TestClient, path: str, key: str) -> tuple[Any, int | None]:
    """A write of 5 credits to "acct" by `path`: the response, and the position it
    answers (None when refused)."""
    if path == "own-transaction":
        client.app.state.ledger.defer_appends = False  # type: ignore[attr-defined]
    if path != "opened-ahead":
        answer = _grant(client, key)
        return answer, answer.json().get("position") if answer.status_code == 201 else None
    # A job's event is looked up in the journal (its job's account): the batch decided
    # ahead opens its transaction for it.
    answer = client.post("/v1/events", headers={"Idempotency-Key": key}, json={"events": [
        {"type": "grant", "account": "acct", "amount": 5, "time": 100},
        {"type": "submit", "account": "acct", "job": "j9", "cost": 1, "priority": 1,
         "time": 100}]})
    return answer, answer.json()["positions"][0] if answer.status_code == 200 else None


@pytest.mark.parametrize("path", WRITE_PATHS)
def test_a_write_on_a_journal_rewritten_up_to_what_the_service_read_records_nothing(
        tmp_path: Path, path: str) -> None:
    """The same, with the write coming first (no read looked at the journal since): the
    append that chains onto the stored head finds there a hash other than the one the
    service folded, and writes nothing, whichever way the write reaches the journal."""
    live, backup = tmp_path / "ledger.db", tmp_path / "backup.db"
    with TestClient(create_app(f"sqlite:///{live}", clock=lambda: 100,
                               mount_web=False)) as client:
        other = _restored_and_written_on(client, live, backup, 2)
        write, _ = _write(client, path, "k9")
        assert write.status_code == 503, write.text
        assert "restored from an older copy and written on" in write.json()["detail"]
        with Journal(f"sqlite:///{live}", read_only=True) as journal:
            assert [e.id for e in journal.read(order="position")] == other

        # Rebuilt from the journal as it stands: 5 + 2 * 100, then the retry of k9.
        retry, position = _write(client, path, "k9")
        assert position == 4, retry.text
        assert client.get("/v1/accounts/acct/balance").json()["balance"] == 210
    with Journal(f"sqlite:///{live}", read_only=True) as journal:
        assert journal.verify() is None


@pytest.mark.postgres
def test_a_database_rolled_back_and_rewritten_under_the_service_on_postgres(
        pg_fresh_url: str) -> None:
    """A PostgreSQL database rolled back to a copy under the service, then written on by
    another process up to the head the service read: a write records nothing there (and
    the service rebuilds), a read after more such writes is refused."""
    with TestClient(create_app(pg_fresh_url, clock=lambda: 100,
                               mount_web=False)) as client:
        assert _grant(client, "k1").status_code == 201
        copy = saved_tables(pg_fresh_url)
        assert _grant(client, "k2").status_code == 201
        assert _grant(client, "k3").status_code == 201

        restored_tables(pg_fresh_url, copy)
        tracker = GPUCreditTracker(pg_fresh_url, account="acct")
        for _ in range(2):
            tracker.grant(100, 100, 10**6)
        write = _grant(client, "k9")
        assert write.status_code == 503, write.text
        assert "restored from an older copy and written on" in write.json()["detail"]
        with Journal(pg_fresh_url, read_only=True) as journal:
            assert journal.head() == 3
        retry = _grant(client, "k9")
        assert retry.status_code == 201, retry.text
        assert client.get("/v1/accounts/acct/balance").json()["balance"] == 210

        copy = saved_tables(pg_fresh_url)  # holds k9, at 4
        assert _grant(client, "k10").status_code == 201
        restored_tables(pg_fresh_url, copy)
        tracker.grant(100, 100, 10**6)  # another record at 5
        time.sleep(READ_FRESHNESS * 2)
        read = client.get("/v1/accounts/acct/balance")
        assert read.status_code == 503, read.text
        assert "position 5" in read.json()["detail"]
    with Journal(pg_fresh_url, read_only=True) as journal:
        assert journal.verify() is None
