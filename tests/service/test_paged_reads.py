"""The reads that page or window the timeline, against what the rest of the ledger says:
a statement's window (`GET /v1/accounts/{account}/statement`, `statement --csv`) opens on
the balance just before it and closes on the balance at its end, line by line; pages of
`GET /v1/journal` and `GET /v1/revisions` give every event and revision once."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal
from projections import importing
from projections.replay import replay
from tests.contract.kit import cli_runner
from tools.service.app import create_app

ACCOUNTS = ("a", "b c", "ü")
Event = dict[str, Any]


@st.composite
def ledgers(draw: st.DrawFn) -> list[Event]:
    """Grants (expiring or not, general or h100), usage, manual credits and debits,
    voids and reversals, at event times that often coincide."""
    events: list[Event] = []
    if draw(st.booleans()):
        events.append({"type": "account", "account": "a", "time": draw(st.integers(0, 10)),
                       "refill_rate": draw(st.integers(1, 7200)),
                       "refill_cap": draw(st.integers(1, 40)), "id": "open-a"})
    for j in range(draw(st.integers(0, 2))):
        t = draw(st.integers(0, 30))
        events.append({"type": "submit", "account": draw(st.sampled_from(ACCOUNTS)),
                       "job": f"j{j}", "cost": draw(st.integers(0, 30)), "priority": 1,
                       "time": t, "id": f"s{j}"})
        if draw(st.booleans()):
            events.append({"type": "start", "job": f"j{j}", "time": t + 1, "id": f"st{j}"})
            if draw(st.booleans()):
                events.append({"type": "complete", "job": f"j{j}",
                               "success": draw(st.booleans()), "time": t + 2,
                               "refund_fraction": 0.5, "id": f"c{j}"})
    n = draw(st.integers(1, 12))
    for i in range(n):
        account = draw(st.sampled_from(ACCOUNTS))
        time = draw(st.integers(0, 30))
        kind = draw(st.sampled_from(["grant", "grant", "consume", "consume", "adjust"]))
        event: Event = {"type": kind, "account": account, "time": time, "id": f"e{i}"}
        if kind == "grant":
            event["amount"] = draw(st.integers(1, 50))
            expiry = draw(st.none() | st.integers(time + 1, 40))
            if expiry is not None:
                event["expiry"] = expiry
        elif kind == "consume":
            event["amount"] = draw(st.integers(1, 50))
        else:
            event["amount"] = draw(st.integers(-30, 30).filter(bool))
            event["reason"] = "correction"
        if kind != "adjust" and draw(st.booleans()):
            event["pool"] = "h100"
        events.append(event)
    grants = [e["id"] for e in events if e["type"] == "grant"]
    for j, grant in enumerate(draw(st.lists(st.sampled_from(grants), unique=True,
                                            max_size=2)) if grants else []):
        events.append({"type": "void", "grant": grant, "time": draw(st.integers(0, 30)),
                       "reason": "cancelled", "id": f"v{j}"})
    for target in draw(st.lists(st.sampled_from([e["id"] for e in events]), unique=True,
                                max_size=2)):
        events.append({"type": "reverse", "event": target, "reason": "wrong",
                       "time": draw(st.integers(0, 30)), "id": f"r-{target}"})
    return events


def arrive(events: list[Event], data: st.DataObject) -> list[list[Event]]:
    """The events in an arrival order (a reversal or void after what it names), in batches."""
    waiting = data.draw(st.permutations(events), label="order")
    order: list[Event] = []
    while waiting:
        i = next(i for i, e in enumerate(waiting)
                 if any(o["id"] == e.get("event", e.get("grant")) for o in order)
                 or e["type"] not in ("reverse", "void"))
        order.append(waiting.pop(i))
    batches, i = [], 0
    while i < len(order):
        size = data.draw(st.integers(1, 4), label="batch")
        batches.append(order[i:i + size])
        i += size
    return batches


def iso(t: int) -> str:
    """`t` as ISO 8601 text with an offset (+01:00, so the `+` is sent too)."""
    moment = datetime.fromtimestamp(t + 3600, UTC).replace(tzinfo=None)
    return moment.isoformat() + "+01:00"


def balance_at(client: TestClient, account: str, at: int, known: int | None = None) -> int:
    params = {"at": at} if known is None else {"at": at, "as_known_at": known}
    answer = client.get(f"/v1/accounts/{account}/balance", params=params)
    assert answer.status_code == 200, answer.text
    return int(answer.json()["balance"])


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ledgers(), st.data())
def test_a_statement_window_opens_and_closes_on_the_balances_around_it(
        events: list[Event], data: st.DataObject) -> None:
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 1_000, mount_web=False)) as client:
        for batch in arrive(events, data):
            assert client.post("/v1/events", json={"events": batch}).status_code == 200
        # An account only rejected submits name has a statement but no balance.
        accounts = sorted({e["account"] for e in events
                           if e["type"] in ("account", "grant", "consume", "adjust")})
        account = data.draw(st.sampled_from(accounts), label="account")
        start = data.draw(st.none() | st.integers(-2, 42), label="from")
        end = data.draw(st.none() | st.integers(-2, 42), label="to")
        if start is not None and end is not None and start > end:
            start, end = end, start
        head = client.get("/v1/journal/head").json()["position"]
        known = data.draw(st.none() | st.integers(1, head), label="as known at")
        params = {k: v for k, v in (("from", start), ("to", end), ("as_known_at", known))
                  if v is not None}
        answer = client.get(f"/v1/accounts/{account}/statement", params=params)
        assert answer.status_code == 200, answer.text
        st_ = answer.json()
        to = st_["to"]
        lines = ([st_["opening"]] if st_["opening"] is not None else []) + st_["lines"]
        refills = any("refill_rate" in e for e in events) and account == "a"
        if start is not None:
            assert st_["opening"]["time"] == start
        if start is not None and not refills:  # refill accrues up to `from` itself
            assert st_["opening"]["balance"] == balance_at(client, account, start - 1, known)
        running = None
        for line in lines:
            assert start is None or line["time"] >= start
            assert line["time"] <= to
            if running is not None:
                assert line["balance"] == running + line["change"], line
            running = line["balance"]
        assert st_["closing"]["balance"] == balance_at(client, account, to, known)
        if running is not None:
            assert running == st_["closing"]["balance"]
        # The same window given as ISO 8601 text with an offset is the same statement.
        spelt = {k: iso(v) if k != "as_known_at" else v for k, v in params.items()}
        again = client.get(f"/v1/accounts/{account}/statement", params=spelt)
        assert again.json() == st_
        csv = client.get(f"/v1/accounts/{account}/statement", params=params,
                         headers={"Accept": "text/csv"})
        assert csv.status_code == 200
        assert len(csv.text.splitlines()) == 1 + len(lines)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ledgers(), st.data())
def test_journal_pages_walked_while_events_arrive_import_as_the_same_ledger(
        events: list[Event], data: st.DataObject) -> None:
    """Pages of `GET /v1/journal`, each `after` the last page's `next` (or, at the end,
    its last position), give every event once in position order, also while batches are
    appended between pages; written one per line they import into an empty journal as
    the same ledger (`replay`'s digest)."""
    for event in events[::3]:
        event["memo"] = "PO 7"
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 1_000, mount_web=False)) as client:
        batches = arrive(events, data)
        got: list[Event] = []
        after, at_end = 0, True
        while True:
            if batches and (at_end or data.draw(st.booleans(), label="append now")):
                answer = client.post("/v1/events", json={"events": batches.pop(0)})
                assert answer.status_code == 200
            limit = data.draw(st.integers(1, 5), label="limit")
            page = client.get("/v1/journal", params={"after": after, "limit": limit}).json()
            assert len(page["events"]) <= limit
            got += page["events"]
            if page["next"] is not None:
                assert len(page["events"]) == limit
                after = page["next"]
            elif got:
                after = got[-1]["position"]
            at_end = page["next"] is None
            if at_end and not batches:
                break
        assert [e["position"] for e in got] == list(range(1, journal.head() + 1))
        assert [e["id"] for e in got] == [rec.id for rec in journal.read(order="position")]
    copy = MemoryJournal()
    # As they came, `position` and `recorded_at` included: `import` reads them past.
    text = "".join(json.dumps(e) + "\n" for e in got)
    importing.import_file(copy, text.encode(), "pages.jsonl")
    assert replay(copy).digest == replay(journal).digest


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ledgers(), st.data())
def test_revision_pages_walked_while_events_arrive_list_each_revision_once(
        events: list[Event], data: st.DataObject) -> None:
    """A walk of `GET /v1/revisions` (with or without `account`), each page `after` the
    last one's cursor, while late events, voids and reversals arrive between pages, lists
    every revision of the whole list once, in its order; but for a job's step recorded
    before its submit, whose revision has an account only once the submit is."""
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 1_000, mount_web=False)) as client:
        batches = arrive(events, data)
        # The steps (start, complete, cancel) that arrive before their job's submit: a
        # revision of one has no account (null) until the submit is recorded.
        arrived = {e["id"]: n for n, batch in enumerate(batches) for e in batch}
        submitted = {e["job"]: arrived[e["id"]] for e in events if e["type"] == "submit"}
        orphans = {e["id"] for e in events if e["type"] in ("start", "complete", "cancel")
                   and submitted.get(e["job"], len(batches)) > arrived[e["id"]]}
        assert client.post("/v1/events", json={"events": batches.pop(0)}).status_code == 200
        account = data.draw(st.none() | st.sampled_from(
            sorted({e["account"] for e in events if e["type"] == "grant"})
            or ["a"]), label="account")
        if account is not None and client.get(
                "/v1/revisions", params={"account": account}).status_code == 404:
            account = None
        got: list[dict[str, Any]] = []
        after, at_end = 0, True
        while True:
            if batches and (at_end or data.draw(st.booleans(), label="append now")):
                answer = client.post("/v1/events", json={"events": batches.pop(0)})
                assert answer.status_code == 200
            limit = data.draw(st.integers(1, 3), label="limit")
            params: dict[str, Any] = {"after": after, "limit": limit}
            if account is not None:
                params["account"] = account
            page = client.get("/v1/revisions", params=params).json()
            assert len(page["revisions"]) <= limit
            got += page["revisions"]
            after = page["next"] if page["next"] is not None else page["seen"]
            at_end = page["next"] is None
            if at_end and not batches:
                break
        every = client.get("/v1/revisions", params={"limit": 1000}).json()["revisions"]
    expected = [r for r in every if account is None or r["account"] == account]
    if account is None:
        # Every revision once, in order; one of an orphan step as its account stood then.
        assert [_but_account(r) for r in got] == [_but_account(r) for r in expected]
        for seen, now in zip(got, expected, strict=True):
            assert seen["account"] == now["account"] or (
                seen["account"] is None and seen["event_id"] in orphans), (seen, now)
    else:
        # A walk of one account's pages passes an orphan step's revision while it has no
        # account, and does not come back for it once its job's submit gives it one
        # (docs/http.md): only those may be missing, and nothing else may differ.
        missed = [r for r in expected if r not in got]
        assert got == [r for r in expected if r not in missed]
        assert all(r["event_id"] in orphans for r in missed), missed


