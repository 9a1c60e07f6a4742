"""Reads answered on the event loop from the live projection: never an uncommitted
decision, and what other writers committed before the read once the freshness window
has passed."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from eventstore import Journal, NewEvent
from projections.ledger import Ledger
from projections.session import LedgerSession
from tools.service import commands, create_app
from tools.service import ledger as service_ledger
from tools.service.ledger import BUSY, LedgerService


def _balance(_: LedgerSession, ledger: Ledger) -> int:
    return ledger.accounts["a"].book.active_total


@dataclass(frozen=True)
class GrantsThenWaits:
    """A grant decided in a batch that then waits, and fails if told to."""

    key: str | None
    applied: threading.Event
    go: threading.Event
    fail: bool

    def locks(self, ledger: Ledger) -> list[str]:
        return ["a"]

    def run(self, service: LedgerService) -> Any:
        commands.Grant(self.key, "a", 50, None, None, None, None, 10).run(service)
        self.applied.set()
        self.go.wait()
        if self.fail:
            raise RuntimeError("the batch fails after its decision was applied")
        return None


def test_a_read_never_sees_a_decision_before_its_commit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What is checked is the projection's lock, not the freshness window: on a loaded
    # machine 50 ms pass between two lines and a read at once would answer STALE instead.
    monkeypatch.setattr(service_ledger, "READ_FRESHNESS", 3600.0)
    service = LedgerService(f"sqlite:///{tmp_path / 'r.db'}", clock=lambda: 10)
    service.start()
    try:
        service.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
        assert service.read_at_once(_balance) == 100
        applied, go = threading.Event(), threading.Event()
        pending = service.writer.submit(GrantsThenWaits("g1", applied, go, fail=True))
        applied.wait()
        # The projection holds the uncommitted grant: a read at once must not answer.
        assert service.read_at_once(_balance) is BUSY
        go.set()
        with pytest.raises(RuntimeError):
            pending.result()
        with service.reading() as ledger:
            assert ledger.accounts["a"].book.active_total == 100
        assert service.journal.get("g1") is None
    finally:
        service.stop()
        service.close()


def test_a_read_sees_what_another_writer_committed_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    # Every read is past the freshness window: each one looks at the journal first.
    monkeypatch.setattr(service_ledger, "READ_FRESHNESS", 0.0)
    with TestClient(create_app(url, clock=lambda: 100, mount_web=False)) as client:
        assert client.post("/v1/accounts/a/grants", json={"amount": 10, "time": 1}
                           ).status_code == 201
        assert client.get("/v1/accounts/a/balance").json()["balance"] == 10
        with Journal(url) as other:
            other.append([NewEvent("elsewhere", "a", "grant", 2,
                                   {"account": "a", "amount": 5})])
        assert client.get("/v1/accounts/a/balance").json()["balance"] == 15
        assert [a["balance"] for a in client.get("/v1/accounts").json()] == [15]


def test_a_position_past_the_head_is_422_as_on_the_command_line(client: TestClient) -> None:
    """Not clamped to the head: a position the journal never reached is a typo or
    another journal's."""
    assert client.post("/v1/accounts/a/grants", json={"amount": 5, "time": 1}).status_code == 201
    for path in ("/v1/accounts/a/balance", "/v1/accounts/a/statement"):
        assert client.get(path, params={"as_known_at": 1}).json()["as_known_at"] == 1
        refused = client.get(path, params={"as_known_at": 2})
        assert refused.status_code == 422, refused.text
        assert "past the journal's head 1" in refused.json()["detail"]


@pytest.mark.parametrize("value", ["0", "3", "99", "+1", "2000-01-01T00:00:00Z", "junk"])
def test_an_as_known_at_refused_says_what_the_command_line_says(
        db_url: str, client: TestClient, value: str) -> None:
    """The same refusal as `--as-known-at` (but for where the head is shown), and the
    positions it calls known are exactly those answered."""
    import re

    from projections import queries

    for time in (1, 2):
        assert client.post("/v1/accounts/a/grants",
                           json={"amount": 5, "time": time}).status_code == 201
    with Journal(db_url) as journal, pytest.raises(ValueError) as cli:
        queries.balance(journal, "a", as_known_at=value)
    said = str(cli.value).removeprefix("as known at: ").replace("gpu-credits head",
                                                                 "GET /v1/journal/head")
    for path in ("/v1/accounts/a/balance", "/v1/accounts/a/statement"):
        refused = client.get(path, params={"as_known_at": value})
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == f"as_known_at: {said}"
        known = re.search(r"known positions are (\d+) to (\d+)", said)
        if known is not None:
            first, last = int(known[1]), int(known[2])
            assert (first, last) == (1, 2)
            for position in (first, last):
                assert client.get(path, params={"as_known_at": position}).status_code == 200
            for position in (first - 1, last + 1):
                assert client.get(path, params={"as_known_at": position}).status_code == 422


