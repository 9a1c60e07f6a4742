"""The `gpu-credits` command line as the public contract states it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from contract.kit import Run, balance_json, last_number, needs

EVENTS = [
    {"type": "account", "account": "a", "max_running": 2},
    {"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 10, "pool": "h100"},
    {"type": "grant", "account": "a", "amount": 50, "time": 0, "expiry": 1000},
    {"type": "consume", "account": "a", "amount": 70, "time": 3, "pool": "h100"},
    {"type": "submit", "account": "a", "job": "j1", "cost": 8, "priority": 1, "time": 4},
    {"type": "submit", "account": "a", "job": "j2", "cost": 8, "priority": 1, "time": 4},
    {"type": "start", "job": "j1", "time": 5},
    {"type": "cancel", "job": "j2", "time": 6},
    {"type": "complete", "job": "j1", "success": True, "time": 9, "refund_fraction": 0.5},
]


def jsonl(events: list[dict[str, object]], end: str = "\n") -> str:
    return "".join(json.dumps(e) + end for e in events)


def imported(cli: Run, path: Path, events: list[dict[str, object]]) -> None:
    """Write `events` as a JSON Lines file at `path` and import it."""
    path.write_text(jsonl(events))
    result = cli("import", str(path))
    assert result.exit_code == 0, result.stderr


@pytest.fixture
def loaded(cli: Run, tmp_path: Path) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_text(jsonl(EVENTS))
    result = cli("import", str(path))
    assert result.exit_code == 0, result.stderr
    return path


def test_balance_json_has_the_contract_keys(cli: Run, loaded: Path) -> None:
    b = balance_json(cli, "a", "--at", "5")
    assert {"account", "balance", "available", "pools"} <= set(b)
    assert b["account"] == "a"
    # h100: 100 - 70 = 30; general 50; j1's 8 reserved.
    assert b["balance"] == 80
    assert b["available"] == 64  # j1 and j2 (cancelled at 6) both hold 8
    assert isinstance(b["pools"], dict)
    assert b["pools"]["general"] == 50
    assert b["pools"]["h100"] == 30
    assert all(isinstance(v, int) and not isinstance(v, bool) for v in
               (b["balance"], b["available"]))


def test_balance_after_expiry_and_charge(cli: Run, loaded: Path) -> None:
    b = balance_json(cli, "a", "--at", "10")
    assert b["balance"] == 42
    assert b["available"] == 42


def test_balance_as_known_at_position(cli: Run, loaded: Path) -> None:
    b = balance_json(cli, "a", "--at", "5", "--as-known-at", "3")
    assert b["balance"] == 150


def test_db_option_before_the_command(cli: Run, loaded: Path) -> None:
    result = cli("balance", "a", "--json", "--at", "5", db_first=True)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["balance"] == 80


def test_db_from_environment(cli: Run, loaded: Path, db: str) -> None:
    result = cli("balance", "a", "--json", "--at", "5", use_db=False,
                 env={"GPU_CREDITS_DB": db})
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["balance"] == 80


def test_reimporting_the_same_file_appends_nothing(cli: Run, loaded: Path) -> None:
    before = cli("export").stdout
    assert cli("import", str(loaded)).exit_code == 0
    assert cli("export").stdout == before


@needs("void")
def test_id_less_lines_redelivered_with_crlf_append_only_new_lines(
        cli: Run, loaded: Path, tmp_path: Path) -> None:
    extra = {"type": "grant", "account": "a", "amount": 5, "time": 20, "expiry": 30}
    grown = tmp_path / "grown.jsonl"
    grown.write_bytes(jsonl([*EVENTS, extra], end="\r\n").encode())
    assert cli("import", str(grown)).exit_code == 0
    exported = [json.loads(line) for line in cli("export").stdout.splitlines() if line]
    assert len(exported) == len(EVENTS) + 1


def test_identical_id_less_lines_are_distinct_events(cli: Run, tmp_path: Path) -> None:
    line = {"type": "grant", "account": "x", "amount": 5, "time": 1}
    path = tmp_path / "twice.jsonl"
    path.write_text(jsonl([line, line]))
    assert cli("import", str(path)).exit_code == 0
    assert balance_json(cli, "x")["balance"] == 10
    assert cli("import", str(path)).exit_code == 0
    assert balance_json(cli, "x")["balance"] == 10


def test_import_is_all_or_nothing_with_exit_2(cli: Run, loaded: Path, tmp_path: Path) -> None:
    before = cli("export").stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(jsonl([{"type": "grant", "account": "a", "amount": 1, "time": 50},
                          {"type": "grant", "account": "a", "amount": -1, "time": 51}]))
    result = cli("import", str(bad))
    assert result.exit_code == 2
    assert result.stderr.strip()
    assert cli("export").stdout == before


@needs("void")
def test_far_event_times_are_refused_unless_allowed(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "far.jsonl"
    path.write_text(jsonl([{"type": "grant", "account": "a", "amount": 1,
                            "time": 1_700_000_000_000}]))
    result = cli("import", str(path))
    assert result.exit_code == 2
    assert cli("export").stdout.strip() == ""
    result = cli("import", str(path), "--allow-far-times")
    assert result.exit_code == 0, result.stderr


def test_far_expiry_is_fine(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "expiry.jsonl"
    path.write_text(jsonl([{"type": "grant", "account": "a", "amount": 1, "time": 1,
                            "expiry": 9_999_999_999}]))
    assert cli("import", str(path)).exit_code == 0


@needs("void")
def test_every_event_type_imports(cli: Run, tmp_path: Path) -> None:
    events = [
        {"type": "grant", "id": "g1", "account": "a", "amount": 100, "time": 0, "expiry": 10,
         "priority": 10, "memo": "PO 4411"},
        {"type": "grant", "id": "g-2026-11", "account": "a", "amount": 40, "time": 0},
        {"type": "consume", "id": "u-991", "account": "a", "amount": 30, "time": 2,
         "memo": "run 17"},
        {"type": "adjust", "account": "a", "amount": -25, "time": 4,
         "reason": "double-billed run 17"},
        {"type": "adjust", "account": "a", "amount": 5, "time": 4, "reason": "goodwill"},
        {"type": "void", "grant": "g-2026-11", "time": 6, "reason": "contract cancelled"},
        {"type": "reverse", "event": "u-991", "time": 7,
         "reason": "timestamp was in milliseconds"},
    ]
    path = tmp_path / "all.jsonl"
    path.write_text(jsonl(events))
    result = cli("import", str(path))
    assert result.exit_code == 0, result.stderr
    # g1 100; u-991 reversed; adjust -25 then +5 -> 80 left of g1 ... and g-2026-11 voided.
    assert balance_json(cli, "a", "--at", "8")["balance"] == 80


@needs("reverse")
def test_reversal_of_a_reversal_restores_the_event(cli: Run, tmp_path: Path) -> None:
    events = [
        {"type": "grant", "id": "g", "account": "a", "amount": 100, "time": 0},
        {"type": "consume", "id": "u", "account": "a", "amount": 30, "time": 1},
        {"type": "reverse", "id": "r1", "event": "u", "time": 2, "reason": "wrong"},
        {"type": "reverse", "id": "r2", "event": "r1", "time": 3, "reason": "was right"},
    ]
    path = tmp_path / "rr.jsonl"
    path.write_text(jsonl(events))
    assert cli("import", str(path)).exit_code == 0, cli("import", str(path)).stderr
    # The reversal of the reversal restores the consume everywhere on the timeline.
    assert balance_json(cli, "a", "--at", "2")["balance"] == 70
    # As known after the first reversal only, the consume never happened ...
    assert balance_json(cli, "a", "--at", "2", "--as-known-at", "3")["balance"] == 100
    # ... and as known before it, the consume still counts.
    assert balance_json(cli, "a", "--at", "2", "--as-known-at", "2")["balance"] == 70


def test_export_round_trips_through_import(cli: Run, loaded: Path, tmp_path: Path) -> None:
    exported = cli("export").stdout
    again = tmp_path / "again.db"
    path = tmp_path / "export.jsonl"
    path.write_text(exported)
    other = f"sqlite:///{again}"
    result = cli("import", str(path), "--db", other, use_db=False)
    assert result.exit_code == 0, result.stderr
    assert cli("export", "--db", other, use_db=False).stdout == exported
    digest = json.loads(cli("replay", "--json").stdout)["digest"]
    assert json.loads(cli("replay", "--json", "--db", other, use_db=False).stdout)[
        "digest"] == digest


def test_export_lines_are_canonically_ordered(cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    path.write_text(jsonl([{"type": "grant", "account": "a", "amount": 1, "time": 9},
                           {"type": "grant", "account": "a", "amount": 1, "time": 2}]))
    assert cli("import", str(path)).exit_code == 0
    times = [json.loads(line)["time"] for line in cli("export").stdout.splitlines()]
    assert times == [2, 9]


def test_export_csv(cli: Run, loaded: Path) -> None:
    result = cli("export", "--format", "csv")
    assert result.exit_code == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == len(EVENTS)


def test_statement_csv_and_json(cli: Run, loaded: Path) -> None:
    result = cli("statement", "a", "--csv")
    assert result.exit_code == 0, result.stderr
    assert list(csv.reader(io.StringIO(result.stdout)))
    result = cli("statement", "a", "--from", "1", "--to", "9", "--json")
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)


@pytest.mark.parametrize("args", [
    ("explain", "a"), ("explain", "--job", "j1"), ("replay",), ("replay", "--to", "5"),
    ("verify",), ("revisions",),
])
def test_query_commands_take_json(cli: Run, loaded: Path, args: tuple[str, ...]) -> None:
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)


@needs("accounts", "expiring", "jobs")
@pytest.mark.parametrize("args", [
    ("accounts",), ("expiring",), ("expiring", "--within", "3d"),
    ("jobs",), ("jobs", "--account", "a"), ("jobs", "--state", "succeeded"),
    ("jobs", "--account", "a", "--state", "cancelled"),
])
def test_report_commands_take_json(cli: Run, loaded: Path, args: tuple[str, ...]) -> None:
    result = cli(*args, "--json")
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)


def test_unknown_account_is_exit_2_with_one_line(cli: Run, loaded: Path) -> None:
    result = cli("statement", "nobody")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_option_value_is_exit_2_with_one_line(cli: Run, loaded: Path) -> None:
    result = cli("balance", "a", "--at", "not-a-time")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    result = cli("no-such-command")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_file_is_exit_2(cli: Run, tmp_path: Path) -> None:
    result = cli("import", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_db_upgrade(cli: Run) -> None:
    result = cli("db", "upgrade")
    assert result.exit_code == 0, result.stderr
    assert cli("db", "upgrade", db_first=True).exit_code == 0


def test_verify_passes_on_an_intact_journal(cli: Run, loaded: Path) -> None:
    result = cli("verify", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True


@needs("head")
def test_head_and_verify_anchor(cli: Run, loaded: Path) -> None:
    result = cli("head", "--json")
    assert result.exit_code == 0, result.stderr
    head = json.loads(result.stdout)
    assert head["position"] == len(EVENTS)
    anchor = f"{head['position']}:{head['hash']}"
    result = cli("verify", "--anchor", anchor)
    assert result.exit_code == 0, result.stderr
    bad = f"{head['position']}:{'0' * 64}"
    result = cli("verify", "--anchor", bad)
    assert result.exit_code == 1
    result = cli("verify", "--anchor", "nonsense")
    assert result.exit_code == 2
    plain = cli("head")
    assert plain.exit_code == 0 and head["hash"] in plain.stdout


@needs("grant", "consume", "adjust", "void", "reverse")
def test_single_event_commands(cli: Run) -> None:
    result = cli("grant", "a", "100", "--expiry", "10", "--pool", "h100", "--priority", "10",
                 "--at", "0", "--memo", "PO 1")
    assert result.exit_code == 0, result.stderr
    result = cli("grant", "a", "40", "--at", "0")
    assert result.exit_code == 0, result.stderr
    result = cli("consume", "a", "130", "--pool", "h100", "--at", "2", "--memo", "run")
    assert result.exit_code == 0, result.stderr
    assert last_number(result.stdout) == 0  # the debt after it: 100 h100 + 30 of 40
    result = cli("consume", "a", "30", "--at", "3")
    assert result.exit_code == 0, result.stderr
    assert last_number(result.stdout) == 20  # 10 general left, 30 used: 20 debt
    result = cli("adjust", "a", "-5", "--reason", "fee", "--at", "4")
    assert result.exit_code == 0, result.stderr
    result = cli("adjust", "a", "50", "--reason", "goodwill", "--pool", "h100", "--at", "5")
    assert result.exit_code == 0, result.stderr
    assert balance_json(cli, "a", "--at", "5")["balance"] == 25
    assert cli("adjust", "a", "5").exit_code == 2  # reason required


@needs("grant", "consume", "void", "reverse")
def test_void_and_reverse_by_id(cli: Run, tmp_path: Path) -> None:
    imported(cli, tmp_path / "ids.jsonl", [
        {"type": "grant", "id": "g1", "account": "a", "amount": 100, "time": 0},
        {"type": "consume", "id": "u1", "account": "a", "amount": 30, "time": 1},
    ])
    result = cli("void", "g1", "--at", "5", "--reason", "cancelled")
    assert result.exit_code == 0, result.stderr
    assert balance_json(cli, "a", "--at", "4")["balance"] == 70
    assert balance_json(cli, "a", "--at", "5")["balance"] == 0
    result = cli("reverse", "u1", "--reason", "mistake")
    assert result.exit_code == 0, result.stderr
    assert balance_json(cli, "a", "--at", "4")["balance"] == 100
    assert cli("reverse", "nope", "--reason", "x").exit_code == 2
    assert cli("reverse", "u1").exit_code == 2  # reason required


@needs("grant")
def test_single_event_commands_refuse_far_times(cli: Run) -> None:
    result = cli("grant", "a", "1", "--at", "1700000000000")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    result = cli("grant", "a", "1", "--at", "1700000000000", "--allow-far-times")
    assert result.exit_code == 0, result.stderr


@needs("reconcile")
def test_reconcile_exit_codes(cli: Run, loaded: Path, tmp_path: Path) -> None:
    usage = next(json.loads(line)["id"] for line in cli("export").stdout.splitlines()
                 if json.loads(line)["type"] == "consume")
    good = tmp_path / "good.csv"
    good.write_text(f"account,amount,job,id\na,8,j1,\na,70,,{usage}\n")
    result = cli("reconcile", str(good), "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    json.loads(result.stdout)
    bad = tmp_path / "bad.csv"
    bad.write_text(f"account,amount,job,id\na,9,j1,\na,70,,{usage}\n")
    assert cli("reconcile", str(bad)).exit_code == 1
    assert cli("reconcile", str(bad), "--csv").exit_code == 1


@needs("whatif")
def test_whatif_appends_nothing(cli: Run, loaded: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"grant_order": "expiry", "refund_fraction": 0.0,
                                  "max_running": {"a": 1}}))
    before = cli("export").stdout
    result = cli("whatif", "--policy", str(policy), "--json")
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)
    assert cli("export").stdout == before
    policy.write_text(json.dumps({"refund_fraction": 2}))
    assert cli("whatif", "--policy", str(policy)).exit_code == 2


def test_demo_writes_history(cli: Run) -> None:
    result = cli("demo")
    assert result.exit_code == 0, result.stderr
    assert len(cli("export").stdout.splitlines()) > 20


@needs("expiring")
@pytest.mark.parametrize("within", ["7d", "3d", "12h", "604800", "7 days", "P7D", "PT12H"])
def test_expiring_within_takes_common_duration_forms(cli: Run, loaded: Path,
                                                     within: str) -> None:
    result = cli("expiring", "--within", within, "--json")
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)


@needs("expiring")
def test_expiring_within_nonsense_is_exit_2(cli: Run, loaded: Path) -> None:
    result = cli("expiring", "--within", "soon")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1


def tamper(db: str) -> None:
    """Change the amount of the first event behind the journal's back."""
    import sqlite3

    conn = sqlite3.connect(db.removeprefix("sqlite:///"))
    with conn:
        conn.execute("UPDATE events SET payload = replace(payload, '100', '900') "
                     "WHERE position = 2")
    conn.close()