def _but_account(revision: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in revision.items() if k != "account"}


@pytest.mark.parametrize("path", ["/v1/revisions", "/v1/journal"])
@pytest.mark.parametrize(("name", "value", "valid"), [
    ("limit", "0", "a whole number from 1 to 1000"),
    ("limit", "-1", "a whole number from 1 to 1000"),
    ("limit", "1001", "a whole number from 1 to 1000"),
    ("limit", "abc", "a whole number from 1 to 1000"),
    ("limit", "1.5", "a whole number from 1 to 1000"),
    ("limit", "", "a whole number from 1 to 1000"),
    ("after", "-1", "a whole number, 0 or more"),
    ("after", "x", "a whole number, 0 or more"),
    # Read as `at` and `as_known_at` are: digits, not Python's spellings of an int.
    ("after", "1_0", "a whole number, 0 or more"),
    ("limit", "%2B5", "a whole number from 1 to 1000"),
    ("limit", "1_0", "a whole number from 1 to 1000"),
])
def test_a_page_parameter_out_of_range_names_its_value_and_the_valid_range(
        client: TestClient, path: str, name: str, value: str, valid: str) -> None:
    """`limit` and `after` refused are a problem naming the value sent and what is valid,
    not only the bound it crossed."""
    answer = client.get(f"{path}?{name}={value}")
    assert answer.status_code == 422
    assert answer.headers["content-type"].startswith("application/problem+json")
    detail = answer.json()["detail"]
    assert detail.startswith(f"query.{name}: ")
    assert f"got {unquote(value)!r}" in detail and valid in detail, detail


