"""The report commands: accounts, expiring, jobs, statement subtotals, reconcile, whatif,
and --as-known-at on every query."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Run, as_json, cli, error_lines, imported
from typer.main import get_command

from eventstore import Journal
from projections.queries import parse_duration
from tools.cli import app

# Two accounts with explicit ids, so a charges file can name them.
MONTH = """\
{"type": "account", "account": "a", "max_running": 1, "id": "open-a"}
{"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 100, "id": "g1"}
{"type": "grant", "account": "a", "amount": 40, "time": 0, "expiry": 20, "pool": "h100", "id": "g2"}
{"type": "grant", "account": "b", "amount": 30, "time": 1, "id": "g3"}
{"type": "consume", "account": "a", "amount": 10, "time": 2, "id": "u1"}
{"type": "submit", "account": "a", "job": "j1", "cost": 20, "priority": 1, "time": 3, "id": "s1"}
{"type": "start", "job": "j1", "time": 4, "id": "st1"}
{"type": "complete", "job": "j1", "success": false, "refund_fraction": 0.5, "time": 5, "id": "c1"}
{"type": "submit", "account": "a", "job": "j2", "cost": 5, "priority": 1, "time": 6, "id": "s2"}
{"type": "consume", "account": "b", "amount": 50, "time": 7, "id": "u2"}
{"type": "submit", "account": "b", "job": "j3", "cost": 500, "priority": 1, "time": 8, "id": "s3"}
"""


def _obj(value: object) -> dict[str, Any]:
    assert isinstance(value, dict)
    return value


@pytest.fixture
def month(run: Run, tmp_path: Path) -> Path:
    return imported(run, tmp_path / "month.jsonl", MONTH)


# -- accounts --------------------------------------------------------------------------------


def test_accounts_lists_every_account_with_its_figures(run: Run, month: Path) -> None:
    report = _obj(as_json(run("accounts", "--json")))
    rows = {r["account"]: r for r in report["accounts"]}
    assert set(rows) == {"a", "b"}
    a, b = rows["a"], rows["b"]
    # a: 140 granted, 10 used, job j1 charged 10 of 20, j2 pending holds 5.
    assert (a["balance"], a["reserved"], a["available"], a["debt"]) == (120, 5, 115, 0)
    assert a["pools"] == {"general": 80, "h100": 40}
    assert (b["balance"], b["debt"], b["pools"]) == (-20, 20, {"general": -20})
    # The totals add every figure and every pool up over the accounts.
    assert report["totals"] == {"balance": 100, "reserved": 5, "available": 95, "debt": 20,
                                "pools": {"general": 60, "h100": 40}}
    # The same figures as balance --json, key for key.
    bal = _obj(as_json(run("balance", "a", "--json")))
    for key in ("balance", "reserved", "available", "debt", "pools"):
        assert bal[key] == a[key]
    text = run("accounts")
    assert text.exit_code == 0 and "h100" in text.stdout and "120" in text.stdout


def test_accounts_on_an_empty_journal(run: Run) -> None:
    assert run("accounts").exit_code == 2  # no database file: a read never creates one
    assert run("db", "upgrade").exit_code == 0
    result = run("accounts")
    assert result.exit_code == 0
    assert "no accounts yet" in result.stdout
    assert _obj(as_json(run("accounts", "--json")))["accounts"] == []


def test_accounts_before_any_opens_is_not_an_empty_journal(run: Run, tmp_path: Path) -> None:
    assert run("grant", "a", "5", "--at", "10").exit_code == 0
    result = run("accounts", "--at", "3")
    assert result.exit_code == 0
    assert "no accounts at 3, as known at position 1" in result.stdout
    assert "empty" not in result.stdout


def test_accounts_as_known_at(run: Run, month: Path) -> None:
    early = _obj(as_json(run("accounts", "--as-known-at", "2", "--json")))
    assert [r["account"] for r in early["accounts"]] == ["a"]
    assert early["accounts"][0]["balance"] == 100
    assert early["as_known_at"] == 2


# -- expiring --------------------------------------------------------------------------------


@pytest.mark.parametrize(("within", "grants"), [
    ("7d", ["g2", "g1"]), ("15", ["g2"]), ("15s", ["g2"]), ("1m", ["g2"]), ("2h", ["g2", "g1"]),
    ("93", ["g2", "g1"]),
])
def test_expiring_within_a_duration(run: Run, month: Path, within: str,
                                    grants: list[str]) -> None:
    report = _obj(as_json(run("expiring", "--within", within, "--json")))
    assert report["at"] == 8  # the latest event time
    assert [c["grant"] for c in report["credits"]] == grants


def test_expiring_counts_unused_and_held_credits(run: Run, month: Path) -> None:
    report = _obj(as_json(run("expiring", "--json")))
    g1 = next(c for c in report["credits"] if c["grant"] == "g1")
    # g1 gave 10 to u1, 10 to j1's charge, and holds 5 for j2: 75 unused.
    assert (g1["account"], g1["pool"], g1["expiry"], g1["amount"], g1["held"]) == (
        "a", "general", 100, 75, 5)
    assert {(t["account"], t["pool"]) for t in report["totals"]} == {
        ("a", "general"), ("a", "h100")}
    # Per account and pool, unused and held credits are summed apart.
    general = next(t for t in report["totals"] if t["pool"] == "general")
    assert (general["amount"], general["held"]) == (75, 5)
    text = run("expiring", "--within", "3600")
    assert text.exit_code == 0 and "g2" in text.stdout
    nothing = run("expiring", "--within", "5s")
    assert "nothing expires" in nothing.stdout


def test_expiring_help_names_each_kind_of_duration_it_takes() -> None:
    # Every example in the help is one --within takes, and each kind is there: plain
    # seconds, a unit letter (weeks too), a spelled-out unit and ISO 8601.
    command = get_command(app).commands["expiring"]  # type: ignore[attr-defined]
    option, = (p for p in command.params if p.name == "within")
    examples = re.findall(r"(?<!ISO )\b\d+(?: [a-z]+\b|[a-z]*)|\bPT?\d+[A-Z]", option.help)
    assert {"3600", "2w", "12 hours", "P7D", "PT12H"} <= set(examples)
    assert all(parse_duration(example) > 0 for example in examples)


def test_the_command_list_gives_each_command_one_summary_line() -> None:
    # The top-level help shows each command's first paragraph: a line break in it would
    # break the summary mid-sentence.
    def leaves(group: Any) -> list[Any]:
        return [c for cmd in group.commands.values()
                for c in (leaves(cmd) if hasattr(cmd, "commands") else [cmd])]

    for command in leaves(get_command(app)):
        summary = (command.help or "").strip().split("\n\n")[0]
        assert "\n" not in summary, command.name


@pytest.mark.parametrize(("text", "seconds"), [
    ("3600", 3600), ("90m", 5400), ("24h", 86_400), ("2w", 1_209_600), ("7 days", 604_800),
    ("12 hours", 43_200), ("P7D", 604_800), ("PT12H", 43_200), ("P1W", 604_800),
    ("P1DT6H", 108_000), ("PT1M30S", 90),
])
def test_a_duration_is_read_in_seconds(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["soon", "0", "-5", "7x", "1.5h", "", "\u0663d", "\uff13\uff16",
                                 "\u00b9h", "P\u0663D", "P1DT", "PT"])
def test_expiring_rejects_a_bad_duration(run: Run, month: Path, bad: str) -> None:
    result = run("expiring", "--within", bad)
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    assert "7d" in result.stderr and "--within" in result.stderr


@pytest.mark.parametrize("calendar", ["P1M", "P1Y", "P1Y2M", "p2mt3h", "1mo", "3 months",
                                      "1y", "2 years", "1yr"])
def test_a_duration_in_months_or_years_is_refused_saying_why(calendar: str) -> None:
    # A month or a year has no one length in seconds: the refusal says so and what to
    # give instead, where a generic "not a duration" left the user guessing.
    with pytest.raises(ValueError, match="months and years vary in length") as caught:
        parse_duration(calendar)
    assert repr(calendar) in str(caught.value) and "30d" in str(caught.value)
    # Minutes stay minutes: the ISO M after T, and the unit letter m.
    assert parse_duration("PT1M") == parse_duration("1m") == 60


def test_expiring_before_any_timed_event_has_no_window_to_show(run: Run,
                                                               tmp_path: Path) -> None:
    opened = tmp_path / "opened.jsonl"
    opened.write_text('{"type": "account", "account": "a"}\n')
    assert run("import", str(opened)).exit_code == 0
    report = json.loads(run("expiring", "--json").stdout)
    assert (report["at"], report["until"], report["credits"]) == (None, None, [])
    text = run("expiring", "--within", "1d")
    assert text.exit_code == 0
    assert text.stdout.strip() == "nothing expires: no event with a time is recorded yet"


def test_expiring_at_another_time(run: Run, month: Path) -> None:
    report = _obj(as_json(run("expiring", "--at", "25", "--json")))
    assert [c["grant"] for c in report["credits"]] == ["g1"]


@pytest.mark.parametrize("checkpointed", [False, True])
@pytest.mark.parametrize(("at", "within", "grants"), [
    ("20", "7d", ["g1"]),  # g2 expires at 20: from 20 on it no longer counts
    ("19", "1s", ["g2"]),  # ... so it stops counting within (19, 20]
    ("8", "12s", ["g2"]), ("8", "11s", []),
    ("20", "80s", ["g1"]), ("20", "79s", []), ("100", "7d", []),
])
def test_expiring_lists_credits_ending_after_at_and_up_to_the_window_end(
        run: Run, month: Path, at: str, within: str, grants: list[str],
        checkpointed: bool) -> None:
    """Credits count for `time <= t < expiry`: the window is `(at, at + within]`, whether
    the report folds the journal or reads a checkpoint's summary."""
    if checkpointed:
        assert run("replay").exit_code == 0
    report = _obj(as_json(run("expiring", "--at", at, "--within", within, "--json")))
    assert [c["grant"] for c in report["credits"]] == grants


@pytest.mark.parametrize("checkpointed", [False, True])
def test_expiring_lists_credits_a_void_ahead_stops_within_the_window(
        run: Run, checkpointed: bool) -> None:
    """A void timed after T takes the grant's unused credits at its time, expiry or not;
    a reversed void, or one after the window, does not."""
    for args in (("grant", "a", "100", "--at", "0", "--id", "g1"),
                 ("grant", "a", "50", "--at", "0", "--expiry", "100000", "--id", "g2"),
                 ("grant", "a", "30", "--at", "0", "--id", "g3"),
                 ("consume", "a", "10", "--at", "5"),
                 ("void", "g1", "--at", "1000", "--id", "v1"),
                 ("void", "g2", "--at", "2000", "--id", "v2"),
                 ("void", "g3", "--at", "1500", "--id", "v3"),
                 ("reverse", "v3", "--reason", "kept after all")):
        assert run(*args).exit_code == 0, args
    if checkpointed:
        assert run("replay").exit_code == 0
    report = _obj(as_json(run("expiring", "--at", "5", "--within", "1995s", "--json")))
    assert [(c["grant"], c["expiry"], c["amount"], c["voided"]) for c in report["credits"]] \
        == [("g1", 1000, 100, True), ("g2", 2000, 40, True)]
    short = _obj(as_json(run("expiring", "--at", "5", "--within", "1994s", "--json")))
    assert [c["grant"] for c in short["credits"]] == ["g1"]


@pytest.mark.parametrize("checkpointed", [False, True])
def test_expiring_near_the_end_of_time_ends_its_window_at_the_last_valid_time(
        run: Run, checkpointed: bool) -> None:
    """No time lies after 2**53 - 1 (nothing can expire there): a window reaching past it
    ends there instead of naming an `until` no event time could hold."""
    last = 2**53 - 1
    for args in (("grant", "a", "5", "--at", str(last - 10), "--expiry", str(last),
                  "--id", "g1", "--allow-far-times"),):
        assert run(*args).exit_code == 0, args
    if checkpointed:
        assert run("replay").exit_code == 0
    report = _obj(as_json(run("expiring", "--at", str(last - 5), "--within", "2w",
                              "--json")))
    assert (report["until"], report["within"]) == (last, 14 * 86400)
    assert [(c["grant"], c["expiry"]) for c in report["credits"]] == [("g1", last)]


# -- jobs ------------------------------------------------------------------------------------


def test_jobs_with_state_cost_charge_and_account(run: Run, month: Path) -> None:
    report = _obj(as_json(run("jobs", "--json")))
    got = [(j["job"], j["account"], j["state"], j["cost"], j["charged"]) for j in report["jobs"]]
    assert got == [("j1", "a", "failed", 20, 10), ("j2", "a", "pending", 5, None),
                   ("j3", "b", "rejected", 500, None)]
    only_a = _obj(as_json(run("jobs", "--account", "a", "--json")))
    assert [j["job"] for j in only_a["jobs"]] == ["j1", "j2"]
    rejected = _obj(as_json(run("jobs", "--state", "rejected", "--json")))
    assert [j["job"] for j in rejected["jobs"]] == ["j3"]
    text = run("jobs")
    assert text.exit_code == 0 and "failed" in text.stdout and "j3" in text.stdout
    assert "no jobs match" in run("jobs", "--state", "running").stdout


def test_jobs_as_known_at(run: Run, month: Path) -> None:
    early = _obj(as_json(run("jobs", "--as-known-at", "7", "--json")))
    assert [(j["job"], j["state"]) for j in early["jobs"]] == [("j1", "running")]


@pytest.mark.parametrize("checkpointed", [False, True])
def test_jobs_as_known_before_an_account_was_recorded_has_none_yet(run: Run,
                                                                   checkpointed: bool) -> None:
    # As `balance` and `explain` answer it then: the account is in the journal, only later.
    assert run("grant", "a", "10", "--at", "5").exit_code == 0
    if checkpointed:  # the answer then comes from the checkpoint at position 1
        assert run("replay").exit_code == 0
    assert run("grant", "b", "10", "--at", "6").exit_code == 0
    early = _obj(as_json(run("jobs", "--account", "b", "--as-known-at", "1", "--json")))
    assert (early["account"], early["jobs"]) == ("b", [])
    unknown = run("jobs", "--account", "nobody", "--as-known-at", "1")
    assert unknown.exit_code == 2 and "unknown account 'nobody'" in unknown.stderr


def test_jobs_errors(run: Run, month: Path) -> None:
    bad = run("jobs", "--state", "done")
    assert bad.exit_code == 2 and len(error_lines(bad)) == 1
    assert "pending, running, succeeded, failed, cancelled, rejected" in bad.stderr
    unknown = run("jobs", "--account", "zz")
    assert unknown.exit_code == 2 and "unknown account 'zz'" in unknown.stderr


# -- statement: subtotals, as known at, recorded times, no internal times ----------------------


def test_statement_subtotals_add_up(run: Run, month: Path) -> None:
    st = _obj(as_json(run("statement", "a", "--json")))
    sub = st["subtotals"]
    assert sub == {"opening": 0, "granted": 140, "used": 30, "refunded": 10, "expired": 0,
                   "adjusted": 0, "voided": 0, "closing": 120, "consistent": True,
                   "problems": []}
    later = _obj(as_json(run("statement", "a", "--from", "3", "--to", "30", "--json")))
    sub = later["subtotals"]
    assert (sub["opening"], sub["used"], sub["refunded"], sub["expired"], sub["closing"]) == (
        130, 20, 10, 40, 80)
    text = run("statement", "a")
    assert "Subtotals" in text.stdout and "closing balance" in text.stdout


def test_statement_and_explain_as_known_at(run: Run, month: Path) -> None:
    st = _obj(as_json(run("statement", "a", "--as-known-at", "5", "--json")))
    assert st["as_known_at"] == 5
    assert [line["event_id"] for line in st["lines"]] == ["open-a", "g1", "g2", "u1"]
    ex = _obj(as_json(run("explain", "a", "--as-known-at", "5", "--json")))
    assert ex["balance"] == 130
    job = _obj(as_json(run("explain", "--job", "j1", "--as-known-at", "7", "--json")))
    assert job["state"] == "running"
    past = run("statement", "a", "--as-known-at", "99")
    assert past.exit_code == 2 and "past the journal's head 11" in past.stderr
    never = run("explain", "a", "--as-known-at", "0")
    assert never.exit_code == 2 and "nothing was recorded yet" in never.stderr


def test_explain_as_known_before_an_account_was_recorded_has_nothing_yet(run: Run) -> None:
    # As `balance` answers zeros for it then: the account is in the journal, only later.
    assert run("grant", "a", "10", "--at", "5").exit_code == 0
    assert run("grant", "b", "10", "--at", "6").exit_code == 0
    ex = _obj(as_json(run("explain", "b", "--as-known-at", "1", "--json")))
    bal = _obj(as_json(run("balance", "b", "--as-known-at", "1", "--json")))
    assert (ex["balance"], ex["grants"], ex["spends"]) == (0, [], [])
    assert bal["balance"] == ex["balance"] and bal["pools"] == ex["pools"]
    assert _obj(as_json(run("explain", "b", "--json")))["balance"] == 10
    unknown = run("explain", "nobody", "--as-known-at", "1")
    assert unknown.exit_code == 2 and "unknown account 'nobody'" in unknown.stderr


def test_statement_shows_recorded_times_and_no_internal_time(run: Run, month: Path) -> None:
    st = _obj(as_json(run("statement", "a", "--json")))
    opened = st["lines"][0]
    assert opened["type"] == "account" and opened["time"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", opened["recorded_at"])
    csv_text = run("statement", "a", "--csv").stdout
    assert "4611686018427387904" not in csv_text
    first = next(csv.DictReader(io.StringIO(csv_text)))
    assert (first["type"], first["time"]) == ("account", "")
    for args in (("explain", "a", "--json"), ("export",), ("export", "--format", "csv")):
        assert "4611686018427387904" not in run(*args).stdout


# -- reconcile -------------------------------------------------------------------------------


def _charges(tmp_path: Path, text: str, name: str = "charges.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_reconcile_every_row_matched(run: Run, month: Path, tmp_path: Path) -> None:
    path = _charges(tmp_path, "account,job,id,amount\na,j1,,10\na,,u1,10\nb,,u2,50\n")
    result = run("reconcile", path)
    assert result.exit_code == 0, result.stderr
    assert "3 matched" in result.stdout
    report = _obj(as_json(run("reconcile", path, "--json")))
    assert report["ok"] is True and report["counts"]["matched"] == 3


def test_reconcile_lists_every_difference(run: Run, month: Path, tmp_path: Path) -> None:
    path = _charges(tmp_path, "account,job,id,amount,time\n"
                              "a,j1,,12,5\n"      # charged 10
                              "a,j9,,5,5\n"       # no such job
                              "a,j2,,5,6\n"       # pending: not charged
                              "a,j1,,10,5\n")     # the same job again
    result = run("reconcile", path, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    statuses = [(f["status"], f["job"] or f["id"]) for f in report["findings"]]
    # u1 (time 2) is outside the file's time range 5..6; nothing else of a's is charged.
    assert statuses == [("amount_differs", "j1"), ("missing_from_ledger", "j9"),
                        ("missing_from_ledger", "j2"), ("duplicate", "j1")]
    assert report["findings"][0]["difference"] == 2
    # A duplicate is one under the same account: its note says which.
    assert report["findings"][3]["note"] == (
        "job j1 appears earlier in the file under account 'a'")
    wide = _charges(tmp_path, "account,job,amount,time\na,j1,10,0\nb,j3,0,9\n", "wide.csv")
    extra = json.loads(run("reconcile", wide, "--json").stdout)
    assert [(f["status"], f["job"] or f["id"], f["ledger_amount"])
            for f in extra["findings"]] == [
        ("matched", "j1", 10), ("missing_from_ledger", "j3", None),
        ("missing_from_file", "u1", 10), ("missing_from_file", "u2", 50)]
    assert extra["findings"][1]["note"] == "job 'j3' is rejected: not charged"
    text = run("reconcile", path)
    assert text.exit_code == 1
    assert "amount differs" in text.stdout and "missing from the ledger" in text.stdout
    rows = list(csv.DictReader(io.StringIO(run("reconcile", path, "--csv").stdout)))
    assert [r["status"] for r in rows][:2] == ["amount_differs", "missing_from_ledger"]


def test_reconcile_without_times_covers_the_whole_ledger(run: Run, month: Path,
                                                         tmp_path: Path) -> None:
    path = _charges(tmp_path, "account,job,amount\na,j1,10\n")
    report = json.loads(run("reconcile", path, "--json").stdout)
    missing = [f["id"] for f in report["findings"] if f["status"] == "missing_from_file"]
    assert missing == ["u1"]  # b is not in the file: its charges are not asked about


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty"),
    ("account,amount\na,5\n", "job or id"),
    ("account,job,amount,colour\na,j1,5,red\n", "unknown column"),
    ("account,job,amount\na,j1,ten\n", "line 2: amount 'ten'"),
    ("account,job,id,amount\na,j1,u1,10\n", "exactly one"),
    ("account,job,amount,time\na,j1,10,yesterday\n", "line 2"),
    # Two columns of one name: which one holds the amount? Neither is guessed.
    ("account,job,amount,amount\na,j1,10,999\n", "column(s) 'amount' appear more than once"),
    ("account,job,id,job,amount\na,j1,,j9,10\n", "column(s) 'job' appear more than once"),
    # A spreadsheet's trailing comma: an unnamed column, named so that it shows.
    ("account,job,amount,\na,j1,10,\n", "unknown column(s) ''"),
])
def test_reconcile_rejects_a_bad_file(run: Run, month: Path, tmp_path: Path, text: str,
                                      message: str) -> None:
    result = run("reconcile", _charges(tmp_path, text))
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    assert message in result.stderr


@pytest.mark.parametrize(("text", "message"), [
    # An oversized cell: the csv module's own limit, an error to report, not a crash
    # (exit 1 would read as "the file differs from the ledger").
    ("account,job,amount\na," + "j" * 200_000 + ",10\n", "line 2: not valid CSV: field larger"),
])
def test_reconcile_names_a_row_the_csv_reader_cannot_read(run: Run, month: Path,
                                                           tmp_path: Path, text: str,
                                                           message: str) -> None:
    result = run("reconcile", _charges(tmp_path, text))
    assert result.exit_code == 2 and result.stdout == ""
    assert len(error_lines(result)) == 1
    assert message in result.stderr


def test_reconcile_counts_lines_of_the_file_not_rows(run: Run, month: Path,
                                                     tmp_path: Path) -> None:
    # A quoted cell with a line break spans two lines: the rows after it are named by
    # the line they are on in the file, as `import` names a CSV's lines.
    path = _charges(tmp_path, 'account,job,amount\n"a\nb",j1,10\na,j1,ten\n')
    result = run("reconcile", path)
    assert result.exit_code == 2
    assert "line 4: amount 'ten'" in result.stderr
    listed = _charges(tmp_path, 'account,job,amount\n"a\nb",j9,10\na,j1,12\n', "ok.csv")
    report = json.loads(run("reconcile", listed, "--json").stdout)
    assert [(f["line"], f["job"]) for f in report["findings"]
            if f["line"] is not None] == [(3, "j9"), (4, "j1")]


def test_reconcile_reads_a_file_with_old_mac_line_endings(run: Run, month: Path,
                                                          tmp_path: Path) -> None:
    # CR alone ends a line, as Excel's "CSV (Macintosh)" writes and `import` reads.
    path = tmp_path / "mac.csv"
    path.write_bytes(b"account,job,id,amount\ra,j1,,10\ra,,u1,10\rb,,u2,50\r")
    result = run("reconcile", str(path))
    assert result.exit_code == 0, result.stderr
    assert "3 matched" in result.stdout


def test_reconcile_names_the_line_and_column_of_a_byte_that_is_not_utf8(
        run: Run, month: Path, tmp_path: Path) -> None:
    path = tmp_path / "latin.csv"
    path.write_bytes(b"\xef\xbb\xbfaccount,job,amount\nb\xc3\xa9,j\xe91,10\n")
    result = run("reconcile", str(path))
    assert result.exit_code == 2 and result.stdout == ""
    assert error_lines(result) == [
        f"gpu-credits: error: {path} is not UTF-8 text: byte 0xe9 (invalid continuation "
        "byte) at line 2, column 5; expected CSV"]


def test_reconcile_missing_file(run: Run, month: Path, tmp_path: Path) -> None:
    result = run("reconcile", str(tmp_path / "nope.csv"))
    assert result.exit_code == 2 and "cannot read" in result.stderr


def test_reconcile_skips_reversed_events(run: Run, month: Path, tmp_path: Path) -> None:
    path = _charges(tmp_path, "account,job,id,amount\na,j1,,10\na,,u1,10\nb,,u2,50\n")
    assert run("reconcile", path).exit_code == 0
    assert run("reverse", "u1", "--reason", "billed twice").exit_code == 0
    assert run("reverse", "c1", "--reason", "the run never finished").exit_code == 0
    report = json.loads(run("reconcile", path, "--json").stdout)
    assert report["ok"] is False
    assert [(f["status"], f["job"] or f["id"], f["ledger_amount"], f["note"])
            for f in report["findings"]] == [
        ("missing_from_ledger", "j1", None, "job 'j1' is running: not charged"),
        ("missing_from_ledger", "u1", None, "event 'u1' was reversed: not a charge"),
        ("matched", "u2", 50, "")]
    # The ledger without the reversed charges is what a file without them matches.
    fixed = _charges(tmp_path, "account,id,amount\nb,u2,50\n", "fixed.csv")
    assert run("reconcile", fixed).exit_code == 0
    # As known before the reversals, the first file still matches.
    assert run("reconcile", path, "--as-known-at", "11").exit_code == 0


def test_reconcile_refuses_times_in_milliseconds(run: Run, month: Path,
                                                 tmp_path: Path) -> None:
    # Read as seconds, a billing export's milliseconds put the file's range past every
    # charge: each row matched by its job or id, and a's usage report u1, which the file
    # lacks, not asked about: exit 0, all clear.
    millis = "account,job,id,amount,time\na,j1,,10,5000000\nb,,u2,50,7258118400001\n"
    result = run("reconcile", _charges(tmp_path, millis))
    assert result.exit_code == 2 and result.stdout == ""
    assert error_lines(result) == [
        f"gpu-credits: error: {tmp_path / 'charges.csv'}: 1 problem(s): line 3: time "
        "7258118400001 is after 2200-01-01 (7258118400 in epoch seconds): probably "
        "milliseconds; give seconds, or allow far times (--allow-far-times) if meant"]
    # Meant: the range is the file's, and the charges before it are not asked about.
    allowed = run("reconcile", _charges(tmp_path, millis), "--allow-far-times", "--json")
    assert allowed.exit_code == 0, allowed.stderr
    assert json.loads(allowed.stdout)["time_range"] == {"from": 5000000, "to": 7258118400001}


# -- whatif ----------------------------------------------------------------------------------


def _policy(tmp_path: Path, policy: object) -> str:
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(policy))
    return str(path)


def test_whatif_refund_fraction(run: Run, month: Path, tmp_path: Path, db: str) -> None:
    journal = Journal(db)
    head = journal.head()
    journal.close()
    result = _obj(as_json(run("whatif", "--policy", _policy(tmp_path, {"refund_fraction": 0}),
                              "--json")))
    assert result["changed"] is True
    assert result["jobs"] == [{"job": "j1", "account": "a",
                               "actual": {"state": "failed", "charged": 10},
                               "whatif": {"state": "failed", "charged": 20}}]
    (a,) = result["accounts"]
    assert (a["account"], a["difference"]["balance"]) == ("a", -10)
    assert a["pools"] == [{"pool": "general", "actual": 80, "whatif": 70, "difference": -10}]
    journal = Journal(db)
    assert journal.head() == head  # appends nothing
    journal.close()
    text = run("whatif", "--policy", _policy(tmp_path, {"refund_fraction": 0}))
    assert text.exit_code == 0 and "j1" in text.stdout


def test_whatif_without_changes(run: Run, month: Path, tmp_path: Path) -> None:
    result = _obj(as_json(run("whatif", "--policy", _policy(tmp_path, {}), "--json")))
    assert result["changed"] is False and result["accounts"] == [] and result["jobs"] == []
    assert "nothing differs" in run("whatif", "--policy", _policy(tmp_path, {})).stdout


@pytest.mark.parametrize(("text", "named"), [
    ('{"refund_fraction": 0, "refund_fraction": 1}', "'refund_fraction' appears more than once"),
    ('{"max_running": {"b": 1, "b": 5}}', "'b' appears more than once"),
    ('{"refund_fraction": NaN}', "NaN"),
    ('{"refund_fraction": 1e400}', "refund_fraction must be in [0, 1], got 1e400"),
    ('{\n  "refund_fraction": 0,\n  oops\n}', "line 3"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
])
def test_whatif_reads_its_policy_file_strictly(run: Run, month: Path, tmp_path: Path,
                                               text: str, named: str) -> None:
    # As every input file is read: a repeated key is refused, never the last one winning.
    path = tmp_path / "policy.json"
    path.write_text(text)
    result = run("whatif", "--policy", str(path))
    assert result.exit_code == 2 and result.stdout == ""
    assert len(error_lines(result)) == 1 and named in result.stderr, result.stderr


def test_whatif_reads_its_policy_from_stdin(run: Run, month: Path) -> None:
    # `-` is stdin, as for `import` and `reconcile`; it was read as a file named "-".
    result = run("whatif", "--policy", "-", "--json", input='{"refund_fraction": 0}')
    assert result.exit_code == 0, result.stderr
    assert [j["job"] for j in json.loads(result.stdout)["jobs"]] == ["j1"]
    bad = run("whatif", "--policy", "-", input='{"refund_fraction": 2}')
    assert bad.exit_code == 2 and error_lines(bad) == [
        "gpu-credits: error: <stdin>: refund_fraction must be in [0, 1], got 2"]


def test_whatif_names_a_policy_file_it_cannot_read(run: Run, month: Path,
                                                   tmp_path: Path) -> None:
    missing = run("whatif", "--policy", str(tmp_path / "nope.json"))
    assert missing.exit_code == 2 and missing.stdout == ""
    assert error_lines(missing) == [
        f"gpu-credits: error: cannot read {tmp_path / 'nope.json'}: No such file or directory"]
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"grant_order": "pri\xf6rity"}')
    result = run("whatif", "--policy", str(latin))
    assert result.exit_code == 2 and len(error_lines(result)) == 1
    assert (f"{latin}: not UTF-8: byte 0xf6 (invalid start byte) at line 1, column 21"
            in result.stderr)


def test_whatif_max_running_and_grant_order(run: Run, month: Path, tmp_path: Path) -> None:
    # One more job on b would start; a cap of 1 on b changes nothing here, and ignoring
    # priorities changes nothing when every grant has the default priority.
    same = _obj(as_json(run("whatif", "--policy", _policy(
        tmp_path, {"grant_order": "expiry", "max_running": {"b": 1}}), "--json")))
    assert same["changed"] is False
    # A cap on an account the journal does not hold is likely a typo: said, not refused.
    typo = run("whatif", "--policy", _policy(tmp_path, {"max_running": {"bb": 1}}))
    assert typo.exit_code == 0, typo.stderr
    assert "caps account 'bb', which the journal does not hold: is it a typo?" in " ".join(
        typo.stderr.split())


@pytest.mark.parametrize(("policy", "message"), [
    ({"refund_fraction": 2}, "refund_fraction"),
    ({"grant_order": "random"}, "grant_order must be one of priority, expiry"),
    ({"max_running": {"a": 0}}, "max_running"),
    ({"colour": 1}, "unknown policy key"),
    ([1], "JSON object"),
])
def test_whatif_rejects_a_bad_policy(run: Run, month: Path, tmp_path: Path, policy: object,
                                     message: str) -> None:
    path = _policy(tmp_path, policy)
    result = run("whatif", "--policy", path)
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    assert result.stderr.startswith(f"gpu-credits: error: {path}: ")  # the file named
    assert message in result.stderr


@pytest.mark.parametrize(("data", "named"), [
    (b"\xef\xbb\xbf" + b'{"refund_fraction": 0}', None),  # a byte-order mark is taken
    (b'{"refund_fraction": 0, "x": "\xff"}', "not UTF-8"),
])
def test_whatif_policy_file_encoding(run: Run, month: Path, tmp_path: Path, data: bytes,
                                     named: str | None) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(data)
    result = run("whatif", "--policy", str(path))
    if named is None:
        assert result.exit_code == 0, result.stderr
    else:
        assert result.exit_code == 2 and len(error_lines(result)) == 1
        assert named in result.stderr and str(path) in result.stderr


def test_whatif_policy_file_not_json(run: Run, month: Path, tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("{grant_order: expiry}")
    result = run("whatif", "--policy", str(path))
    assert result.exit_code == 2 and "not JSON" in result.stderr


# -- rendering -------------------------------------------------------------------------------


def test_no_number_is_cropped_at_80_columns(run: Run, month: Path) -> None:
    env = {"COLUMNS": "80"}
    for args in (("statement", "a"), ("explain", "a"), ("accounts",), ("jobs",),
                 ("expiring",)):
        out = run(*args, env=env).stdout
        assert "…" not in out, args
    statement = run("statement", "a", env=env).stdout
    assert "120" in statement  # the closing balance, whole


def test_a_typo_in_a_pool_is_pointed_out(run: Run, month: Path) -> None:
    result = run("balance", "a", "--pool", "h200")
    assert result.exit_code == 0
    assert "warning" in result.stderr and "h200" in result.stderr and "h100" in result.stderr
    assert run("balance", "a", "--pool", "h100").stderr == ""


def test_a_closed_pipe_is_success(tmp_path: Path, month: Path, db: str) -> None:
    import subprocess
    import sys

    command = [sys.executable, "-m", "tools.cli", "export", "--db", db]
    script = (f"import subprocess, sys; p = subprocess.Popen({command!r}, "
              "stdout=subprocess.PIPE, stderr=subprocess.PIPE); p.stdout.readline(); "
              "p.stdout.close(); err = p.stderr.read(); sys.exit(p.wait() or len(err))")
    # Many lines, so the writer meets the closed pipe while writing.
    big = tmp_path / "big.jsonl"
    big.write_text("".join(
        json.dumps({"type": "consume", "account": "a", "amount": 1, "time": 10 + i}) + "\n"
        for i in range(20_000)))
    assert cli("import", str(big), "--db", db, cwd=tmp_path).returncode == 0
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2],
                          check=False)
    assert done.returncode == 0


# -- import ----------------------------------------------------------------------------------


def test_import_says_what_it_did(run: Run, month: Path, tmp_path: Path) -> None:
    late = tmp_path / "late.jsonl"
    late.write_text(
        '{"type": "consume", "account": "a", "amount": 5, "time": 1, "id": "late-u"}\n'
        '{"type": "start", "job": "nope", "time": 9, "id": "bad-start"}\n')
    result = run("import", str(late))
    assert result.exit_code == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert "appended 2 events, 0 already present; 1 late" in first
    assert "1 anomaly(ies)" in first
    assert "bad-start: start of unknown job 'nope'" in result.stdout
    assert "gpu-credits statement ACCOUNT" in result.stdout


def test_import_hints_at_csv_with_another_extension(run: Run, month: Path,
                                                    tmp_path: Path) -> None:
    exported = run("export", "--format", "csv").stdout
    path = tmp_path / "events.txt"
    path.write_text(exported)
    result = run("import", str(path))
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    assert "looks like CSV" in result.stderr and "--format csv" in result.stderr
    again = run("import", str(path), "--format", "csv")
    assert again.exit_code == 0 and "0 events" in again.stdout