def test_an_empty_journal_says_so_of_a_position_past_its_head(client: TestClient) -> None:
    refused = client.get("/v1/accounts/a/statement", params={"as_known_at": 1})
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "as_known_at: position 1 is past the journal's head 0; the journal is empty: 0 is "
        "its only position")


@pytest.mark.parametrize(("accept", "csv"), [
    ("", False), ("*/*", False), ("application/json", False), ("text/csv", True),
    ("text/*", True), ("text/csv, application/json", False),
    ("text/csv;q=0.5, application/json", False), ("application/json;q=0.4, text/csv", True),
    ("text/csv;q=0", False), ("text/csv;q=0.5, */*", False), ("text/csv, */*;q=0.1", True),
    ("TEXT/CSV", True), ("text/*;q=0.9, text/csv;q=0.2, application/json;q=0.5", False),
    ("text/csv;q=oops", False),
])
def test_a_statement_is_csv_when_the_accept_header_weighs_csv_above_json(
        accept: str, csv: bool) -> None:
    from tools.service.reads import prefers_csv

    assert prefers_csv(accept) is csv


def test_an_account_or_job_named_with_a_slash_is_reachable(client: TestClient) -> None:
    """A name may hold "/" (team/alpha): sent as %2F, every route of the account or the
    job reaches it, as the routes of any other name do."""
    account, job = "team/alpha", "runs/2026/11"
    assert client.post("/v1/accounts", json={"account": account}).status_code == 201
    base = "/v1/accounts/team%2Falpha"
    assert client.post(f"{base}/grants", json={"amount": 10, "time": 1}).status_code == 201
    assert client.post(f"{base}/usage", json={"amount": 2, "time": 2}).json()["debt"] == 0
    assert client.get(f"{base}/balance").json()["balance"] == 8
    assert len(client.get(f"{base}/statement").json()["lines"]) == 3
    submitted = client.post("/v1/jobs", json={"job": job, "account": account, "cost": 3,
                                              "priority": 1, "time": 3})
    assert submitted.json()["state"] == "pending"
    assert client.get("/v1/jobs/runs%2F2026%2F11").json()["account"] == account
    cancelled = client.post("/v1/jobs/runs%2F2026%2F11/cancel", json={"time": 4})
    assert cancelled.json() == {"job": job, "state": "cancelled"}
    assert client.get("/v1/jobs/nobody%2Fthere").status_code == 404


def test_a_statements_release_line_says_the_debt_it_paid(client: TestClient) -> None:
    # A job holds 8 of 10; usage of 5 leaves 3 owed; the cancel's 8 pay them first.
    base = "/v1/accounts/d"
    granted = client.post(f"{base}/grants", json={"amount": 10, "time": 1})
    assert granted.status_code == 201
    assert client.post("/v1/jobs", json={"job": "j1", "account": "d", "cost": 8,
                                         "priority": 1, "time": 2}).json()["accepted"]
    assert client.post(f"{base}/usage", json={"amount": 5, "time": 3}).json()["debt"] == 3
    assert client.post("/v1/jobs/j1/cancel", json={"time": 4}).status_code == 200
    assert client.get(f"{base}/balance").json()["debt"] == 0
    cancel = client.get(f"{base}/statement").json()["lines"][-1]
    assert (cancel["type"], cancel["debt_paid"]) == ("cancel", 3)
    grant = granted.json()["id"]
    assert cancel["detail"] == f"job j1 cancelled: released 8; 3 paid debt first ({grant} 3)"
    as_csv = client.get(f"{base}/statement", headers={"Accept": "text/csv"}).text
    header, *_, last = as_csv.splitlines()
    columns = header.split(",")
    assert last.split(",")[columns.index("debt_paid")] == "3"


