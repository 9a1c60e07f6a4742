"""One journal, one answer: what the command line prints for a journal depends on the
journal alone, not on the width of the terminal it is read on.

Tables and sentences for people wrap to the terminal's width (`$COLUMNS`); a value
people copy or compare (a state digest, a command to run) is printed on one line
whatever the width, so the terminal may show it over several rows but never splits it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest
from cli_helpers import ROOT, SMALL, Run, imported
from contract.kit import cli_runner

# A phone, a split pane, and the widths at which `digest <64 hex digits>` (71 characters)
# no longer fits but the digest alone would.
WIDTHS = ["20", "50", "66", "70"]


@pytest.mark.parametrize("columns", WIDTHS)
def test_replay_prints_its_digest_on_one_line_at_any_width(
        columns: str, run: Run, tmp_path: Path) -> None:
    imported(run, tmp_path / "small.jsonl", SMALL)
    digest = json.loads(run("replay", "--json").stdout)["digest"]
    done = run("replay", env={"COLUMNS": columns})
    assert done.exit_code == 0, done.stderr
    assert f"digest {digest}" in done.stdout.splitlines(), done.stdout


def test_the_demo_prints_its_digest_and_the_commands_to_try_on_one_line_each(
        run: Run) -> None:
    done = run("demo", env={"COLUMNS": "50"})
    assert done.exit_code == 0, done.stderr
    lines = done.stdout.splitlines()
    digest = json.loads(run("replay", "--json").stdout)["digest"]
    assert f"State digest: {digest}" in lines
    tried = lines[lines.index(next(line for line in lines if line.endswith("Try:"))) + 1:]
    assert [line.split()[-1] for line in tried] == [
        "accounts", tried[1].split()[-1], tried[2].split()[-1], tried[3].split()[-1],
        "7d", "revisions", "verify"]
    # Each is a whole command: the program, --db and its URL, the command and its words.
    assert all(len(line.split()) >= 4 and "--db" in line for line in tried), tried


# -- the same journal, every environment -------------------------------------------------

# Names whose order a locale's collation would change (accents, case, digits, the Turkish
# dotted and dotless i, CJK, one name composed and decomposed), partial refunds whose
# share a float gets wrong, a late usage report, a void and a reversal.
NAMES = ["Zebra", "apple", "\u00c4pfel", "\u00e9clair", "stra\u00dfe", "\u0130stanbul",
         "\u0131stanbul", "10", "9", "\u65e5\u672c", "\u00e4b", "a\u0308b"]
POOLS = ["h100", "\u00e9pool", "Pool", "a100"]
FRACTIONS = [0.1, 0.7, 0.3, 1 / 3, 0.29, 0.57, 0.9, 2 / 3, 0.15, 0.45, 0.01, 0.99]
T0 = 1764547200  # 2025-12-01T00:00:00Z


def _history() -> tuple[str, str]:
    """Two files, imported one after the other: the month, then what arrived late."""
    events: list[dict[str, object]] = []
    for i, name in enumerate(NAMES):
        pool = POOLS[i % len(POOLS)]
        events += [
            {"type": "account", "account": name, "max_running": 2},
            {"type": "grant", "account": name, "amount": 100 + i, "time": T0 + i,
             "expiry": T0 + 10 * 86400, "pool": pool, "memo": f"PO {i} caf\u00e9"},
            {"type": "grant", "account": name, "amount": 50, "time": T0 + i,
             "expiry": T0 + 3 * 86400, "id": f"g-{i}"},
            {"type": "consume", "account": name, "amount": 30 + i, "time": T0 + 1000 + i,
             "pool": pool, "id": f"u-{i}"},
            {"type": "submit", "account": name, "job": f"j\u00f6b-{i}", "cost": 37 + 3 * i,
             "priority": i % 3, "time": T0 + 2000 + i, "pool": pool},
            {"type": "start", "job": f"j\u00f6b-{i}", "time": T0 + 3000 + i},
            {"type": "complete", "job": f"j\u00f6b-{i}", "success": False,
             "time": T0 + 4000 + i, "refund_fraction": FRACTIONS[i]},
        ]
    later: list[dict[str, object]] = [
        {"type": "consume", "account": "apple", "amount": 500, "time": T0 + 500,
         "memo": "late, past the credits"},
        {"type": "void", "grant": "g-3", "time": T0 + 1500, "reason": "contract cancelled"},
        {"type": "reverse", "event": "u-5", "time": T0 + 6000, "reason": "wrong unit"},
        {"type": "grant", "account": "apple", "amount": 600, "time": T0 + 7000},
        {"type": "submit", "account": "9", "job": "waiting", "cost": 5, "priority": 1,
         "time": T0 + 8000},
    ]
    return _lines(events), _lines(later)


def _lines(events: list[dict[str, object]]) -> str:
    return "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events)


FILES = ("month.jsonl", "late.jsonl")


def _questions() -> dict[str, list[str]]:
    asked: dict[str, list[str]] = {
        "replay": ["replay", "--json"],
        "export": ["export"],
        "export-csv": ["export", "--format", "csv"],
        "accounts": ["accounts", "--json"],
        "accounts-then": ["accounts", "--json", "--at", "2025-12-01T00:30", "--as-known-at",
                          "40"],
        "jobs": ["jobs", "--json"],
        "revisions": ["revisions", "--json"],
        "expiring": ["expiring", "--json", "--within", "30d", "--at", "2025-12-01"],
        "verify": ["verify", "--json"],
    }
    for name in NAMES:
        asked[f"statement {name}"] = ["statement", name, "--csv"]
        asked[f"balance {name}"] = ["balance", name, "--json"]
        asked[f"explain {name}"] = ["explain", name, "--json"]
    for i in range(len(NAMES)):
        asked[f"job {i}"] = ["explain", "--job", f"j\u00f6b-{i}", "--json"]
    return asked


# Runs every question in one interpreter (one start per environment, not one per
# question), each through the command line's own entry point; prints what each answered.
_ASK = """
import json, sys
from typer.testing import CliRunner
from tools.cli import app
from projections import native
db, questions = sys.argv[1], json.loads(sys.stdin.read())
runner = CliRunner()
answers = {"compiled fold": native.in_use()}
for name, args in questions.items():
    done = runner.invoke(app, ["--db", db, *args], catch_exceptions=False)
    answers[name] = [done.exit_code, done.stdout_bytes.decode("utf-8")]