@pytest.mark.parametrize("path", ["/v1/revisions", "/v1/journal"])
def test_the_page_limits_edges_answer(client: TestClient, path: str) -> None:
    """1 and 1000 are limits like any other."""
    for limit in (1, 1000):
        assert client.get(f"{path}?limit={limit}").status_code == 200


def test_a_poller_of_one_accounts_revisions_lists_each_new_one_once(
        client: TestClient) -> None:
    """At the end of an account's revisions `next` is none; `seen` is where to ask again
    later (the other accounts' revisions it passed count in `after`), so a revision
    that comes later is listed then, and none again."""
    # Each account uses all it has at 10: every late usage before that adds to its debt.
    grants = [{"type": "grant", "account": name, "amount": 5, "time": 0, "id": f"g-{name}"}
              for name in ("a", "b")]
    usage = [{"type": "consume", "account": name, "amount": 5, "time": 10, "id": f"u-{name}"}
             for name in ("a", "b")]
    assert client.post("/v1/events", json={"events": grants + usage}).status_code == 200

    def late(account: str, i: int) -> None:
        event = {"type": "consume", "account": account, "amount": 1, "time": 5,
                 "id": f"late-{account}-{i}"}
        assert client.post("/v1/events", json={"events": [event]}).status_code == 200

    late("b", 1)
    late("a", 1)
    late("b", 2)
    page = client.get("/v1/revisions", params={"account": "a"}).json()
    assert [r["late_event_id"] for r in page["revisions"]] == ["late-a-1"]
    assert page["next"] is None and page["seen"] == 3
    late("a", 2)
    again = client.get("/v1/revisions", params={"account": "a", "after": page["seen"]}).json()
    assert [r["late_event_id"] for r in again["revisions"]] == ["late-a-2"]
    assert again["seen"] == 4


