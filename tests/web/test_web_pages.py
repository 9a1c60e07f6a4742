"""Every page and filter of the web view, rendered over the demo month (no browser).

The demo month (seed 42) has a late grant recorded at position 980 for lumen-health that
changed which grant paid several of its jobs, among them lumen-0191; job cobalt-0074 was
rejected at submit.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from html import unescape as html_unescape
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote, unquote

import pytest
from fastapi.testclient import TestClient
from pagetext import cells

from projections.queries import JobExplanation, statement, to_dict
from tools.web.browsing import app_for

LATE_GRANT = 980
DEMO_REVISIONS = 18  # what the demo's own summary prints: "revisions by late events 18"
ACCOUNT = "lumen-health"


def test_summary_lists_every_account_with_figures_per_pool(client: TestClient) -> None:
    r = client.get("/")
    assert r.status_code == 200
    rows = cells(r.text, "accounts-table")
    totals = [row for row in rows if row[1] == "all"]
    assert len(totals) == 20
    assert [row[0] for row in totals] == sorted(row[0] for row in totals)
    assert 'href="/accounts/lumen-health"' in r.text
    for row in totals:  # balance - reserved = available, with thousands separators
        balance, available, reserved = (int(v.replace(",", "")) for v in row[2:5])
        assert available == balance - reserved


def test_summary_shows_head_expiring_credits_and_verify_state(client: TestClient) -> None:
    r = client.get("/")
    head = client.app.state.ledger.journal.head()  # type: ignore[attr-defined]
    assert f"#{head:,}" in r.text
    assert re.search(r"<code>[0-9a-f]{64}</code>", r.text)
    assert "Credits expiring by" in r.text
    expiring = cells(r.text, "expiring-table")
    assert expiring and all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", row[0])
                            for row in expiring if len(row) == 6)
    assert "No verification recorded yet" in r.text or "OK" in r.text


def test_account_page_has_figures_grants_ledger_and_chart_source(client: TestClient) -> None:
    r = client.get(f"/accounts/{ACCOUNT}")
    assert r.status_code == 200
    grants = cells(r.text, "grants-table")
    assert grants and all(len(row) == 11 for row in grants)
    ledger = cells(r.text, "ledger-table")
    journal = client.app.state.ledger.journal  # type: ignore[attr-defined]
    assert len(ledger) == len(statement(journal, ACCOUNT).lines)
    assert f'data-src="/accounts/{ACCOUNT}/timeline.json?as_known_at={journal.head()}"' in r.text
    assert 'href="/events/' in r.text and 'href="/jobs/' in r.text
    assert "revised" in r.text  # the late grant's revisions are marked on their lines


def test_account_ledger_filters_by_kind_pool_and_time(client: TestClient) -> None:
    rows = cells(client.get(f"/accounts/{ACCOUNT}?kind=grant").text, "ledger-table")
    assert rows and all(row[2].startswith("grant") for row in rows)
    rows = cells(client.get(f"/accounts/{ACCOUNT}?pool=a100").text, "ledger-table")
    assert rows and all(row[3] == "a100" for row in rows)
    rows = cells(client.get(f"/accounts/{ACCOUNT}?from=2026-11-10&to=2026-11-12").text,
                 "ledger-table")
    assert rows and all("2026-11-10" <= row[0][:10] <= "2026-11-12" for row in rows)


def test_account_filters_refuse_bad_values_with_what_is_valid(client: TestClient) -> None:
    r = client.get(f"/accounts/{ACCOUNT}?from=yesterday")
    assert r.status_code == 422 and "ISO-8601" in r.text
    r = client.get(f"/accounts/{ACCOUNT}?kind=bogus")
    assert r.status_code == 422 and "consume" in r.text
    r = client.get(f"/accounts/{ACCOUNT}?as_known_at=-3")
    assert r.status_code == 422 and "position" in r.text


def test_unknown_account_is_404_naming_known_ones(client: TestClient) -> None:
    r = client.get("/accounts/no-such-team")
    assert r.status_code == 404 and "lumen-health" in r.text


def test_as_known_at_before_the_late_grant_shows_the_old_payers(client: TestClient) -> None:
    now = client.get(f"/accounts/{ACCOUNT}").text
    before = client.get(f"/accounts/{ACCOUNT}?as_known_at={LATE_GRANT - 1}").text
    assert 'id="known-banner"' in before and 'id="known-banner"' not in now
    assert f"#{LATE_GRANT - 1:,}" in before
    # The late grant is not in the old view's grants; its revisions are marked "after".
    assert "demo42-00980" in cells(now, "grants-table")[-1][0] or any(
        "demo42-00980" in row[0] for row in cells(now, "grants-table"))
    assert not any("demo42-00980" in row[0] for row in cells(before, "grants-table"))
    assert 'class="later"' in before and 'class="later"' not in now


def test_as_known_at_takes_a_recorded_time(client: TestClient) -> None:
    # As `--as-known-at` and the API: before the first record there is nothing to
    # answer from, and the page says when the first was recorded.
    for early in ("2000-01-01T00:00Z", "0"):
        r = client.get(f"/accounts/{ACCOUNT}?as_known_at={early}")
        assert r.status_code == 422 and "nothing was recorded yet" in r.text, early
        api = client.get(f"/v1/accounts/{ACCOUNT}/balance?as_known_at={early}")
        assert api.status_code == 422, early
    r = client.get(f"/accounts/{ACCOUNT}?as_known_at=2999-01-01T00:00Z")
    assert r.status_code == 200 and 'id="known-banner"' not in r.text  # the head


@pytest.mark.parametrize(("query", "named"), [
    ("from=10&to=5", "is after to"),
    ("from=9223372036854775808", "from"),
    ("to=-99999999999999999999999", "to"),
    ("page=%EF%BC%91", "page"),  # a full-width digit
    ("page=1_0", "page"),
    ("as_known_at=" + "9" * 5000, "as_known_at"),
])
def test_a_bad_filter_is_a_422_naming_it(client: TestClient, query: str, named: str) -> None:
    for path in (f"/accounts/{ACCOUNT}", f"/accounts/{ACCOUNT}/ledger.csv"):
        r = client.get(f"{path}?{query}")
        assert r.status_code == 422 and named in r.text, (path, query)
        assert "sys.set_int_max_str_digits" not in r.text


def test_timeline_json_has_points_per_pool_and_burndowns(client: TestClient) -> None:
    data = client.get(f"/accounts/{ACCOUNT}/timeline.json").json()
    assert data["account"] == ACCOUNT and data["points"] and data["grants"]
    for point in data["points"]:
        assert point["balance"] == sum(point["pools"].values())
        assert point["available"] == point["balance"] - point["held"]
    times = [p["time"] for p in data["points"]]
    assert times == sorted(times)
    old = client.get(f"/accounts/{ACCOUNT}/timeline.json?as_known_at={LATE_GRANT - 1}").json()
    assert old["as_known_at"] == LATE_GRANT - 1
    assert {g["grant"] for g in old["grants"]} < {g["grant"] for g in data["grants"]}
    assert client.get("/accounts/nobody/timeline.json").status_code == 404


def test_csv_download_matches_the_filtered_ledger(client: TestClient) -> None:
    r = client.get(f"/accounts/{ACCOUNT}/ledger.csv?kind=consume")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(r.text)))
    page = cells(client.get(f"/accounts/{ACCOUNT}?kind=consume").text, "ledger-table")
    assert len(rows) == len(page) > 0
    assert all(row["type"] == "consume" for row in rows)
    assert [int(row["balance"]) for row in rows] == [int(c[5].replace(",", "")) for c in page]


def test_job_page_shows_timeline_and_payers(client: TestClient) -> None:
    r = client.get("/jobs/lumen-0191")
    assert r.status_code == 200
    events = cells(r.text, "job-events")
    assert [row[2] for row in events] == ["submit", "start", "complete"]
    assert cells(r.text, "paid-by")


def test_rejected_job_says_why(client: TestClient) -> None:
    r = client.get("/jobs/cobalt-0074")
    assert r.status_code == 200 and "Rejected at submit" in r.text and "available" in r.text
    assert client.get("/jobs/nope").status_code == 404


def test_journal_pages_events_and_lists_revisions(client: TestClient) -> None:
    first = cells(client.get("/journal?limit=10").text, "journal-table")
    assert [row[0] for row in first] == [str(n) for n in range(1, 11)]
    second = client.get("/journal?after=10&limit=10").text
    assert cells(second, "journal-table")[0][0] == "11"
    assert 'rel="prev"' in second and 'rel="next"' in second
    revisions = cells(second, "revisions-table")
    # The same revisions as the API's (and `gpu-credits revisions`, the demo's summary):
    # events appended together revise only what was known before them.
    api = client.get("/v1/revisions?limit=1000").json()["revisions"]
    assert len(revisions) == len(api) == DEMO_REVISIONS
    assert sorted((row[0].replace(",", ""), row[2].split(" ")[0]) for row in revisions) == sorted(
        (str(rev["late_position"]), rev["event_id"]) for rev in api)
    assert client.get("/journal?limit=0").status_code == 422


def test_event_page_shows_fields_hash_and_what_it_changed(client: TestClient) -> None:
    r = client.get(f"/events/{LATE_GRANT}")
    assert r.status_code == 200
    assert "demo42-00980" in r.text and re.search(r"<code>[0-9a-f]{64}</code>", r.text)
    assert cells(r.text, "changed-table")
    assert 'id="caused"' in r.text  # the outcomes it revised
    assert '<span class="mark">late</span>' in r.text
    first = client.get("/events/1")
    assert first.status_code == 200 and cells(first.text, "changed-table")
    assert '<span class="mark">late</span>' not in first.text
    assert client.get("/events/0").status_code == 422
    assert client.get("/events/999999").status_code == 404
    assert client.get("/events/abc").status_code == 422
    assert client.get("/events/%20").status_code == 422
    assert client.get("/events/1_0").status_code == 422
    moved = client.get("/event?id=demo42-00980", follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == f"/events/{LATE_GRANT}"
    # No id at all is a bad parameter (422, naming it), not an event that is not there.
    for path in ("/event", "/event?id="):
        missing = client.get(path)
        assert missing.status_code == 422 and "id" in missing.text, path
    assert client.get("/event?id=nobody").status_code == 404


def test_verify_runs_in_the_background_and_reports(client: TestClient) -> None:
    moved = client.post("/journal/verify", follow_redirects=False)
    assert moved.status_code == 303
    fragment = client.post("/journal/verify", headers={"HX-Request": "true"}).text
    assert 'id="verify-status"' in fragment
    source = client.app.state.web_source  # type: ignore[attr-defined]
    status = source.verifier.wait(60)
    assert status.state == "ok" and status.events > 0
    assert "OK" in client.get("/journal/verify").text
    assert "OK" in client.get("/").text


def test_another_site_s_page_cannot_start_a_verification(demo_db: str) -> None:
    cross = ({"Origin": "https://evil.example"}, {"Origin": "null"},
             {"Origin": "http://testserver:8000"},  # another port is another origin
             {"Sec-Fetch-Site": "cross-site"},
             {"Sec-Fetch-Site": "same-site", "Origin": "http://testserver"},
             {"Origin": "http://["})  # no origin urlsplit reads: was 422 "Invalid IPv6 URL"
    with TestClient(app_for(demo_db)) as own:
        for headers in cross:
            refused = own.post("/journal/verify", headers=headers, follow_redirects=False)
            assert refused.status_code == 403, headers
            assert "nothing was started" in html_unescape(refused.text)
        verifier = own.app.state.web_source.verifier  # type: ignore[attr-defined]
        assert verifier.status().state == "never"
        # This view's own page (same origin) and a client that is no browser may.
        same = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
        for allowed in (same, {}):
            assert own.post("/journal/verify", headers=allowed,
                            follow_redirects=False).status_code == 303
        assert verifier.wait(60).state == "ok"


def test_markup_in_names_is_escaped(tmp_path: object) -> None:
    from pathlib import Path

    from eventstore import Journal, NewEvent

    url = f"sqlite:///{Path(str(tmp_path)) / 'x.db'}"
    journal = Journal(url)
    journal.append([NewEvent("<b>g</b>", "<script>x</script>", "grant", 1,
                             {"account": "<script>x</script>", "amount": 5,
                              "memo": "<img src=x onerror=alert(1)>"})])
    journal.close()
    with TestClient(app_for(url)) as c:
        for path in ("/", "/journal", "/events/1", "/accounts/%3Cscript%3Ex%3C%2Fscript%3E"):
            body = c.get(path).text
            assert "<script>x" not in body and "<img src=x" not in body, path


def test_a_job_refused_before_its_account_opened_says_when_it_is_opened(
        tmp_path: object) -> None:
    from pathlib import Path

    from eventstore import Journal, NewEvent

    url = f"sqlite:///{Path(str(tmp_path)) / 'early.db'}"
    journal = Journal(url)
    journal.append([NewEvent("s", "a", "submit", 1_767_225_600,
                             {"job": "j1", "account": "a", "cost": 5, "priority": 1})])
    journal.append([NewEvent("o", "a", "account", 1_767_312_000, {"account": "a"})])
    journal.close()
    with TestClient(app_for(url)) as c:
        why = c.get("/jobs/j1").text.split('id="why">', 1)[1].split("</p>", 1)[0]
        assert why.startswith("Rejected at submit: unknown account &#39;a&#39;; the account "
                              "is opened later, at ")
        assert "2026-01-02" in why


def test_pages_need_a_read_token_when_the_service_has_tokens(demo_db: str) -> None:
    from tools.service.app import create_app
    from tools.service.auth import Token

    app = create_app(demo_db, tokens=[Token("auditor", b"s3cret")])
    with TestClient(app) as c:
        assert c.get("/").status_code == 401
        assert c.get(f"/accounts/{ACCOUNT}/timeline.json").status_code == 401
        ok = c.get("/", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "Accounts" in ok.text
        assert c.get("/static/web/web.css").status_code == 200  # no figures in static files


BROWSER = {"accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
"""What a browser asks for when it follows a link."""


def test_a_browsers_mistyped_path_is_a_page_the_apis_stays_a_problem(client: TestClient) -> None:
    """A path no route answers is the view's error page for a browser (a language, a title,
    landmarks, the pages named), and the API's problem for anything else."""
    r = client.get("/acounts/lumen-health", headers=BROWSER)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    assert '<html lang="en">' in r.text and "<title>No such page" in r.text
    assert "/acounts/lumen-health" in r.text and "/accounts/{account}" in r.text
    assert r.headers["content-security-policy"].startswith("default-src 'self'")
    for path, headers in (("/acounts/x", {}), ("/v1/nope", BROWSER),
                          ("/static/web/nope.js", BROWSER)):
        r = client.get(path, headers=headers)
        assert r.status_code == 404, path
        assert r.headers["content-type"] == "application/problem+json", path
    r = client.post("/journal", headers=BROWSER)
    assert r.status_code == 405 and r.headers["content-type"] == "application/problem+json"