def test_verify_fails_with_exit_1_on_a_tampered_journal(cli: Run, loaded: Path,
                                                        db: str) -> None:
    tamper(db)
    result = cli("verify")
    assert result.exit_code == 1
    assert result.stderr.strip()
    result = cli("verify", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["first_bad_position"] == 2


def test_default_database_is_gpu_credits_db_here(cli: Run, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPU_CREDITS_DB", raising=False)
    path = tmp_path / "one.jsonl"
    path.write_text(jsonl([{"type": "grant", "account": "z", "amount": 3, "time": 1}]))
    assert cli("import", str(path), use_db=False).exit_code == 0
    assert (tmp_path / "gpu-credits.db").exists()
    result = cli("balance", "z", "--json", use_db=False)
    assert json.loads(result.stdout)["balance"] == 3


@needs("grant", "consume")
def test_far_times_start_after_the_first_second_of_2200(cli: Run, tmp_path: Path) -> None:
    # "after 2200-01-01T00:00Z (7258118400)": that second itself is an ordinary time.
    path = tmp_path / "edge.jsonl"
    path.write_text(jsonl([{"type": "grant", "account": "a", "amount": 1,
                            "time": 7_258_118_400}]))
    assert cli("import", str(path)).exit_code == 0
    path.write_text(jsonl([{"type": "grant", "account": "a", "amount": 1,
                            "time": 7_258_118_401}]))
    assert cli("import", str(path)).exit_code == 2
    assert cli("grant", "a", "1", "--at", "2200-01-01T00:00:00Z").exit_code == 0
    for command in (("grant", "a", "1"), ("consume", "a", "1")):
        result = cli(*command, "--at", "2200-01-01T00:00:01Z")
        assert result.exit_code == 2
        assert len(result.stderr.strip().splitlines()) == 1
    assert cli("consume", "a", "1", "--at", "7258118400").exit_code == 0
    assert balance_json(cli, "a", "--at", "7258118400")["balance"] == 1


@needs("grant", "consume")
def test_grant_priority_is_0_to_100_and_lower_numbers_are_used_first(cli: Run) -> None:
    for priority in ("-1", "101"):
        result = cli("grant", "a", "1", "--at", "0", "--priority", priority)
        assert result.exit_code == 2
        assert len(result.stderr.strip().splitlines()) == 1
    assert cli("export").stdout.strip() == ""
    # Expiring soonest, but priority 100: used last. Priority 0 first, whatever its expiry;
    # between equal priorities, the earlier expiry.
    assert cli("grant", "a", "10", "--at", "0", "--expiry", "5", "--priority", "100",
               "--id", "last").exit_code == 0
    assert cli("grant", "a", "10", "--at", "0", "--expiry", "300", "--id",
               "default-later").exit_code == 0
    assert cli("grant", "a", "10", "--at", "0", "--expiry", "200", "--id",
               "default-sooner").exit_code == 0
    assert cli("grant", "a", "10", "--at", "0", "--expiry", "900", "--priority", "0",
               "--id", "first").exit_code == 0
    assert cli("consume", "a", "25", "--at", "1").exit_code == 0
    # first (10) and default-sooner (10) are spent, 5 of default-later: "last" expires
    # whole at 5, then default-later's 5 at 300.
    assert balance_json(cli, "a", "--at", "4")["balance"] == 15
    assert balance_json(cli, "a", "--at", "5")["balance"] == 5
    assert balance_json(cli, "a", "--at", "300")["balance"] == 0


@needs("consume", "adjust")
def test_a_credit_adjustment_pays_debt_first_and_never_expires(cli: Run) -> None:
    assert last_number(cli("consume", "a", "30", "--at", "1").stdout) == 30
    assert cli("adjust", "a", "20", "--reason", "goodwill", "--at", "2").exit_code == 0
    b = balance_json(cli, "a", "--at", "2")
    assert (b["balance"], b["debt"]) == (-10, 10)
    assert cli("adjust", "a", "25", "--reason", "goodwill", "--at", "3").exit_code == 0
    assert balance_json(cli, "a", "--at", "1000000000")["balance"] == 15
    assert cli("adjust", "a", "-20", "--reason", "fee", "--at", "4").exit_code == 0
    b = balance_json(cli, "a", "--at", "4")
    assert (b["balance"], b["debt"]) == (-5, 5)


@needs("grant", "consume", "reverse")
def test_reverse_command_on_a_reversal_restores_the_event(cli: Run) -> None:
    assert cli("grant", "a", "100", "--at", "0", "--id", "g").exit_code == 0
    assert cli("consume", "a", "30", "--at", "1", "--id", "u").exit_code == 0
    assert cli("reverse", "u", "--reason", "wrong", "--id", "r1").exit_code == 0
    assert balance_json(cli, "a")["balance"] == 100
    assert cli("reverse", "r1", "--reason", "it was right", "--id", "r2").exit_code == 0
    assert balance_json(cli, "a")["balance"] == 70
    assert cli("reverse", "r2", "--reason", "no, wrong", "--id", "r3").exit_code == 0
    assert balance_json(cli, "a")["balance"] == 100
    # Both stay in the journal; as known before each reversal, the answer stood.
    assert len(cli("export").stdout.splitlines()) == 5
    assert balance_json(cli, "a", "--as-known-at", "2")["balance"] == 70
    assert balance_json(cli, "a", "--as-known-at", "4")["balance"] == 70


def test_the_same_file_with_crlf_line_endings_appends_nothing(
        cli: Run, loaded: Path, tmp_path: Path) -> None:
    before = cli("export").stdout
    crlf = tmp_path / "crlf.jsonl"
    crlf.write_bytes(jsonl(EVENTS, end="\r\n").encode())
    result = cli("import", str(crlf))
    assert result.exit_code == 0, result.stderr
    assert cli("export").stdout == before


@needs("reconcile")
def test_reconcile_exit_1_when_the_file_lacks_a_ledger_charge(
        cli: Run, loaded: Path, tmp_path: Path) -> None:
    # Every row matches, but the ledger holds a charge of the same account the file lacks.
    lacking = tmp_path / "lacking.csv"
    lacking.write_text("account,amount,job\na,8,j1\n")
    result = cli("reconcile", str(lacking), "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    result = cli("reconcile", str(lacking), "--csv")
    assert result.exit_code == 1
    statuses = {row["status"] for row in csv.DictReader(io.StringIO(result.stdout))}
    assert statuses == {"matched", "missing_from_file"}


@needs("whatif")
def test_whatif_appends_nothing_with_the_database_before_the_command(
        cli: Run, loaded: Path, tmp_path: Path) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"refund_fraction": 0.0}))
    head = cli("head", "--json").stdout
    result = cli("whatif", "--policy", str(policy), db_first=True)
    assert result.exit_code == 0, result.stderr
    assert cli("head", "--json").stdout == head


