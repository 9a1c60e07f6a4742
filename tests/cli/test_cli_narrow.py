"""What the command line prints in a narrow terminal: every figure, time and id whole.

A table that does not fit the terminal wraps its text columns. For a ledger a figure cut
short (`123,456,789…`) or split over two lines is a wrong figure, so a text column that
carries figures or times (a statement's detail, an explanation's `paid by`) is never
narrower than its widest figure or time, and an id longer than its column folds onto the
next line rather than losing its end.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import Run, as_json, imported

LONG_ACCOUNT = "acct-" + "x" * 110
LONG_GRANT = "grant-" + "g" * 100
LONG_JOB = "job-" + "j" * 100
WIDE_ACCOUNT = "研究チーム🚀"
WIDE_GRANT = "助成金-二〇二六年-第一号🚀🚀🚀"
WIDE_JOB = "仕事🚀一"

_GRANT = {"type": "grant", "time": 1793491200, "expiry": 1825027200}
_SUBMIT = {"type": "submit", "priority": 5, "time": 1793610000}
EVENTS = "".join(json.dumps(e) + "\n" for e in (
    {"type": "account", "account": LONG_ACCOUNT},
    {"type": "account", "account": WIDE_ACCOUNT},
    {**_GRANT, "account": LONG_ACCOUNT, "amount": 123456789012, "id": LONG_GRANT,
     "memo": "PO 4411"},
    {**_GRANT, "account": WIDE_ACCOUNT, "amount": 9876543, "id": WIDE_GRANT},
    {**_SUBMIT, "account": LONG_ACCOUNT, "job": LONG_JOB, "cost": 98765432101},
    {"type": "start", "job": LONG_JOB, "time": 1793610300},
    {"type": "complete", "job": LONG_JOB, "success": True, "time": 1793653200},
    {**_SUBMIT, "account": WIDE_ACCOUNT, "job": WIDE_JOB, "cost": 12345},
    {"type": "consume", "account": WIDE_ACCOUNT, "amount": 7654321, "time": 1793750340,
     "id": "u-7654321"},
))

COMMANDS = (
    ("statement", LONG_ACCOUNT), ("statement", WIDE_ACCOUNT),
    ("explain", LONG_ACCOUNT), ("explain", WIDE_ACCOUNT),
    ("explain", "--job", LONG_JOB), ("explain", "--job", WIDE_JOB),
    ("accounts",), ("jobs",), ("expiring", "--within", "5000d"), ("balance", LONG_ACCOUNT),
)


@pytest.fixture
def ledger(run: Run, tmp_path: Path) -> Path:
    return imported(run, tmp_path / "events.jsonl", EVENTS)


def _words(text: str) -> set[str]:
    """Every whitespace-separated word of `text`, without the punctuation around it."""
    return {w.strip("(),;:") for w in text.split()}


@pytest.mark.parametrize("columns", ["40", "60", "120"])
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a)[:24])
def test_nothing_is_cut_short_in_a_narrow_terminal(run: Run, ledger: Path, columns: str,
                                                   args: tuple[str, ...]) -> None:
    result = run(*args, env={"COLUMNS": columns})
    assert result.exit_code == 0, result.stderr
    assert "…" not in result.stdout, result.stdout


@pytest.mark.parametrize("columns", ["40", "60", "120"])
@pytest.mark.parametrize("args", [a for a in COMMANDS if a[0] in ("statement", "explain")],
                         ids=lambda a: " ".join(a)[:24])
def test_every_figure_and_time_stays_on_one_line(run: Run, ledger: Path, columns: str,
                                                 args: tuple[str, ...]) -> None:
    """Each figure or time of the wide answer is a whole word of the narrow one, never a
    piece of one split over two lines."""
    wide = run(*args, env={"COLUMNS": "100000"}).stdout
    narrow = run(*args, env={"COLUMNS": columns}).stdout
    figure = re.compile(r"-?\d{1,3}(,\d{3})+|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
    expected = {w for w in _words(wide) if figure.fullmatch(w)}
    assert expected
    missing = expected - _words(narrow)
    assert not missing, narrow


@pytest.mark.parametrize("args", [("statement", LONG_ACCOUNT), ("explain", "--job", LONG_JOB),
                                  ("explain", LONG_ACCOUNT)], ids=lambda a: " ".join(a)[:24])
def test_a_long_id_folds_whole_in_a_narrow_terminal(run: Run, ledger: Path,
                                                    args: tuple[str, ...]) -> None:
    """An id wider than its column is folded over lines: every character of it is shown."""
    narrow = run(*args, env={"COLUMNS": "60"}).stdout
    for long_id in (LONG_GRANT, LONG_JOB):
        run_of = long_id[long_id.index("-") + 1]
        assert narrow.count(run_of) >= len(long_id) - long_id.index("-") - 1, narrow


# -- the same concept, the same key in every --json answer ------------------------------------


def test_a_jobs_charge_has_one_key_in_every_json_answer(run: Run, ledger: Path) -> None:
    """`jobs --json` and the HTTP job say `charged`; `explain --job --json` says it too
    (and keeps `charge`, its earlier name)."""
    rows = as_json(run("jobs", "--json"))
    assert isinstance(rows, dict)
    listed = next(j for j in rows["jobs"] if j["job"] == LONG_JOB)
    explained = as_json(run("explain", "--job", LONG_JOB, "--json"))
    assert isinstance(explained, dict)
    assert listed["charged"] == explained["charged"] == explained["charge"] == 98765432101


@pytest.mark.parametrize("args", [("balance", WIDE_ACCOUNT), ("statement", WIDE_ACCOUNT),
                                  ("explain", WIDE_ACCOUNT), ("accounts",), ("jobs",),
                                  ("expiring",)], ids=lambda a: a[0])
def test_every_answer_as_known_at_a_position_says_which(run: Run, ledger: Path,
                                                        args: tuple[str, ...]) -> None:
    """Every query that takes `--as-known-at` names the position it answered as known at,
    under the one key `as_known_at`, so a script can ask again and get the same answer."""
    head = 9
    for asked in (None, 8):
        extra = () if asked is None else ("--as-known-at", str(asked))
        answer = as_json(run(*args, *extra, "--json"))
        assert isinstance(answer, dict)
        assert answer["as_known_at"] == (head if asked is None else asked), args
