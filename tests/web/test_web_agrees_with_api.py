"""The web view answers what the command line and the `/v1/...` API answer, on small
journals built for the cases where they once disagreed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from pagetext import cells

from tools.web.browsing import app_for


def post_events(web: TestClient, *events: dict[str, Any]) -> None:
    """Append `events` as one batch (`POST /v1/events`)."""
    r = web.post("/v1/events", json={"events": list(events)})
    assert r.status_code == 200, r.text


# -- revisions ---------------------------------------------------------------------------

BEFORE = ({"type": "grant", "account": "a", "amount": 10, "time": 0, "expiry": 100},
          {"type": "grant", "account": "b", "amount": 10, "time": 0, "expiry": 100},
          {"type": "consume", "account": "a", "amount": 15, "time": 10, "id": "use-a"},
          {"type": "consume", "account": "b", "amount": 15, "time": 20, "id": "use-b"})
"""Each account owes 5 after its usage."""

LATE = ({"type": "grant", "account": "a", "amount": 20, "time": 5, "expiry": 100,
         "id": "late-a"},
        {"type": "grant", "account": "b", "amount": 20, "time": 15, "expiry": 100,
         "id": "late-b"})
"""One batch with a late grant for each account: each pays its own account's debt."""


def _causes_on_the_journal_page(web: TestClient) -> list[tuple[str, str]]:
    rows = cells(web.get("/journal").text, "revisions-table")
    return [(row[1].split(" ")[0], row[2].split(" ")[0]) for row in rows]


def _causes_on_event_pages(web: TestClient, event_id: str) -> list[str]:
    page = web.get(f"/event?id={event_id}", follow_redirects=True).text
    found = re.search(r'<ul class="plain" id="revised">(.*?)</ul>', page, re.S)
    assert found, f"the page of {event_id} lists no revision of it"
    return re.findall(r'<a href="/events/\d+">([^<]+)</a>', found.group(1))


def test_one_batch_of_two_accounts_late_events_names_each_accounts_own_cause(
        tmp_path: Path) -> None:
    with TestClient(app_for(f"sqlite:///{tmp_path / 'j.db'}")) as web:
        post_events(web, *BEFORE)
        web.get("/journal")  # the web's revisions are caught up to here, then extended
        post_events(web, *LATE)
        api = [(r["late_event_id"], r["event_id"])
               for r in web.get("/v1/revisions").json()["revisions"]]
        assert api == [("late-a", "use-a"), ("late-b", "use-b")]
        assert _causes_on_the_journal_page(web) == api
        assert _causes_on_event_pages(web, "use-a") == ["late-a"]
        assert _causes_on_event_pages(web, "use-b") == ["late-b"]


def test_revisions_found_in_one_pass_name_the_same_causes(tmp_path: Path) -> None:
    with TestClient(app_for(f"sqlite:///{tmp_path / 'j.db'}")) as web:
        post_events(web, *BEFORE)
        post_events(web, *LATE)  # no page seen before: the web's first pass holds both
        assert _causes_on_the_journal_page(web) == [("late-a", "use-a"), ("late-b", "use-b")]


# -- an event's line in its account's statement -------------------------------------------

REUSED_JOB_ID = (
    [{"type": "grant", "account": "a", "amount": 10, "time": 0},
     {"type": "grant", "account": "b", "amount": 10, "time": 0}],
    [{"type": "submit", "account": "b", "job": "j", "cost": 50, "priority": 1, "time": 1}],
    [{"type": "submit", "account": "a", "job": "j", "cost": 5, "priority": 1, "time": 2,
      "id": "a-reuses-j"}],
    [{"type": "submit", "account": "a", "job": "k", "cost": 3, "priority": 1, "time": 3,
      "id": "a-submits-k"}])
"""b's job j is rejected; a's later submit of j is then an anomaly (job ids are unique
for the journal's lifetime), which a's stream alone would take as accepted."""


def _changed_rows(web: TestClient, event_id: str) -> list[list[str]]:
    return cells(web.get(f"/event?id={event_id}", follow_redirects=True).text,
                 "changed-table")


def _reserved_after(rows: list[list[str]]) -> int:
    (own, *_) = rows
    return int(own[3].replace(",", ""))