def test_a_mistyped_path_shows_no_page_without_a_read_token(demo_db: str) -> None:
    """The error page shows the journal's head: on a service with tokens, a browser
    without one gets the API's answer, as before."""
    from tools.service.app import create_app
    from tools.service.auth import Token

    with TestClient(create_app(demo_db, tokens=[Token("auditor", b"s3cret")])) as c:
        r = c.get("/acounts/x", headers=BROWSER)
        assert r.status_code == 404
        assert r.headers["content-type"] == "application/problem+json"
        assert "head" not in r.text
        ok = c.get("/acounts/x", headers={**BROWSER, "Authorization": "Bearer s3cret"})
        assert ok.status_code == 404 and "<title>No such page" in ok.text


def test_an_accounts_stream_answers_as_the_whole_journal_does(demo_db: str) -> None:
    """The pages read an account's figures from one fold of its stream alone: the same
    statement and lineage as a fold of the whole journal, now and as known at earlier
    positions."""
    from eventstore import Journal, JournalLike
    from projections.errors import UnknownAccount
    from projections.queries import explain_account, statement
    from tools.web.pages import account_history
    from tools.web.source import AuditSource, JournalView

    journal = Journal(demo_db)
    try:
        source = AuditSource(journal)
        accounts = sorted({rec.stream for rec in journal.read(order="position")})
        for position in (journal.head(), 500, 979, 1800):
            # the view reads as the journal does up to `position` (it writes nothing)
            whole = cast("JournalLike", JournalView(journal, position))
            for account in accounts:
                history = account_history(source, account, position)
                assert history.statement == statement(whole, account), account
                try:
                    expected = to_dict(explain_account(whole, account))
                except UnknownAccount:  # not yet known at that position
                    assert not history.seen
                    continue
                assert to_dict(history.explanation) == expected, account
    finally:
        journal.close()