@needs("grant")
def test_writes_take_the_database_from_the_environment(cli: Run, db: str) -> None:
    result = cli("grant", "a", "5", "--at", "0", use_db=False, env={"GPU_CREDITS_DB": db})
    assert result.exit_code == 0, result.stderr
    assert balance_json(cli, "a")["balance"] == 5


def test_db_option_wins_over_the_environment(cli: Run, loaded: Path, tmp_path: Path,
                                             db: str) -> None:
    elsewhere = {"GPU_CREDITS_DB": f"sqlite:///{tmp_path / 'other.db'}"}
    for db_first in (False, True):
        result = cli("balance", "a", "--json", "--at", "5", env=elsewhere, db_first=db_first)
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["balance"] == 80
    assert not (tmp_path / "other.db").exists()


def test_serve_defaults_to_127_0_0_1_port_8000() -> None:
    import typer.main

    from tools.cli import app

    serve = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    defaults = {p.name: p.default for p in serve.params}
    assert (defaults["host"], defaults["port"]) == ("127.0.0.1", 8000)


@needs("grant", "void")
def test_void_takes_neither_at_nor_reason(cli: Run) -> None:
    assert cli("grant", "a", "10", "--at", "0", "--id", "g").exit_code == 0
    result = cli("void", "g")  # from now on: the grant stops counting
    assert result.exit_code == 0, result.stderr
    assert balance_json(cli, "a")["balance"] == 0
    assert balance_json(cli, "a", "--at", "0")["balance"] == 10