def test_an_events_reserved_after_is_the_statements_on_a_first_visit_and_after(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with TestClient(app_for(url)) as web:
        for batch in REUSED_JOB_ID:
            post_events(web, *batch)
        lines = web.get("/v1/accounts/a/statement").json()["lines"]
    statement = {line["position"]: line["reserved"] for line in lines if line["position"]}
    assert (statement[4], statement[5]) == (0, 3)  # a's j holds nothing; k holds 3
    for event_id, position in (("a-reuses-j", 4), ("a-submits-k", 5)):
        with TestClient(app_for(url)) as web:  # a fresh server: a first visit
            first = _changed_rows(web, event_id)
            assert _reserved_after(first) == statement[position]
            web.get("/accounts/a")
            assert _changed_rows(web, event_id) == first


# -- an account's ledger -------------------------------------------------------------------

def _ledger_lines(web: TestClient, account: str, query: str = "") -> list[tuple[int, str]]:
    rows = cells(web.get(f"/accounts/{account}{query}").text, "ledger-table")
    return [(int(row[1].replace(",", "")), row[2].split(" ")[0]) for row in rows if row[1]]


def _statement_lines(web: TestClient, account: str, query: str = "") -> list[tuple[int, str]]:
    lines = web.get(f"/v1/accounts/{account}/statement{query}").json()["lines"]
    return [(line["position"], line["type"]) for line in lines if line["position"]]


def _grants(*accounts: str) -> list[dict[str, Any]]:
    return [{"type": "grant", "account": a, "amount": 10, "time": 0} for a in accounts]


def _a_job_filed_under_b(web: TestClient, step: dict[str, Any]) -> None:
    """b submits job j (cost 4, at 5) and `step` of it comes in the same batch, so the
    step goes to b's stream; a's late submit of the same id (cost 3, at 1) then comes
    first on the timeline: the job, and the step, are a's."""
    post_events(web, *_grants("a", "b"),
                {"type": "submit", "account": "b", "job": "j", "cost": 4, "priority": 1,
                 "time": 5}, step)
    post_events(web, {"type": "submit", "account": "a", "job": "j", "cost": 3,
                      "priority": 1, "time": 1})


def test_a_jobs_start_filed_under_another_account_is_on_its_accounts_ledger(
        tmp_path: Path) -> None:
    with TestClient(app_for(f"sqlite:///{tmp_path / 'j.db'}")) as web:
        _a_job_filed_under_b(web, {"type": "start", "job": "j", "time": 6})
        assert web.get("/v1/journal").json()["events"][3]["type"] == "start"
        expected = _statement_lines(web, "a")
        assert (4, "start") in expected
        assert _ledger_lines(web, "a") == expected


def test_a_start_recorded_before_its_submit_is_on_the_accounts_ledger(
        tmp_path: Path) -> None:
    # A start nobody had submitted goes to the stream `job:j`; the submit, recorded
    # later but earlier on the timeline, makes it a's job.
    with TestClient(app_for(f"sqlite:///{tmp_path / 'j.db'}")) as web:
        post_events(web, *_grants("a"), {"type": "start", "job": "j", "time": 6})
        post_events(web, {"type": "submit", "account": "a", "job": "j", "cost": 3,
                          "priority": 1, "time": 1})
        post_events(web, {"type": "consume", "account": "a", "amount": 1, "time": 7})
        for query in ("", "?as_known_at=3"):
            expected = _statement_lines(web, "a", query)
            assert (2, "start") in expected
            assert _ledger_lines(web, "a", query) == expected


def test_an_event_page_counts_a_cancel_filed_under_another_account(tmp_path: Path) -> None:
    # As above with a cancel: a's job j holds nothing after it, though a's stream alone
    # would keep its 3 reserved.
    url = f"sqlite:///{tmp_path / 'j.db'}"
    with TestClient(app_for(url)) as web:
        _a_job_filed_under_b(web, {"type": "cancel", "job": "j", "time": 6})
        post_events(web, {"type": "consume", "account": "a", "amount": 1, "time": 7,
                          "id": "use"})
        lines = web.get("/v1/accounts/a/statement").json()["lines"]
        assert [line["reserved"] for line in lines if line["position"] == 6] == [0]
        assert _reserved_after(_changed_rows(web, "use")) == 0
        assert _ledger_lines(web, "a") == _statement_lines(web, "a")



def test_an_event_page_of_a_jobs_step_filed_under_another_account_shows_the_jobs_account(
        tmp_path: Path) -> None:
    # The cancel is filed under b's stream, but the job, and so the cancel, are a's: its
    # page shows a's line (3 released), as a's statement has it, and links to a.
    with TestClient(app_for(f"sqlite:///{tmp_path / 'j.db'}")) as web:
        _a_job_filed_under_b(web, {"type": "cancel", "job": "j", "time": 6, "id": "stop"})
        lines = web.get("/v1/accounts/a/statement").json()["lines"]
        (cancel,) = [line for line in lines if line["position"] == 4]
        page = web.get("/event?id=stop", follow_redirects=True).text
        rows = cells(page, "changed-table")
    assert 'a step of a job of account <a href="/accounts/a">a</a>' in page
    assert [row[0].split(" ")[0] for row in rows] == ["cancel"]
    assert (int(rows[0][2].replace(",", "")), _reserved_after(rows)) == (
        cancel["balance"], cancel["reserved"])
    assert 'href="/accounts/a?as_known_at=4"' in page

# -- credits expiring ----------------------------------------------------------------------

def test_the_summary_lists_credits_held_by_jobs_apart_as_expiring_does(
        tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from tools.cli import app as cli

    url = f"sqlite:///{tmp_path / 'j.db'}"
    with TestClient(app_for(url)) as web:
        # The job holds all of g1 that is left and 2 of g2: both expire within the week.
        post_events(web,
                    {"type": "grant", "account": "a", "amount": 10, "time": 0,
                     "expiry": 1000, "id": "g1"},
                    {"type": "grant", "account": "a", "amount": 5, "time": 0,
                     "expiry": 2000, "id": "g2"},
                    {"type": "submit", "account": "a", "job": "j", "cost": 12,
                     "priority": 1, "time": 1})
        rows = cells(web.get("/").text, "expiring-table")
    listed = CliRunner().invoke(cli, ["expiring", "--json", "--db", url])
    assert listed.exit_code == 0, listed.stderr
    expected = [[c["grant"], str(c["amount"]), str(c["held"])]
                for c in json.loads(listed.stdout)["credits"]]
    assert expected == [["g1", "0", "10"], ["g2", "3", "2"]]
    assert [row[3:] for row in rows] == expected


# -- the journal page ----------------------------------------------------------------------

def _events_heading(web: TestClient, query: str = "") -> str:
    found = re.search(r'<h2 id="events">(.*?)</h2>', web.get(f"/journal{query}").text)
    assert found
    return found.group(1)


def test_the_journal_page_of_an_empty_journal_says_there_are_no_events(
        tmp_path: Path) -> None:
    with TestClient(app_for(f"sqlite:///{tmp_path / 'j.db'}")) as web:
        assert _events_heading(web) == "No events yet"
        post_events(web, *_grants("a", "b"))
        assert _events_heading(web) == "Events 1 to 2 of 2"
        assert _events_heading(web, "?after=2") == "No events after #2 of 2"