def test_revisions_of_a_large_journal_are_found_in_the_background(
        demo_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore import Journal
    from tools.web import source as source_module
    from tools.web.pages import recent_revisions
    from tools.web.source import AuditSource

    monkeypatch.setattr(source_module, "SYNC_REPLAY_LIMIT", 10)  # the demo month is "large"
    journal = Journal(demo_db)
    try:
        source = AuditSource(journal)
        source.warm_up()
        rows, total = recent_revisions(source)
        # never a partial answer
        assert (rows is None and total == 0) or total == DEMO_REVISIONS
        assert len(source.wait_for_revisions(120) or []) == DEMO_REVISIONS
        rows, total = recent_revisions(source)
        assert rows is not None and total == DEMO_REVISIONS
    finally:
        journal.close()


def test_summary_finds_accounts_by_name_and_pages(client: TestClient) -> None:
    rows = cells(client.get("/?q=LUMEN").text, "accounts-table")
    assert [row[0] for row in rows if row[1] == "all"] == ["lumen-health"]
    assert client.get("/?page=2").status_code == 422  # 20 accounts: one page
    assert client.get("/?page=x").status_code == 422


def test_summary_shows_the_last_verify_however_it_ran(tmp_path: Path) -> None:
    """A verification from the command line or the HTTP API shows on the summary as one
    from the journal page does: the verdict is recorded beside the journal."""
    import sqlite3

    from typer.testing import CliRunner

    from tools.cli import app as cli
    from tools.web.screenshots import demo_url

    url = demo_url(tmp_path)
    with TestClient(app_for(url)) as c:
        assert "No verification recorded yet" in c.get("/").text
        assert CliRunner().invoke(cli, ["verify", "--db", url]).exit_code == 0
        summary = c.get("/").text
        assert "<strong class=\"ok\">OK</strong>" in summary
        assert "by gpu-credits verify" in summary
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        with conn:
            conn.execute("UPDATE events SET payload = replace(payload, '800', '900') "
                         "WHERE position = 2")
        conn.close()
        assert CliRunner().invoke(cli, ["verify", "--db", url]).exit_code == 1
        summary = c.get("/").text
        assert "FAILED" in summary and 'href="/events/2"' in summary
        assert c.post("/v1/journal/verify", json={}).json()["ok"] is False
        assert "by POST /v1/journal/verify" in c.get("/").text


def _cli_journal(tmp_path: Path, *commands: tuple[str, ...]) -> str:
    """A SQLite journal written by these `gpu-credits` commands; its URL."""
    from typer.testing import CliRunner

    from tools.cli import app as cli

    url = f"sqlite:///{tmp_path / 'small.db'}"
    for args in commands:
        result = CliRunner().invoke(cli, [*args, "--db", url])
        assert result.exit_code == 0, result.stderr
    return url


def test_verify_counts_every_event_of_the_journal_however_it_ran(tmp_path: Path) -> None:
    """The button, POST /v1/journal/verify and `gpu-credits verify` all say how many
    events of the journal they checked: a reversed event and its reversal included."""
    from typer.testing import CliRunner

    from tools.cli import app as cli

    url = _cli_journal(tmp_path, ("grant", "a", "100", "--at", "0", "--id", "g1"),
                       ("consume", "a", "5", "--at", "1", "--id", "c1"),
                       ("reverse", "c1", "--reason", "x"))
    with TestClient(app_for(url)) as c:
        assert c.post("/journal/verify", headers={"HX-Request": "true"}).status_code == 200
        status = c.app.state.web_source.verifier.wait(60)  # type: ignore[attr-defined]
        assert (status.state, status.events, status.head) == ("ok", 3, 3)
        assert "OK</strong>: 3 events, hash chain intact" in c.get("/journal/verify").text
        assert c.post("/v1/journal/verify", json={}).json()["events"] == 3
        assert "OK</strong>: 3 events, hash chain intact" in c.get("/").text
        assert CliRunner().invoke(cli, ["verify", "--db", url]).exit_code == 0
        assert "OK</strong>: 3 events, hash chain intact" in c.get("/").text


def _stale_checkpoint(url: str) -> None:
    """Replace the journal's checkpoint with the same one labelled as an older format
    (its own hash made to match): intact, of this chain, only out of date."""
    import hashlib

    import orjson

    from eventstore import Journal
    from projections.checkpoint import CHECKPOINT, MAGIC
    from projections.replay import replay

    with Journal(url) as journal:
        replay(journal, checkpoint=True)
        (info,) = journal.snapshots(CHECKPOINT)
        blob = journal.load_snapshot(info.id)
        end = blob.index(b"\n", len(MAGIC))
        header, body = orjson.loads(blob[len(MAGIC):end]), blob[end + 1:]
        header.pop("sha256")
        header["version"] = 1
        plain = orjson.dumps(header, option=orjson.OPT_SORT_KEYS)
        header["sha256"] = hashlib.sha256(plain + b"\n" + body).hexdigest()
        journal.drop_snapshots(CHECKPOINT)
        journal.save_snapshot(CHECKPOINT, info.position, info.event_time, info.digest,
                              MAGIC + orjson.dumps(header, option=orjson.OPT_SORT_KEYS)
                              + b"\n" + body)


def test_the_verdict_names_the_stale_checkpoints_however_it_ran(tmp_path: Path) -> None:
    """A checkpoint saved in an older format is passed over with a note, not a finding:
    the button's verdict says so in the words `gpu-credits verify` prints, and names it,
    as does the summary after a verify from the command line or the HTTP API."""
    from typer.testing import CliRunner

    from tools.cli import app as cli

    url = _cli_journal(tmp_path, ("grant", "a", "100", "--at", "0", "--id", "g1"),
                       ("consume", "a", "5", "--at", "1", "--id", "c1"))
    _stale_checkpoint(url)
    printed = CliRunner().invoke(cli, ["verify", "--db", url])
    assert printed.exit_code == 0, printed.stdout
    (note,) = [line for line in printed.stdout.splitlines() if line.startswith("note: ")]
    assert "1 checkpoint(s) saved in another format" in note
    with TestClient(app_for(url)) as c:
        summary = c.get("/").text
        assert "by gpu-credits verify" in summary and note in summary
        assert re.search(r"<li>checkpoint \d+ at position 2: [^<]*version 1", summary)
        assert "no checkpoint recorded yet" not in summary  # one was: it was passed over

        assert c.post("/journal/verify", headers={"HX-Request": "true"}).status_code == 200
        status = c.app.state.web_source.verifier.wait(60)  # type: ignore[attr-defined]
        assert (status.state, status.checkpoints, len(status.stale_checkpoints)) \
            == ("ok", 0, 1)
        shown = c.get("/journal/verify").text
        assert "by the journal page" in shown and note in shown
        assert re.search(r"<li>checkpoint \d+ at position 2: [^<]*version 1", shown)

        assert c.post("/v1/journal/verify", json={}).json()["stale_checkpoints"] \
            == list(status.stale_checkpoints)
        summary = c.get("/").text
        assert "by POST /v1/journal/verify" in summary and note in summary

    replayed = CliRunner().invoke(cli, ["replay", "--db", url])
    assert replayed.exit_code == 0, replayed.stdout
    assert CliRunner().invoke(cli, ["verify", "--db", url]).exit_code == 0
    with TestClient(app_for(url)) as c:  # a fresh checkpoint: nothing passed over
        summary = c.get("/").text
        assert "replay reproduces the 1 recorded checkpoint" in summary
        assert "note: " not in summary and 'id="verify-stale"' not in summary


def test_the_summary_and_expiring_list_the_same_window(tmp_path: Path) -> None:
    """Credits count for `time <= t < expiry`: at the latest event time T, a grant expiring
    at T has stopped counting already and one expiring at T + 7 days stops within the
    week. The summary and `gpu-credits expiring` both list `T < expiry <= T + 7d`."""
    from typer.testing import CliRunner

    from tools.cli import app as cli

    week = 7 * 86_400
    url = _cli_journal(
        tmp_path,
        *(("grant", "a", "10", "--at", "0", "--expiry", str(expiry), "--id", grant)
          for grant, expiry in (("at-t", 100), ("in-a-week", 100 + week),
                                ("after-the-week", 101 + week))),
        ("consume", "a", "1", "--at", "100", "--id", "u1"))  # the latest event time
    with TestClient(app_for(url)) as c:
        rows = cells(c.get("/").text, "expiring-table")
    assert [row[3] for row in rows] == ["in-a-week"]
    listed = CliRunner().invoke(cli, ["expiring", "--json", "--db", url])
    assert listed.exit_code == 0, listed.stderr
    assert [c["grant"] for c in json.loads(listed.stdout)["credits"]] == ["in-a-week"]


def test_the_ledger_pages_from_the_latest_lines_and_the_csv_has_them_all(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.web import pages

    monkeypatch.setattr(pages, "LEDGER_PAGE", 50)
    journal = client.app.state.ledger.journal  # type: ignore[attr-defined]
    every = statement(journal, ACCOUNT).lines
    assert len(every) > 150
    shown = cells(client.get(f"/accounts/{ACCOUNT}").text, "ledger-table")
    last = -(-len(every) // 50)
    assert len(shown) == len(every) - (last - 1) * 50  # the latest lines first
    assert shown[-1][5] == f"{every[-1].balance:,}"
    first = client.get(f"/accounts/{ACCOUNT}?page=1")
    rows = cells(first.text, "ledger-table")
    assert [row[5] for row in rows] == [f"{line.balance:,}" for line in every[:50]]
    assert "Later lines" in first.text and f"of {len(every):,} matching" in first.text
    assert client.get(f"/accounts/{ACCOUNT}?page={last + 1}").status_code == 422
    csv_text = client.get(f"/accounts/{ACCOUNT}/ledger.csv").text
    assert len(list(csv.DictReader(io.StringIO(csv_text)))) == len(every)


def _kind_of_life(explanation: JobExplanation) -> tuple[object, ...]:
    """What sets a job's page apart from another's: its state, its acceptance, whether it
    waits, lapsed, was paid by several grants or refused before its account opened."""
    return (explanation.state, explanation.accepted, explanation.reason is None,
            explanation.waiting is None, bool(explanation.lapsed),
            len(explanation.paid_by) > 1, explanation.account_opened_at is None)


def test_a_jobs_page_folds_its_account_only_up_to_the_job_and_answers_as_explain_does(
        client: TestClient) -> None:
    from projections.queries import explain_job
    from tools.web.pages import job_page

    # The app makes its source on the first page asked for: ask for one, whatever ran
    # before this test.
    assert client.get("/").status_code == 200
    source = client.app.state.web_source  # type: ignore[attr-defined]
    journal = source.journal
    jobs = sorted({str(rec.payload["job"]) for rec in journal.read(order="position")
                   if "job" in rec.payload})
    assert len(jobs) > 100
    # Every job's page is made; a full fold per job for the reference would take most of
    # a minute (870 jobs), so it is asked for the first and last job of each kind of life
    # the pages tell, and for every 25th job besides.
    kinds: dict[tuple[object, ...], list[str]] = {}
    pages: dict[str, dict[str, Any]] = {}
    for job in jobs:
        explanation, _ = job_page(source, job)
        pages[job] = to_dict(explanation)
        kinds.setdefault(_kind_of_life(explanation), []).append(job)
    assert len(kinds) >= 6, sorted(kinds, key=repr)
    sample = {job for kind in kinds.values() for job in (kind[0], kind[-1])} | set(jobs[::25])
    for job in sorted(sample):
        assert pages[job] == to_dict(explain_job(journal, job)), job
    assert client.get("/jobs/no-such-job").status_code == 404


def test_every_page_forbids_framing_caching_and_scripts_from_elsewhere(
        client: TestClient) -> None:
    from tools.web.routes import PAGE_HEADERS

    for path in ("/", "/journal", "/accounts/no-such-account"):
        page = client.get(path)
        for name, value in PAGE_HEADERS.items():
            assert page.headers[name] == value, (path, name)
    for path in (f"/accounts/{ACCOUNT}/ledger.csv", f"/accounts/{ACCOUNT}/timeline.json",
                 "/accounts/no-such-account/timeline.json"):
        download = client.get(path)
        assert download.headers["Cache-Control"] == "no-store", path
        assert download.headers["X-Content-Type-Options"] == "nosniff", path
    assert "frame-ancestors 'none'" in PAGE_HEADERS["Content-Security-Policy"]
    # No inline script or style: an injected `<style>` or `style=` could not apply
    # (tests/web/test_web_browser.py loads every page under this policy in Chromium and
    # finds no violation).
    assert "unsafe-inline" not in PAGE_HEADERS["Content-Security-Policy"]
    assert "unsafe-eval" not in PAGE_HEADERS["Content-Security-Policy"]


def test_pages_of_an_account_and_a_job_named_with_a_slash(tmp_path: Path) -> None:
    """Their links (the name quoted, "/" as %2F) lead to their pages, CSV and chart."""
    url = _cli_journal(tmp_path, ("grant", "team/alpha", "10", "--at", "0"))
    with TestClient(app_for(url)) as c:
        summary = c.get("/").text
        assert "/accounts/team%2Falpha" in summary
        page = c.get("/accounts/team%2Falpha")
        assert page.status_code == 200 and "team/alpha" in page.text
        assert c.get("/accounts/team%2Falpha/ledger.csv").status_code == 200
        assert c.get("/accounts/team%2Falpha/timeline.json").status_code == 200
        assert c.get("/accounts/team%2Fbeta").status_code == 404


def test_an_account_named_like_a_download_has_its_own_page(tmp_path: Path) -> None:
    """`acme/ledger.csv` linked as /accounts/acme%2Fledger.csv is that account's page, not
    acme's CSV; its own CSV and chart are under its quoted name."""
    url = _cli_journal(tmp_path, ("grant", "acme", "5", "--at", "0"),
                       ("grant", "acme/ledger.csv", "7", "--at", "0"),
                       ("grant", "team/timeline.json", "9", "--at", "0"))
    with TestClient(app_for(url)) as c:
        for name in ("acme/ledger.csv", "team/timeline.json"):
            quoted = quote(name, safe="")
            page = c.get(f"/accounts/{quoted}")
            assert page.status_code == 200 and f"Account {name}" in page.text, name
            assert c.get(f"/accounts/{quoted}/timeline.json").json()["account"] == name
            assert c.get(f"/accounts/{quoted}/ledger.csv").headers[
                "content-type"].startswith("text/csv")
        acme_csv = c.get("/accounts/acme/ledger.csv")
        assert acme_csv.headers["content-type"].startswith("text/csv") and "5" in acme_csv.text


def test_memos_are_on_the_ledger_its_csv_and_the_event_page(tmp_path: Path) -> None:
    """As in `statement`: each line's detail is followed by its event's memo."""
    url = _cli_journal(tmp_path, ("grant", "a", "100", "--at", "0", "--memo", "PO 4411"),
                       ("consume", "a", "30", "--at", "5", "--memo", "run 17, <alice>"))
    with TestClient(app_for(url)) as c:
        page = c.get("/accounts/a").text
        ledger = c.get("/accounts/a/ledger.csv").text
        event = c.get("/events/2").text
    assert "memo: run 17, &lt;alice&gt;" in page and "memo: PO 4411" in page
    rows = list(csv.DictReader(io.StringIO(ledger)))
    assert [row["detail"].rpartition("; memo: ")[2] for row in rows] == [
        "PO 4411", "run 17, <alice>"]
    assert "run 17, &lt;alice&gt;" in event


def test_the_chart_of_an_account_opened_without_a_time(tmp_path: Path) -> None:
    """An `account` event without time is at the start of the timeline: its point's time
    is null, as in every JSON answer, never the internal placeholder."""
    lines = tmp_path / "opened.jsonl"
    lines.write_text('{"type": "account", "account": "a", "max_running": 2}\n')
    url = _cli_journal(tmp_path, ("import", str(lines)), ("grant", "a", "10", "--at", "100"))
    with TestClient(app_for(url)) as c:
        points = c.get("/accounts/a/timeline.json").json()["points"]
    assert [p["time"] for p in points] == [None, 100]


@pytest.mark.parametrize("name", ["日本", "déjà-vu", "team/α"])
def test_the_ledger_download_of_an_account_named_beyond_ascii(tmp_path: Path,
                                                                name: str) -> None:
    """An HTTP header is Latin-1: the name goes as RFC 6266's UTF-8 `filename*`, beside
    an ASCII `filename`, and the CSV is the account's."""
    url = _cli_journal(tmp_path, ("grant", name, "10", "--at", "0"))
    with TestClient(app_for(url)) as c:
        r = c.get(f"/accounts/{quote(name, safe='')}/ledger.csv")
    assert r.status_code == 200, r.text
    disposition = r.headers["content-disposition"]
    assert disposition.isascii()
    plain, extended = disposition.split("; filename*=UTF-8''")
    assert plain.startswith('attachment; filename="') and "-ledger-1.csv" in plain
    assert unquote(extended) == name.replace("/", "_") + "-ledger-1.csv"
    assert "10" in r.text


def test_a_plain_ascii_download_name_has_no_extended_form() -> None:
    from tools.web.routes import attachment

    assert attachment("acme-ledger-7.csv") == 'attachment; filename="acme-ledger-7.csv"'
    assert attachment('a"b;c.csv') == 'attachment; filename="a_b_c.csv"'


def _small(tmp_path: Path, lines: list[dict[str, object]]) -> str:
    """A database holding these import lines."""
    from eventstore import Journal
    from projections.importing import import_file

    url = f"sqlite:///{tmp_path / 'small.db'}"
    with Journal(url) as journal:
        import_file(journal, "\n".join(json.dumps(line) for line in lines).encode(), "x.jsonl")
    return url


def test_a_stream_of_orphan_job_events_is_no_account(tmp_path: Path) -> None:
    # A start whose submit nobody recorded goes to the stream `job:ID`: no account, as
    # `statement` and the API say.
    url = _small(tmp_path, [{"type": "grant", "account": "acme", "amount": 100, "time": 0},
                            {"type": "start", "job": "orphan", "time": 7}])
    with TestClient(app_for(url)) as web:
        r = web.get("/accounts/job%3Aorphan")
        assert r.status_code == 404 and "acme" in r.text
        assert web.get("/v1/accounts/job%3Aorphan/statement").status_code == 404
        assert web.get("/accounts/acme").status_code == 200


def test_an_orphan_job_steps_page_answers_after_its_stream_was_asked_for() -> None:
    """`/accounts/job:ID` is a 404; asking it once must not leave a fold of that stream
    behind, which the event page of the step then took for its account's and failed on
    (the API's 404 problem instead of the page)."""
    with _small_view([{"type": "grant", "account": "acme", "amount": 100, "time": 0},
                      {"type": "start", "job": "orphan", "time": 7, "id": "o1"}]) as web:
        assert web.get("/events/2").status_code == 200
        assert web.get("/accounts/job%3Aorphan").status_code == 404
        r = web.get("/events/2")
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize(("fraction", "charged"), [(0.999, 1), (1e-05, 999), (0.125, 875)])
def test_an_event_page_shows_a_refund_fraction_as_the_journal_holds_it(
        fraction: float, charged: int) -> None:
    """The fraction a completion's charge is computed from, spelled as export and the
    journal page spell it: 0.999 rounded to "1.00" would read as a full refund of a job
    that was charged 1."""
    with _small_view([
            {"type": "grant", "account": "acme", "amount": 1000, "time": 0},
            {"type": "submit", "account": "acme", "job": "j", "cost": 1000, "priority": 1,
             "time": 1},
            {"type": "start", "job": "j", "time": 2},
            {"type": "complete", "job": "j", "success": False, "refund_fraction": fraction,
             "time": 3}]) as web:
        fields = dict(row[:2] for row in cells(web.get("/events/4").text, "fields-table"))
        assert web.get("/v1/jobs/j").json()["charged"] == charged
    assert fields["refund_fraction"] == repr(fraction)


def test_the_summary_before_any_timed_event_names_no_week(tmp_path: Path) -> None:
    url = _small(tmp_path, [{"type": "account", "account": "acme", "max_running": 2}])
    with TestClient(app_for(url)) as web:
        text = web.get("/").text
    assert '<h2 id="expiring">Credits expiring</h2>' in text
    assert "no event with a time is recorded yet" in text
    assert "-4611" not in text


def test_a_job_page_says_what_the_whole_journal_says_of_the_job(tmp_path: Path) -> None:
    # b submits job x after a did (an anomaly, no effect), then mine for 8 of its 10: the
    # fold of b's stream alone counts x as holding 5 and calls mine rejected.
    url = _small(tmp_path, [
        {"type": "grant", "account": "a", "amount": 100, "time": 0},
        {"type": "grant", "account": "b", "amount": 10, "time": 0},
        {"type": "submit", "account": "a", "job": "x", "cost": 1, "priority": 1, "time": 1},
        {"type": "submit", "account": "b", "job": "x", "cost": 5, "priority": 1, "time": 2},
        {"type": "submit", "account": "b", "job": "mine", "cost": 8, "priority": 1,
         "time": 3}])
    with TestClient(app_for(url)) as web:
        assert web.get("/v1/jobs/mine").json()["state"] == "pending"
        page = web.get("/jobs/mine").text
    assert "pending" in page and "rejected" not in page


def test_an_offset_sent_with_a_bare_plus_is_read_as_the_api_reads_it(
        client: TestClient) -> None:
    # Form decoding turns the `+` of `...T00:00:00+01:00` into a space.
    for query in ("from=2026-11-20T00:00:00+01:00", "as_known_at=2099-01-01T00:00:00+01:00"):
        plain = client.get(f"/accounts/{ACCOUNT}?{query}")
        encoded = client.get(f"/accounts/{ACCOUNT}?{query.replace('+', '%2B')}")
        assert plain.status_code == encoded.status_code == 200, plain.text[:300]
        assert cells(plain.text, "ledger-table") == cells(encoded.text, "ledger-table")


def test_a_grants_burn_down_ends_at_its_void(tmp_path: Path) -> None:
    url = _small(tmp_path, [
        {"type": "grant", "account": "acme", "amount": 100, "time": 0, "id": "g1"},
        {"type": "consume", "account": "acme", "amount": 30, "time": 2},
        {"type": "void", "grant": "g1", "time": 5, "reason": "contract cancelled"},
        {"type": "consume", "account": "acme", "amount": 1, "time": 9}])
    with TestClient(app_for(url)) as web:
        (grant,) = web.get("/accounts/acme/timeline.json").json()["grants"]
    assert grant["steps"] == [[0, 100], [2, 70], [5, 0]]


def test_a_grants_row_and_burn_down_count_the_debt_its_released_credits_paid(
        tmp_path: Path) -> None:
    # g1's 8 credits held by j1 come back at the cancel and pay the 3 owed first.
    url = _small(tmp_path, [
        {"type": "grant", "account": "acme", "amount": 10, "time": 0, "expiry": 1000,
         "id": "g1"},
        {"type": "submit", "account": "acme", "job": "j1", "cost": 8, "priority": 1,
         "time": 1},
        {"type": "consume", "account": "acme", "amount": 5, "time": 2},
        {"type": "cancel", "job": "j1", "time": 3}])
    with TestClient(app_for(url)) as web:
        page = web.get("/accounts/acme").text
        (grant,) = web.get("/accounts/acme/timeline.json").json()["grants"]
    header = re.search(r'id="grants-table".*?<thead>(.*?)</thead>', page, re.S)
    assert header is not None
    columns = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<th[^>]*>(.*?)</th>",
                                                              header.group(1))]
    (row,) = cells(page, "grants-table")
    figures = dict(zip(columns, row, strict=True))
    assert (figures["Amount"], figures["Paid debt"], figures["Used"], figures["Held"],
            figures["Expired"], figures["Remaining"]) == ("10", "3", "2", "0", "0", "5")
    assert grant["steps"] == [[0, 10], [2, 8], [3, 5]]  # 3 of the 8 released paid debt
    assert "released 8; 3 paid debt first (g1 3)" in page


def test_a_reversed_submit_links_to_a_job_page_that_shows_it(tmp_path: Path) -> None:
    """The ledger line of a reversed submit links to its job; the job's page shows what
    `explain --job` shows (never submitted; the submit, reversed), not a 404 claiming no
    event names the job. A job no event names is still a 404."""
    lines = [{"type": "grant", "account": "a", "amount": 100, "time": 1, "id": "g1"},
             {"type": "submit", "account": "a", "job": "j1", "cost": 5, "priority": 1,
              "time": 2, "id": "s1"},
             {"type": "reverse", "event": "s1", "time": 3, "reason": "entered by mistake",
              "id": "r1"}]
    (tmp_path / "f.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    url = _cli_journal(tmp_path, ("import", str(tmp_path / "f.jsonl")))
    with TestClient(app_for(url)) as c:
        assert 'href="/jobs/j1"' in c.get("/accounts/a").text
        page = c.get("/jobs/j1")
        assert page.status_code == 200, page.text
        assert "never submitted" in page.text
        rows = re.findall(r"<tr class=\"st-[a-z]+\">(.*?)</tr>", page.text)
        assert len(rows) == 1 and "submit" in rows[0] and "reversed, no effect" in rows[0]
        gone = c.get("/jobs/j2")
        assert gone.status_code == 404 and "no event names it" in gone.text


def test_every_page_refuses_a_query_parameter_it_does_not_take_or_reads_twice(
        client: TestClient) -> None:
    """As on /v1: a misspelt `as_known_at` must not show the head as if it had been read,
    nor `?page=1&page=9` one of two pages."""
    html = html_unescape
    job = "cobalt-0074"
    takes = {
        "/": ("q", "page"),
        f"/accounts/{ACCOUNT}": ("as_known_at", "from", "to", "pool", "kind", "page",
                                 "grants_page", "revisions_page"),
        f"/accounts/{ACCOUNT}/ledger.csv": ("as_known_at", "from", "to", "pool", "kind"),
        f"/accounts/{ACCOUNT}/timeline.json": ("as_known_at",),
        f"/jobs/{job}": (), "/journal": ("after", "limit"), "/journal/verify": (),
        "/events/5": (),
    }
    for path, known in takes.items():
        route = path.replace(ACCOUNT, "{account}").replace(job, "{job}").replace(
            "/5", "/{position}")
        r = client.get(f"{path}?as_knwon_at=5")
        said = r.json()["detail"] if path.endswith(".json") else html(r.text)
        listed = f"it takes {', '.join(known)}" if known else "it takes no query parameters"
        assert r.status_code == 422, path
        assert f"unknown query parameter 'as_knwon_at' for GET {route}: {listed}" in said, path
        if known:
            name = known[-1]
            twice = client.get(f"{path}?{name}=1&{name}=2")
            assert twice.status_code == 422, path
            assert f"query parameter '{name}' given 2 times" in (
                twice.json()["detail"] if path.endswith(".json") else html(twice.text)), path
            assert client.get(f"{path}?{known[0]}=1").status_code == 200, path
    assert client.get("/event?id=nobody&x=1").status_code == 422
    assert client.post("/journal/verify?x=1").status_code == 422


def test_an_account_with_many_grants_and_revisions_pages_them_latest_first(
        tmp_path: Path) -> None:
    """The grants and revisions tables show 100 rows a page, the latest page first, with
    links to the others that keep the rest of the view; every revised line is still
    marked on the ledger."""
    from eventstore import MemoryJournal
    from tools.service.app import create_app

    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 10**6)) as c:
        events = [{"type": "grant", "account": "a", "amount": 1, "time": 100 + i,
                   "id": f"g{i:03}"} for i in range(250)]
        events += [{"type": "consume", "account": "a", "amount": 1, "time": 1000 + i,
                    "id": f"u{i:03}"} for i in range(150)]
        assert c.post("/v1/events", json={"events": events}).status_code == 200
        late = {"type": "consume", "account": "a", "amount": 300, "time": 50, "id": "late"}
        assert c.post("/v1/events", json={"events": [late]}).status_code == 200
        assert len(c.get("/v1/revisions?limit=1000").json()["revisions"]) == 150

        def shown(query: str = "") -> tuple[list[str], list[str], str]:
            r = c.get(f"/accounts/a{query}")
            assert r.status_code == 200, r.text
            grants = [row[0].split()[0] for row in cells(r.text, "grants-table")]
            revised = [row[2].split()[0] for row in cells(r.text, "revisions-table")]
            return grants, revised, r.text

        grants, revised, text = shown()
        assert grants == [f"g{i:03}" for i in range(200, 250)]
        assert revised == [f"u{i:03}" for i in range(100, 150)]
        assert "Grants 201 to 250 of 250" in text and "Revisions 101 to 150 of 150" in text
        assert 'href="/accounts/a?grants_page=2#grants"' in text
        assert 'href="/accounts/a?revisions_page=1#revisions"' in text
        usage = c.get("/accounts/a?kind=consume").text  # one ledger page: 151 lines
        assert usage.count('class="mark" href="#revisions">revised') == 150  # every one
        grants, revised, text = shown("?grants_page=1&revisions_page=1&kind=grant")
        assert grants == [f"g{i:03}" for i in range(100)]
        assert revised == [f"u{i:03}" for i in range(100)]
        assert 'href="/accounts/a?grants_page=2&amp;revisions_page=1&amp;kind=grant#grants"' \
            in text
        r = c.get("/accounts/a?grants_page=4")
        assert r.status_code == 422 and "grants_page" in r.text