@needs("adjust")
def test_an_adjustment_of_zero_is_exit_2_and_appends_nothing(cli: Run) -> None:
    result = cli("adjust", "a", "0", "--reason", "nothing", "--at", "1")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert cli("export").stdout.strip() == ""


@pytest.mark.parametrize("event", [
    {"type": "grant", "account": "a", "amount": 1},
    {"type": "grant", "account": "a", "time": 1},
    {"type": "grant", "amount": 1, "time": 1},
    {"type": "consume", "account": "a", "amount": 1},
    {"type": "account", "max_running": 2},
    {"type": "submit", "account": "a", "job": "j", "cost": 1, "time": 1},
    {"type": "submit", "account": "a", "cost": 1, "priority": 1, "time": 1},
    {"type": "start", "job": "j"},
    {"type": "complete", "job": "j", "time": 2},
    {"type": "cancel", "job": "j"},
    {"type": "adjust", "account": "a", "amount": -1, "time": 1},
    {"type": "void", "time": 1},
    {"type": "reverse", "event": "g", "time": 1},
    {"account": "a", "amount": 1, "time": 1},
])
def test_a_line_missing_a_required_field_is_exit_2_and_appends_nothing(
        cli: Run, tmp_path: Path, event: dict[str, object]) -> None:
    path = tmp_path / "missing.jsonl"
    path.write_text(jsonl([{"type": "grant", "id": "g", "account": "a", "amount": 5,
                            "time": 0}, event]))
    result = cli("import", str(path))
    assert result.exit_code == 2, result.stdout
    assert result.stderr.strip()
    assert cli("export").stdout.strip() == ""