def test_a_statement_as_known_at_a_position_is_the_command_lines(db_url: str,
                                                                 client: TestClient) -> None:
    """`?as_known_at=` leaves out the events recorded later, nothing more: the statement
    still runs to the journal's latest event time (as the balance as known then does), and
    an account opened later has an empty statement then, as on the command line."""
    from eventstore import Journal
    from projections import queries
    from tools import wording

    events = [{"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 10},
              {"type": "grant", "account": "b", "amount": 5, "time": 20}]
    assert client.post("/v1/events", json={"events": events}).status_code == 200
    with Journal(db_url) as journal:
        for account in ("a", "b"):
            for position in (1, 2):
                answer = client.get(f"/v1/accounts/{account}/statement",
                                    params={"as_known_at": position})
                assert answer.status_code == 200, answer.text
                expected = wording.to_dict(queries.statement(journal, account,
                                                             as_known_at=position))
                assert answer.json() == expected
                balance = client.get(f"/v1/accounts/{account}/balance",
                                     params={"as_known_at": position}).json()
                assert answer.json()["to"] == balance["at"] == 20
                assert answer.json()["closing"]["balance"] == balance["balance"]


def test_a_balance_at_the_latest_time_counts_reversals_as_the_command_line_does(
        db_url: str, client: TestClient) -> None:
    """The default `at` is the journal's latest event time, `balance --json`'s: a reversal
    and the event it takes out are events of the journal too (the live decisions' clock
    leaves them out; a balance read does not)."""
    from eventstore import Journal
    from projections import queries
    from tools import wording

    events = [{"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 15},
              {"type": "consume", "account": "a", "amount": 1, "time": 10, "id": "u"},
              {"type": "reverse", "event": "u", "time": 20, "reason": "sent twice"}]
    assert client.post("/v1/events", json={"events": events}).status_code == 200
    with Journal(db_url) as journal:
        expected = wording.to_dict(queries.balance(journal, "a"))
    assert expected["at"] == 20 and expected["balance"] == 0
    for _ in range(2):  # the first read, and one the answer of the first may have eased
        assert client.get("/v1/accounts/a/balance").json() == expected
        assert client.get("/v1/accounts").json() == [expected]
    assert client.get("/v1/accounts/a/balance", params={"as_known_at": 3}).json() == expected


def test_a_balance_of_an_account_whose_opening_grant_was_reversed_is_the_command_lines(
        db_url: str, client: TestClient) -> None:
    """The live projection no longer holds the account, but the journal records its
    events: `balance --json` answers its figures, and so does the service, with or
    without `as_known_at`, rather than calling the account unknown."""
    from eventstore import Journal
    from projections import queries
    from tools import wording

    events = [{"type": "grant", "account": "a", "amount": 5, "time": 0},
              {"type": "grant", "account": "b", "amount": 100, "time": 10, "id": "g"},
              {"type": "reverse", "event": "g", "time": 20, "reason": "wrong account"}]
    assert client.post("/v1/events", json={"events": events}).status_code == 200
    with Journal(db_url) as journal:
        expected = wording.to_dict(queries.balance(journal, "b"))
        at_5 = wording.to_dict(queries.balance(journal, "b", at=5))
    assert expected["balance"] == 0 and expected["as_known_at"] == 3
    assert client.get("/v1/accounts/b/balance").json() == expected
    assert client.get("/v1/accounts/b/balance", params={"as_known_at": 3}).json() == expected
    assert client.get("/v1/accounts/b/balance", params={"at": 5}).json() == at_5
    unknown = client.get("/v1/accounts/c/balance")
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == "unknown account 'c' (known: a)"


# A journal whose as-known-at answers differ: late events (event time before what was
# recorded earlier), a job holding credits, debt, pools and an account opened later.
_HISTORY = [
    {"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 30},
    {"type": "grant", "account": "a", "amount": 20, "time": 5, "pool": "h100"},
    {"type": "submit", "account": "a", "job": "j1", "cost": 15, "priority": 1, "time": 10},
    {"type": "consume", "account": "b", "amount": 7, "time": 12},
    {"type": "grant", "account": "c", "amount": 9, "time": 20},
    {"type": "grant", "account": "a", "amount": 3, "time": 2},  # late
    {"type": "consume", "account": "a", "amount": 4, "pool": "h100", "time": 8},  # late
]


def _cli_accounts(db_url: str, *args: str) -> tuple[int, Any]:
    import json

    from typer.testing import CliRunner

    from tools.cli import app

    result = CliRunner().invoke(app, ["--db", db_url, "accounts", "--json", *args])
    if result.exit_code != 0:
        return result.exit_code, result.stderr
    return 0, json.loads(result.stdout)


def test_every_account_at_a_time_as_known_at_a_position_is_the_command_lines(
        db_url: str, client: TestClient) -> None:
    """`GET /v1/accounts?at=&as_known_at=` lists the accounts and figures of `accounts
    --at --as-known-at --json`, each as a balance object."""
    for event in _HISTORY:
        answer = client.post("/v1/events", json={"events": [event]})
        assert answer.status_code == 200, answer.text
    head = len(_HISTORY)
    for at in (None, "0", "4", "9", "12", "19", "40", "1970-01-01T00:00:10Z"):
        for as_known_at in (None, *map(str, range(1, head + 1))):
            params = {k: v for k, v in (("at", at), ("as_known_at", as_known_at)) if v}
            args = [arg for k, v in params.items() for arg in (f"--{k.replace('_', '-')}", v)]
            status, cli = _cli_accounts(db_url, *args)
            assert status == 0, cli
            answer = client.get("/v1/accounts", params=params)
            assert answer.status_code == 200, (params, answer.text)
            expected = [{"account": row["account"],
                         **{k: row[k] for k in ("balance", "reserved", "available", "debt",
                                                "pools")},
                         "at": cli["at"], "as_known_at": cli["as_known_at"]}
                        for row in cli["accounts"]]
            assert answer.json() == expected, params


@pytest.mark.parametrize("params", [
    {"as_known_at": "0"}, {"as_known_at": "8"}, {"as_known_at": "junk"},
    {"as_known_at": "1970-01-01T00:00:00Z"}, {"at": "junk"}, {"at": "9007199254740992"},
])
def test_every_account_refuses_what_the_command_line_refuses(
        db_url: str, client: TestClient, params: dict[str, str]) -> None:
    for event in _HISTORY:
        assert client.post("/v1/events", json={"events": [event]}).status_code == 200
    (name, value), = params.items()
    status, said = _cli_accounts(db_url, f"--{name.replace('_', '-')}", value)
    assert status == 2
    refused = client.get("/v1/accounts", params=params)
    assert refused.status_code == 422, refused.text
    if name == "as_known_at":
        cli = said.split("error: ", 1)[1].strip().removeprefix("as known at: ")
        assert refused.json()["detail"] == "as_known_at: " + cli.replace(
            "gpu-credits head", "GET /v1/journal/head")


def test_a_read_on_a_worker_thread_keeps_the_projection_it_locked_across_a_rebuild(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A failed commit's rebuild can land while a read holds the old projection's lock.
    # The read must go on with the projection it holds: the rebuilt one is not locked
    # by it, and the writer may already be deciding on it.
    import asyncio
    from collections.abc import Iterator
    from contextlib import contextmanager

    from tools.service import reads

    monkeypatch.setattr(service_ledger, "READ_FRESHNESS", 3600.0)
    service = LedgerService(f"sqlite:///{tmp_path / 'r.db'}", clock=lambda: 10)
    service.start()
    applied, go = threading.Event(), threading.Event()
    pending = None
    try:
        service.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
        waiting_read = service._waiting_read

        @contextmanager
        def rebuilt_meanwhile(session: LedgerSession) -> Iterator[LedgerSession]:
            nonlocal pending
            with waiting_read(session) as held:
                service.reset()
                # The writer decides on the rebuilt projection, not committed yet.
                pending = service.writer.submit(GrantsThenWaits("g1", applied, go, True))
                assert applied.wait(30)
                yield held

        monkeypatch.setattr(service, "_waiting_read", rebuilt_meanwhile)
        monkeypatch.setattr(service, "read_at_once", lambda read, asked_at=None: BUSY)
        seen = asyncio.run(reads._from_projection(
            service, lambda session, ledger: (_balance(session, ledger),
                                              _balance(session, session.ledger))))
        assert seen == (100, 100)
    finally:
        go.set()
        if pending is not None:
            with pytest.raises(RuntimeError):
                pending.result(30)
        service.stop()
        service.close()
