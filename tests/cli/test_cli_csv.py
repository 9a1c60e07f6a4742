"""The CSV files of the command line are RFC 4180 CSV with `\\n` line ends
(docs/operations.md, "CSV files and spreadsheets")."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from cli_helpers import Run, imported

MEMO = 'PO "4411", line 2'
EVENTS = "".join(json.dumps(e) + "\n" for e in (
    {"type": "grant", "account": "a", "amount": 100, "time": 1, "id": "g,1", "memo": MEMO},
    {"type": "submit", "account": "a", "job": 'j "quoted"', "cost": 10, "priority": 1,
     "time": 2},
    {"type": "start", "job": 'j "quoted"', "time": 3},
    {"type": "complete", "job": 'j "quoted"', "success": True, "time": 4},
))


@pytest.fixture
def ledger(run: Run, tmp_path: Path) -> Path:
    return imported(run, tmp_path / "events.jsonl", EVENTS)


@pytest.mark.parametrize("args", [("statement", "a", "--csv"), ("export", "--format", "csv"),
                                  ("reconcile", "{charges}", "--csv")],
                         ids=lambda a: a[0])
def test_csv_quotes_as_rfc_4180_and_ends_lines_in_lf(run: Run, ledger: Path, tmp_path: Path,
                                                     args: tuple[str, ...]) -> None:
    charges = tmp_path / "charges.csv"
    charges.write_text('account,job,amount\na,"j ""quoted""",10\n')
    result = run(*[a.replace("{charges}", str(charges)) for a in args])
    assert result.exit_code == 0, result.stderr
    text = result.stdout
    assert "\r" not in text and text.endswith("\n")
    rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    assert len({len(row) for row in rows}) == 1  # every row as long as the header
    cells = {cell for row in rows for cell in row}
    assert 'j "quoted"' in cells
    if args[0] != "reconcile":
        assert any(MEMO in cell for cell in cells) and "g,1" in cells
    assert '"j ""quoted"""' in text  # a quote doubled inside a quoted cell