@pytest.mark.parametrize("priority", [-1, 101, 5.5, True, "10"])
def test_a_grant_priority_outside_0_to_100_in_a_file_is_exit_2(
        cli: Run, tmp_path: Path, priority: object) -> None:
    path = tmp_path / "priority.jsonl"
    path.write_text(jsonl([{"type": "grant", "account": "a", "amount": 1, "time": 0,
                            "priority": priority}]))
    assert cli("import", str(path)).exit_code == 2
    assert cli("export").stdout.strip() == ""


def test_optional_fields_default_to_no_expiry_the_general_pool_and_a_full_refund(
        cli: Run, tmp_path: Path) -> None:
    imported(cli, tmp_path / "defaults.jsonl", [
        {"type": "grant", "account": "a", "amount": 100, "time": 0},
        {"type": "submit", "account": "a", "job": "j", "cost": 30, "priority": 1, "time": 1},
        {"type": "start", "job": "j", "time": 2},
        {"type": "complete", "job": "j", "success": False, "time": 3},
    ])
    b = balance_json(cli, "a", "--at", "4000000000")  # never expires; nothing charged
    assert (b["balance"], b["available"], b["pools"]) == (100, 100, {"general": 100})


def test_a_memo_is_shown_in_statements_and_exports(cli: Run, tmp_path: Path) -> None:
    imported(cli, tmp_path / "memo.jsonl", [
        {"type": "grant", "account": "a", "amount": 100, "time": 0, "memo": "PO 4411"},
        {"type": "consume", "account": "a", "amount": 5, "time": 1, "memo": "run 17"},
        {"type": "adjust", "account": "a", "amount": -2, "time": 2, "reason": "fee",
         "memo": "ticket 9"},
    ])
    exported = [json.loads(line) for line in cli("export").stdout.splitlines()]
    assert [e.get("memo") for e in exported] == ["PO 4411", "run 17", "ticket 9"]
    assert "run 17" in cli("export", "--format", "csv").stdout
    for args in (("statement", "a"), ("statement", "a", "--csv"),
                 ("statement", "a", "--json")):
        result = cli(*args)
        assert result.exit_code == 0, result.stderr
        for memo in ("PO 4411", "run 17", "ticket 9"):
            assert memo in result.stdout, (args, memo)