def test_the_ledger_shows_each_change_signed_and_figures_with_thousands_separators() -> None:
    from eventstore import MemoryJournal
    from tools.service.app import create_app

    with TestClient(create_app(MemoryJournal(), clock=lambda: 10**6)) as c:
        events = [{"type": "account", "account": "a", "id": "o"},
                  {"type": "grant", "account": "a", "amount": 1234, "time": 100, "id": "g"},
                  {"type": "consume", "account": "a", "amount": 250, "time": 200, "id": "u"}]
        assert c.post("/v1/events", json={"events": events}).status_code == 200
        rows = cells(c.get("/accounts/a").text, "ledger-table")
    # Kind, change, balance of each line.
    assert [(row[2], row[4], row[5]) for row in rows] == [
        ("account", "0", "0"), ("grant", "+1,234", "1,234"), ("consume", "-250", "984")]


@pytest.mark.parametrize(("status", "percent"), [
    (("running",), 0), (("running", 5, 10), 50), (("running", 10, 10), 100),
    (("running", 1, 1), 100), (("ok",), 100), (("never",), 100), (("ok", 7, 7), 100)])
def test_a_verification_s_progress_is_in_whole_percent(status: tuple[Any, ...],
                                                        percent: int) -> None:
    # Before the first progress report a running verification has nothing done; one
    # that ended (or never ran) over an empty journal has nothing left.
    from tools.web.verifying import VerifyStatus

    assert VerifyStatus(*status).percent == percent