sys.stdout.write(json.dumps(answers))
"""

ENVIRONMENTS: dict[str, dict[str, str]] = {
    "baseline": {"LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "0"},
    "chatham-german": {"LC_ALL": "de_DE.UTF-8", "LANG": "de_DE.UTF-8",
                       "TZ": "Pacific/Chatham", "PYTHONHASHSEED": "1"},
    "st-johns-c-narrow": {"LC_ALL": "C", "PYTHONUTF8": "1", "TZ": "America/St_Johns",
                          "PYTHONHASHSEED": "2", "COLUMNS": "20", "NO_COLOR": "1"},
    "python-fold": {"LC_ALL": "C.UTF-8", "TZ": "UTC", "PYTHONHASHSEED": "3",
                    "GPU_CREDITS_PURE_PYTHON": "1"},
    "compiled-fold-if-built": {"LC_ALL": "C.UTF-8", "TZ": "Asia/Kolkata",
                               "PYTHONHASHSEED": "4", "GPU_CREDITS_PURE_PYTHON": "0"},
}


def _ask(db: str, env: dict[str, str]) -> dict[str, object]:
    full = {k: os.environ[k] for k in ("PATH", "SYSTEMROOT") if k in os.environ}
    full["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    full.update(env)
    done = subprocess.run([sys.executable, "-c", _ASK, db], input=json.dumps(_questions()),
                          capture_output=True, text=True, encoding="utf-8", env=full,
                          cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    answers: dict[str, object] = json.loads(done.stdout)
    return answers


@pytest.fixture(scope="module")
def journal_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite journal holding the history, imported once; never replayed (no
    checkpoint), so each test copies it and starts from the same bytes."""
    folder = tmp_path_factory.mktemp("same-answers")
    path = folder / "journal.db"
    for name, text in zip(FILES, _history(), strict=True):
        (folder / name).write_text(text, encoding="utf-8")
        done = cli_runner(f"sqlite:///{path}")("import", str(folder / name))
        assert done.exit_code == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def baseline(journal_file: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, object]:
    copy = tmp_path_factory.mktemp("baseline") / "journal.db"
    shutil.copy(journal_file, copy)
    answers = _ask(f"sqlite:///{copy}", ENVIRONMENTS["baseline"])
    failed = {k: v for k, v in answers.items() if isinstance(v, list) and v[0] != 0}
    assert failed == {}
    return answers