def test_export_csv_round_trips_through_import(cli: Run, loaded: Path,
                                               tmp_path: Path) -> None:
    path = tmp_path / "journal.csv"
    path.write_text(cli("export", "--format", "csv").stdout)
    other = f"sqlite:///{tmp_path / 'again.db'}"
    result = cli("import", str(path), "--db", other, use_db=False)
    assert result.exit_code == 0, result.stderr
    assert cli("export", "--db", other, use_db=False).stdout == cli("export").stdout


@needs("whatif")
def test_whatif_lists_a_job_charged_differently_and_nothing_for_an_empty_policy(
        cli: Run, tmp_path: Path) -> None:
    imported(cli, tmp_path / "failed.jsonl", [
        {"type": "grant", "account": "a", "amount": 100, "time": 0},
        {"type": "submit", "account": "a", "job": "jfail", "cost": 30, "priority": 1,
         "time": 1},
        {"type": "start", "job": "jfail", "time": 2},
        {"type": "complete", "job": "jfail", "success": False, "time": 3},
    ])
    policy = tmp_path / "policy.json"
    policy.write_text("{}")
    same = cli("whatif", "--policy", str(policy), "--json")
    assert same.exit_code == 0, same.stderr
    assert "jfail" not in same.stdout
    policy.write_text(json.dumps({"refund_fraction": 0}))
    for extra in ((), ("--json",)):
        differs = cli("whatif", "--policy", str(policy), *extra)
        assert differs.exit_code == 0, differs.stderr
        assert "jfail" in differs.stdout and "70" in differs.stdout
    assert balance_json(cli, "a")["balance"] == 100