def test_a_verification_of_an_empty_journal_passes_at_its_head_0() -> None:
    from eventstore import MemoryJournal
    from projections.verifications import last_verification
    from tools.web.verifying import Verifier

    verifier = Verifier(MemoryJournal())
    started = verifier.start()
    assert (started.state, started.done, started.head) == ("running", 0, 0)
    status = verifier.wait(30)
    assert (status.state, status.head, status.events, status.percent) == ("ok", 0, 0, 100)
    recorded = last_verification(verifier._journal)  # beside the journal, for every reader
    assert recorded is not None and (recorded.ok, recorded.head, recorded.by) == (True, 0,
                                                                                "web")


@contextmanager
def _small_view(events: list[dict[str, Any]]) -> Iterator[TestClient]:
    """The service with its web view over a journal in memory holding `events`."""
    from eventstore import MemoryJournal
    from tools.service.app import create_app

    with TestClient(create_app(MemoryJournal(), clock=lambda: 10**6)) as client:
        assert client.post("/v1/events", json={"events": events}).status_code == 200
        yield client


def test_a_ledger_filter_from_a_time_to_the_same_time_keeps_that_time_s_lines() -> None:
    with _small_view([{"type": "grant", "account": "a", "amount": 5, "time": 100, "id": "g"},
                     {"type": "consume", "account": "a", "amount": 1, "time": 200,
                      "id": "u"}]) as c:
        r = c.get("/accounts/a?from=200&to=200")
        assert r.status_code == 200, r.text
        assert [row[2] for row in cells(r.text, "ledger-table")] == ["consume"]
        assert c.get("/accounts/a?from=201&to=200").status_code == 422