def test_the_history_says_what_it_is_meant_to(baseline: dict[str, object]) -> None:
    """The questions meet what they are about: partial refunds charged, the composed and
    decomposed name two accounts, late events revising outcomes reported before."""
    jobs = json.loads(str(cast(list[object], baseline["jobs"])[1]))
    charges = {job["job"]: job["charged"] for job in jobs["jobs"]}
    # floor(cost * (1 - f)) on the fraction as written: 37 at 0.1 is 33, 43 at 0.3 is 30.
    assert charges["j\u00f6b-0"] == 33 and charges["j\u00f6b-2"] == 30
    revisions = json.loads(str(cast(list[object], baseline["revisions"])[1]))
    assert revisions
    listed = json.loads(str(cast(list[object], baseline["accounts"])[1]))["accounts"]
    assert {"\u00e4b", "a\u0308b"} <= {a["account"] for a in listed}
    digest = json.loads(str(cast(list[object], baseline["replay"])[1]))["digest"]
    assert len(digest) == 64


@pytest.mark.parametrize("case", [c for c in ENVIRONMENTS if c != "baseline"])
def test_every_answer_is_the_same_bytes_in_every_environment(
        case: str, journal_file: Path, baseline: dict[str, object],
        tmp_path: Path) -> None:
    copy = tmp_path / "journal.db"
    shutil.copy(journal_file, copy)
    answers = _ask(f"sqlite:///{copy}", ENVIRONMENTS[case])
    differ = [k for k in baseline if k != "compiled fold" and answers[k] != baseline[k]]
    assert differ == [], (differ[:1], answers[differ[0]] if differ else None)


def test_answers_after_a_replay_are_those_before_it(
        journal_file: Path, baseline: dict[str, object], tmp_path: Path) -> None:
    """`replay` saves a checkpoint that later questions start from: what they answer
    is what a fold from the first event answers."""
    copy = tmp_path / "journal.db"
    shutil.copy(journal_file, copy)
    assert cli_runner(f"sqlite:///{copy}")("replay").exit_code == 0
    answers = _ask(f"sqlite:///{copy}", ENVIRONMENTS["baseline"])
    differ = [k for k in baseline if answers[k] != baseline[k]]
    assert differ == [], (differ[:1], answers[differ[0]] if differ else None)


@pytest.mark.postgres
def test_every_answer_is_the_same_bytes_from_postgresql(
        journal_file: Path, baseline: dict[str, object], pg_fresh_url: str) -> None:
    """The history imported into PostgreSQL: the same ids, so the same answers (but
    `verify`, which counts the same events and checkpoints, says so in the same words)."""
    for name in FILES:
        assert cli_runner(pg_fresh_url)("import", str(journal_file.parent / name)
                                        ).exit_code == 0
    answers = _ask(pg_fresh_url, ENVIRONMENTS["baseline"])
    differ = [k for k in baseline if answers[k] != baseline[k]]
    assert differ == [], (differ[:1], answers[differ[0]] if differ else None)


@pytest.mark.parametrize("args", [
    ("grant", "a", "5", "--at", "20", "--memo", "a memo long enough to wrap"),
    ("consume", "a", "3", "--at", "21"),
    ("adjust", "a", "-1", "--reason", "a typo fixed", "--at", "22"),
], ids=["grant", "consume", "adjust"])
def test_what_a_recorded_event_says_is_one_line_at_any_width(
        args: tuple[str, ...], run: Run, tmp_path: Path) -> None:
    """The id it names is what `void` and `reverse` take: never split by a line break."""
    imported(run, tmp_path / "small.jsonl", SMALL)
    done = run(*args, "--id", "an-id-long-enough-to-be-split-over-rows",
               env={"COLUMNS": "30"})
    assert done.exit_code == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1, done.stdout
    assert "an-id-long-enough-to-be-split-over-rows:" in done.stdout