@needs("reconcile", "adjust")
def test_reconcile_matches_usage_and_adjustments_by_id_with_a_time_column(
        cli: Run, loaded: Path, tmp_path: Path) -> None:
    usage = next(json.loads(line)["id"] for line in cli("export").stdout.splitlines()
                 if json.loads(line)["type"] == "consume")
    assert cli("adjust", "a", "-5", "--reason", "fee", "--at", "7", "--id", "fee-1"
               ).exit_code == 0
    rows = f"account,amount,id,time\na,70,{usage},3\na,5,fee-1,7\n"
    good = tmp_path / "by-id.csv"
    good.write_text(rows)
    result = cli("reconcile", str(good))
    assert result.exit_code == 0, result.stdout + result.stderr
    differs = tmp_path / "differs.csv"
    differs.write_text(rows.replace("a,5,fee-1", "a,6,fee-1"))
    assert cli("reconcile", str(differs)).exit_code == 1
    missing = tmp_path / "missing.csv"
    missing.write_text(rows + "a,1,no-such-report,5\n")
    assert cli("reconcile", str(missing), "--json").exit_code == 1


@needs("void")
def test_among_equal_priority_and_expiry_the_grant_earlier_on_the_timeline_pays_first(
        cli: Run, tmp_path: Path) -> None:
    # "The earlier grant" is by the canonical order (event time, then position): B,
    # recorded second but timed first, pays; voiding B then takes only what B has left.
    imported(cli, tmp_path / "grants.jsonl", [
        {"type": "grant", "account": "a", "amount": 5, "time": 5, "expiry": 100, "id": "A"},
        {"type": "grant", "account": "a", "amount": 5, "time": 0, "expiry": 100, "id": "B"},
        {"type": "consume", "account": "a", "amount": 3, "time": 6},
        {"type": "void", "grant": "B", "time": 7, "reason": "contract cancelled"},
    ])
    assert balance_json(cli, "a", "--at", "7")["balance"] == 5