def test_a_grant_s_memo_is_shown_beside_it() -> None:
    with _small_view([{"type": "grant", "account": "a", "amount": 5, "time": 100, "id": "g",
                      "memo": "PO-1234"}]) as c:
        (row,) = cells(c.get("/accounts/a").text, "grants-table")
        assert row[0] == "g PO-1234"
        # On its event's page, among its fields, as kept apart from the record.
        fields = cells(c.get("/events/1").text, "fields-table")
        assert ["memo", "PO-1234 (kept beside the record: erasable)"] in fields, fields


def test_the_summary_counts_the_expiring_credits_it_does_not_list() -> None:
    week = [{"type": "grant", "account": "a", "amount": 1, "time": 100, "id": f"g{i}",
             "expiry": 1000 + i} for i in range(203)]
    with _small_view(week[:3]) as c:
        few = c.get("/").text
    assert len(cells(few, "expiring-table")) == 3 and "more expiring later" not in few
    with _small_view(week) as c:
        many = c.get("/").text
    assert len(cells(many, "expiring-table")) == 200
    assert "And 3 more expiring later in the week" in many


def test_a_pending_job_s_page_counts_the_jobs_of_every_account_ahead_of_it() -> None:
    with _small_view([
        {"type": "grant", "account": "a", "amount": 50, "time": 100, "id": "ga"},
        {"type": "grant", "account": "b", "amount": 50, "time": 100, "id": "gb"},
        {"type": "submit", "account": "a", "job": "first", "cost": 5, "priority": 90,
         "time": 110, "id": "s1"},
        {"type": "submit", "account": "b", "job": "second", "cost": 5, "priority": 10,
         "time": 120, "id": "s2"}]) as c:
        text = c.get("/jobs/second").text
        assert "Waiting: 1 pending job(s) ahead of it" in html_unescape(text), text