def test_after_past_the_end_is_refused_not_answered_empty(client: TestClient) -> None:
    """A cursor past the journal's head, or past the revisions there are, was given by no
    page (a typo, another journal's): an empty page would say "nothing new" until the
    journal grew past it, and the events up to it would never be listed. As `as_known_at`
    past the head, it is `422`, naming it and the range; up to the end is a page."""
    events = [{"type": "grant", "account": "a", "amount": 5, "time": 0, "id": "g"},
              {"type": "consume", "account": "a", "amount": 5, "time": 10, "id": "u"},
              {"type": "consume", "account": "a", "amount": 1, "time": 5, "id": "late"}]
    for event in events:
        assert client.post("/v1/events", json={"events": [event]}).status_code == 200
    assert client.get("/v1/journal", params={"after": 3}).json() == {"events": [],
                                                                     "next": None}
    for after in (4, 2**63):
        answer = client.get("/v1/journal", params={"after": after})
        assert answer.status_code == 422
        detail = answer.json()["detail"]
        assert detail.startswith(f"after: position {after} is past the journal's head 3")
        assert "0 to 3" in detail
    assert client.get("/v1/revisions", params={"after": 1}).json()["revisions"] == []
    for after in (2, 2**70):
        answer = client.get("/v1/revisions", params={"after": after, "account": "a"})
        assert answer.status_code == 422
        assert answer.json()["detail"] == (
            f"after: {after} is more than the 1 revision(s) so far: give 0 to 1 (the "
            "`next` or `seen` of the last page)")
    assert client.get("/v1/journal/head").json()["position"] == 3  # nothing appended


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ledgers(), st.data())
def test_a_statement_is_the_same_on_the_command_line_and_over_http(
        events: list[Event], data: st.DataObject) -> None:
    """`statement ACCOUNT --from --to --as-known-at --csv` (and `--json`) prints what
    `GET /v1/accounts/{account}/statement` answers with `Accept: text/csv` (and JSON)."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/ledger.db"
        run = cli_runner(url)
        with TestClient(create_app(url, clock=lambda: 1_000, mount_web=False)) as client:
            for batch in arrive(events, data):
                assert client.post("/v1/events", json={"events": batch}).status_code == 200
            head = client.get("/v1/journal/head").json()["position"]
            accounts = sorted({e["account"] for e in events if "account" in e})
            account = data.draw(st.sampled_from(accounts), label="account")
            start = data.draw(st.none() | st.integers(-2, 42), label="from")
            end = data.draw(st.none() | st.integers(-2, 42), label="to")
            if start is not None and end is not None and start > end:
                start, end = end, start
            known = data.draw(st.none() | st.integers(1, head), label="as known at")
            params = {k: v for k, v in (("from", start), ("to", end),
                                        ("as_known_at", known)) if v is not None}
            path = f"/v1/accounts/{quote(account, safe='')}/statement"
            csv = client.get(path, params=params, headers={"Accept": "text/csv"})
            as_json = client.get(path, params=params)
        args = [f"--{k.replace('_', '-')}={v}" for k, v in params.items()]
        printed = run("statement", account, *args, "--csv")
        assert (printed.exit_code, csv.status_code) in ((0, 200), (2, 404)), printed.stderr
        if csv.status_code == 200:
            assert printed.stdout == csv.text
            printed = run("statement", account, *args, "--json")
            assert json.loads(printed.stdout) == as_json.json()


def test_statements_that_follow_one_another_tile_the_timeline(client: TestClient) -> None:
    """Both ends of a window are included (docs/cli.md, "A statement"): the changes at
    `from` open the window, those at `to` close it; windows [0, 9] and [10, 20] list each
    change once, and the second opens where the first closed."""
    events = [{"type": "grant", "account": "a", "amount": 50, "time": 0, "expiry": 10,
               "id": "g"},
              {"type": "consume", "account": "a", "amount": 5, "time": 9, "id": "u9"},
              {"type": "consume", "account": "a", "amount": 7, "time": 10, "id": "u10"},
              {"type": "grant", "account": "a", "amount": 20, "time": 20, "id": "g20"}]
    assert client.post("/v1/events", json={"events": events}).status_code == 200
    first = client.get("/v1/accounts/a/statement", params={"from": 0, "to": 9}).json()
    second = client.get("/v1/accounts/a/statement", params={"from": 10, "to": 20}).json()
    assert [(line["type"], line["event_id"]) for line in first["lines"]] == [("grant", "g"),
                                                                    ("consume", "u9")]
    assert [(line["type"], line["event_id"]) for line in second["lines"]] == [
        ("expire", None), ("consume", "u10"), ("grant", "g20")]
    assert second["opening"]["balance"] == first["closing"]["balance"] == 45
    assert second["closing"]["balance"] == 13  # 7 of debt paid by g20


def test_a_journal_page_fetches_about_its_own_rows() -> None:
    """A page of 100 events asks the database for 101 rows, not the 5,000 a read fetches
    at a time: a page of a long journal costs its own size (6 times faster on a page of
    100, measured on the demo month)."""
    journal = MemoryJournal()
    asked: list[int] = []
    read = journal.read

    def spy(**filters: Any) -> Any:
        asked.append(filters.get("batch_size", 5000))
        return read(**filters)

    journal.read = spy  # type: ignore[method-assign]
    with TestClient(create_app(journal, clock=lambda: 1_000, mount_web=False)) as client:
        asked.clear()
        assert client.get("/v1/journal", params={"limit": 100}).status_code == 200
    assert asked == [101]