@needs("reconcile")
def test_reconcile_reports_every_row_and_the_charges_the_file_lacks_in_its_range(
        cli: Run, tmp_path: Path) -> None:
    imported(cli, tmp_path / "usage.jsonl", [
        {"type": "grant", "account": "a", "amount": 100, "time": 0},
        {"type": "grant", "account": "b", "amount": 100, "time": 0},
        *({"type": "consume", "account": "a", "amount": amount, "time": time,
           "id": f"u{time}"} for time, amount in ((2, 10), (4, 7), (5, 20), (8, 1))),
        {"type": "consume", "account": "b", "amount": 5, "time": 5, "id": "ub"},
    ])
    charges = tmp_path / "charges.csv"
    charges.write_text("account,amount,id,time\na,10,u2,2\na,21,u5,5\na,4,nope,6\n")
    expected = {("matched", "u2"), ("amount_differs", "u5"), ("missing_from_ledger", "nope"),
                # In the file's range (2 to 6) and account: u4. Not u8 (at 8), not b's.
                ("missing_from_file", "u4")}
    result = cli("reconcile", str(charges), "--json")
    assert result.exit_code == 1, result.stderr
    assert {(f["status"], f["id"]) for f in json.loads(result.stdout)["findings"]} == expected
    result = cli("reconcile", str(charges), "--csv")
    assert result.exit_code == 1, result.stderr
    assert {(row["status"], row["id"]) for row in csv.DictReader(io.StringIO(result.stdout))
            } == expected


def test_explain_names_the_grants_that_paid_and_why_a_job_was_rejected(
        cli: Run, tmp_path: Path) -> None:
    imported(cli, tmp_path / "explained.jsonl", [
        {"type": "grant", "account": "a", "amount": 10, "time": 0, "expiry": 100, "id": "g1"},
        {"type": "grant", "account": "a", "amount": 10, "time": 0, "expiry": 50, "id": "g2"},
        {"type": "consume", "account": "a", "amount": 15, "time": 1, "id": "u"},
        {"type": "submit", "account": "a", "job": "big", "cost": 100, "priority": 1,
         "time": 2},
    ])
    account = json.loads(cli("explain", "a", "--json").stdout)
    assert {g["grant"]: [(u["event_id"], u["amount"]) for u in g["uses"]]
            for g in account["grants"]} == {"g1": [("u", 5)], "g2": [("u", 10)]}
    job = json.loads(cli("explain", "--job", "big", "--json").stdout)
    assert (job["state"], job["accepted"], job["charged"]) == ("rejected", False, None)
    assert "100" in job["reason"] and "5 available" in job["reason"]
    text = cli("explain", "--job", "big").stdout
    assert "rejected" in text and "costs 100" in text


@needs("whatif")
def test_whatif_grant_order_expiry_ignores_grant_priorities(
        cli: Run, tmp_path: Path) -> None:
    imported(cli, tmp_path / "priorities.jsonl", [
        {"type": "grant", "account": "a", "amount": 10, "time": 0, "expiry": 5,
         "priority": 90},
        {"type": "grant", "account": "a", "amount": 10, "time": 0, "priority": 10},
        {"type": "consume", "account": "a", "amount": 10, "time": 1},
        {"type": "consume", "account": "a", "amount": 1, "time": 6},
    ])
    policy = tmp_path / "policy.json"
    # As recorded the priority-10 grant paid at 1 and the other expired unused at 5; by
    # expiry alone the expiring one pays and the other is left.
    policy.write_text(json.dumps({"grant_order": "expiry"}))
    result = cli("whatif", "--policy", str(policy), "--json")
    assert result.exit_code == 0, result.stderr
    (account,) = json.loads(result.stdout)["accounts"]
    assert (account["actual"]["balance"], account["whatif"]["balance"]) == (-1, 9)
    policy.write_text(json.dumps({"grant_order": "priority"}))
    assert json.loads(cli("whatif", "--policy", str(policy), "--json").stdout
                      )["changed"] is False


@needs("jobs")
def test_jobs_lists_state_cost_charge_and_account_filtered(cli: Run, loaded: Path) -> None:
    def listed(*args: str) -> list[tuple[object, ...]]:
        result = cli("jobs", *args, "--json")
        assert result.exit_code == 0, result.stderr
        return [(j["job"], j["account"], j["state"], j["cost"], j["charged"])
                for j in json.loads(result.stdout)["jobs"]]

    assert listed() == [("j1", "a", "succeeded", 8, 8), ("j2", "a", "cancelled", 8, None)]
    assert listed("--state", "cancelled") == [("j2", "a", "cancelled", 8, None)]
    assert listed("--account", "a", "--state", "running") == []