def test_an_account_as_known_earlier_counts_its_events_recorded_since() -> None:
    with _small_view([{"type": "grant", "account": "a", "amount": 5, "time": 100, "id": "g"},
                     {"type": "consume", "account": "a", "amount": 1, "time": 200,
                      "id": "u1"},
                     {"type": "consume", "account": "a", "amount": 1, "time": 300,
                      "id": "u2"}]) as c:
        text = re.sub(r"\s+", " ", c.get("/accounts/a?as_known_at=1").text)
        assert "2 later events of this account and" in text, text


def test_the_chart_s_json_refuses_a_bad_position_as_a_json_problem() -> None:
    with _small_view([{"type": "grant", "account": "a", "amount": 5, "time": 100,
                       "id": "g"}]) as c:
        r = c.get("/accounts/a/timeline.json?as_known_at=nonsense")
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert r.json()["status"] == 422 and r.json()["detail"].startswith("as_known_at: ")


def test_a_verification_under_way_is_the_one_the_pages_show() -> None:
    from eventstore import MemoryJournal
    from projections.verifications import Verification, record_verification
    from tools.web.verifying import Verifier, VerifyStatus, last_verify

    journal = MemoryJournal()
    record_verification(journal, Verification(ok=True, head=0, events=0, by="cli",
                                              finished_at=1.0))
    verifier = Verifier(journal)
    assert last_verify(journal, verifier).by == "cli"
    verifier._status = VerifyStatus("running", 3, 10, head=0)
    assert last_verify(journal, verifier) == VerifyStatus("running", 3, 10, head=0)


def test_the_ledger_opens_on_its_latest_page_and_says_which_it_is() -> None:
    uses = [{"type": "consume", "account": "a", "amount": 1, "time": 200 + i, "id": f"u{i}"}
            for i in range(250)]
    with _small_view([{"type": "grant", "account": "a", "amount": 500, "time": 100,
                       "id": "g"}, *uses]) as c:
        latest, first = c.get("/accounts/a").text, c.get("/accounts/a?page=1").text
    assert "<span>page 2 of 2</span>" in latest
    assert "Lines 201 to 251 of 251 matching" in latest
    assert "Lines 1 to 200 of 251 matching" in first
    assert 'href="/accounts/a?page=1#ledger">← Earlier lines</a>' in latest
    assert "Later lines" not in latest
    assert "<span>page 1 of 2</span>" in first
    assert 'href="/accounts/a?page=2#ledger">Later lines →</a>' in first


def test_the_journal_pages_link_to_the_pages_before_and_after() -> None:
    uses = [{"type": "consume", "account": "a", "amount": 1, "time": 200 + i, "id": f"u{i}"}
            for i in range(30)]
    with _small_view(uses) as c:
        middle = c.get("/journal?after=10&limit=7").text
        first = c.get("/journal?after=3&limit=7").text
    assert 'href="/journal?after=3&amp;limit=7">← Earlier</a>' in middle
    assert 'href="/journal?after=17&amp;limit=7">Later →</a>' in middle
    assert 'href="/journal?after=0&amp;limit=7">← Earlier</a>' in first


def test_a_verification_s_progress_counts_against_what_it_has_to_check() -> None:
    from eventstore import MemoryJournal
    from tools.web.verifying import Verifier

    verifier = Verifier(MemoryJournal())
    verifier._progress(5, 10)
    assert verifier.status().percent == 50
    verifier._progress(0, 0)  # nothing to check yet: none done
    assert (verifier.status().total, verifier.status().percent) == (1, 0)


def test_an_event_id_nothing_was_recorded_under_has_no_page(client: TestClient) -> None:
    r = client.get("/event?id=nobody", follow_redirects=False)
    assert r.status_code == 404
    assert "no event is recorded under id 'nobody'" in html_unescape(r.text)



def _links(html: str) -> list[str]:
    """The view's own pages a page links to (href, hx-get, a chart's data-src, a form's
    action), without their fragment."""
    found = re.findall(r'(?:href|hx-get|data-src|action)="([^"]*)"', html)
    return [link for link in (html_unescape(f).partition("#")[0] for f in found)
            if link.startswith("/") and not link.startswith(("/static/", "/v1"))
            and link != "/journal/verify"]


# Names with what a URL reserves, spaces, markup and a spreadsheet's formula starts ("%" is
# left out: FastAPI's TestClient decodes a path's %-escapes twice).
AWKWARD = ["a/b", "a?x", "a#b", "a b", "=1+1", "-x", "<b>", "'s'", "é/ü", "x/ledger.csv",
           "a&b=c", "a/", "/a", "job:x"]


def test_every_link_of_a_journal_with_awkward_names_answers() -> None:
    """Crawled from `/`: every page and file a page links to answers 200, for accounts,
    jobs, pools and ids named with what a URL reserves, and for a job's step filed under
    `job:ID` (no account: its stream is not linked as one)."""
    events: list[dict[str, Any]] = []
    for i, name in enumerate(AWKWARD):
        events += [
            {"type": "grant", "account": name, "amount": 100, "time": 100 + i, "id": f"g{name}",
             "pool": name, "expiry": 10**5, "memo": name},
            {"type": "consume", "account": name, "amount": 150, "time": 200 + i, "pool": name},
            {"type": "submit", "account": name, "job": name, "cost": 1, "priority": 1,
             "time": 300 + i, "pool": name, "id": f"s{name}"}]
    events += [{"type": "start", "job": "orphan/1", "time": 500, "id": "o/1"},
               {"type": "grant", "account": "a/b", "amount": 50, "time": 150, "id": "late?#"}]
    with _small_view(events) as c:
        seen, queue, bad = set(), ["/"], []
        while queue:
            url = queue.pop()
            if url in seen:
                continue
            seen.add(url)
            r = c.get(url, headers={"accept": "text/html"})
            if r.status_code != 200:
                bad.append((url, r.status_code))
            elif r.headers["content-type"].startswith("text/html"):
                queue += [link for link in _links(r.text) if link not in seen]
    assert not bad, bad
    assert "/jobs/orphan%2F1" in seen and len(seen) > 200


def test_an_event_page_links_to_its_account_before_it_only_where_that_answers() -> None:
    """An account named only by rejected submits is unknown before its first one (as to
    `statement --as-known-at`): that submit's page offers the account right after it,
    not a "right before" that answers 404; a later submit offers both."""
    with _small_view([{"type": "grant", "account": "acme", "amount": 100, "time": 0},
                      {"type": "submit", "account": "ghost", "job": "j1", "cost": 5,
                       "priority": 1, "time": 1},
                      {"type": "submit", "account": "ghost", "job": "j2", "cost": 5,
                       "priority": 1, "time": 2}]) as web:
        first, second = web.get("/events/2").text, web.get("/events/3").text
        assert web.get("/accounts/ghost?as_known_at=1").status_code == 404
        assert web.get("/accounts/ghost?as_known_at=2").status_code == 200
    assert 'href="/accounts/ghost?as_known_at=2"' in first
    assert 'href="/accounts/ghost?as_known_at=1"' not in first
    assert 'href="/accounts/ghost?as_known_at=2">and right before' in second


def test_a_position_out_of_range_says_what_would_be_valid(client: TestClient) -> None:
    r = client.get("/events/0")
    assert r.status_code == 422
    assert "position: 0 is out of range; expected 1 or more" in html_unescape(r.text)
