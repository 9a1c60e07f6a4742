"""The design notes' worked examples through the command line and the JSON Lines import.

The facades answer them in tests/projections; a user who records the same history with
`gpu-credits grant`/`consume` or with `import` must read the same balances and debts.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import as_json, imported, journal_head
from contract.kit import Run, balance_json, last_number


def balance_at(run: Run, account: str, t: int) -> int:
    balance = balance_json(run, account, "--at", str(t))["balance"]
    assert isinstance(balance, int)
    return balance


def debt_printed(run: Run, *args: str) -> int:
    """The debt `gpu-credits consume` prints after it."""
    result = run("consume", *args)
    assert result.exit_code == 0, result.stderr
    return last_number(result.stdout)


def test_earliest_expiry_first_then_debt_then_a_grant_pays_it_through_commands(run: Run) -> None:
    assert run("grant", "a", "100", "--at", "0", "--expiry", "10").exit_code == 0
    assert run("grant", "a", "50", "--at", "2", "--expiry", "5").exit_code == 0
    assert debt_printed(run, "a", "70", "--at", "3") == 0
    assert balance_at(run, "a", 4) == 80
    assert debt_printed(run, "a", "90", "--at", "8") == 10
    assert balance_at(run, "a", 8) == -10
    assert run("grant", "a", "30", "--at", "12", "--expiry", "20").exit_code == 0
    assert balance_at(run, "a", 12) == 20


def test_expired_credits_leave_a_later_consume_in_debt_through_commands(run: Run) -> None:
    assert run("grant", "a", "50", "--at", "0", "--expiry", "5").exit_code == 0
    assert balance_at(run, "a", 5) == 0
    assert debt_printed(run, "a", "20", "--at", "6") == 20
    assert balance_at(run, "a", 6) == -20


def test_a_late_consume_prints_the_debt_right_after_it_on_the_corrected_timeline(run: Run) -> None:
    assert run("grant", "a", "10", "--at", "0", "--expiry", "100").exit_code == 0
    assert debt_printed(run, "a", "5", "--at", "10") == 0
    assert run("grant", "a", "20", "--at", "20", "--expiry", "100").exit_code == 0
    # Late: 5 left at 15, so 5 owed right after it, though the grant at 20 pays them.
    assert debt_printed(run, "a", "10", "--at", "15") == 5
    assert [balance_at(run, "a", t) for t in (14, 15, 20)] == [5, -5, 15]


EXAMPLES = [
    {"type": "grant", "account": "a", "amount": 100, "time": 0, "expiry": 10},
    {"type": "grant", "account": "a", "amount": 50, "time": 2, "expiry": 5},
    {"type": "consume", "account": "a", "amount": 70, "time": 3},
    {"type": "consume", "account": "a", "amount": 90, "time": 8},
    {"type": "grant", "account": "a", "amount": 30, "time": 12, "expiry": 20},
    {"type": "grant", "account": "b", "amount": 50, "time": 0, "expiry": 5},
    {"type": "consume", "account": "b", "amount": 20, "time": 6},
]


def test_the_expiring_credit_examples_answer_the_same_when_imported(
    run: Run, tmp_path: Path, db: str
) -> None:
    path = imported(
        run, tmp_path / "examples.jsonl", "".join(json.dumps(e) + "\n" for e in EXAMPLES)
    )
    assert [balance_at(run, "a", t) for t in (4, 8, 12)] == [80, -10, 20]
    assert [balance_at(run, "b", t) for t in (4, 5, 6)] == [50, 0, -20]
    assert run("import", str(path)).exit_code == 0
    assert journal_head(db) == len(EXAMPLES)


JOBS = [
    {"type": "account", "account": "a"},
    {"type": "grant", "account": "a", "amount": 10, "time": 0},
    {"type": "submit", "account": "a", "job": "j1", "cost": 8, "priority": 1, "time": 1},
    {"type": "submit", "account": "a", "job": "j2", "cost": 5, "priority": 9, "time": 2},
    {"type": "start", "job": "j1", "time": 3},
    {"type": "complete", "job": "j1", "success": False, "time": 4},
    {"type": "submit", "account": "a", "job": "j3", "cost": 3, "priority": 1, "time": 5},
    {"type": "submit", "account": "a", "job": "j4", "cost": 3, "priority": 1, "time": 5},
    {"type": "cancel", "job": "j3", "time": 6},
    {"type": "cancel", "job": "j3", "time": 7},
]


def test_the_scheduler_examples_answer_the_same_when_imported(run: Run, tmp_path: Path) -> None:
    imported(run, tmp_path / "jobs.jsonl", "".join(json.dumps(e) + "\n" for e in JOBS))
    listing = as_json(run("jobs", "--json"))
    assert isinstance(listing, dict)
    states = {j["job"]: (j["state"], j["charged"]) for j in listing["jobs"]}
    # j2 could not be paid (8 of 10 held); a failed job is charged nothing; cancelling
    # j3 twice released its 3 once.
    assert states == {
        "j1": ("failed", 0),
        "j2": ("rejected", None),
        "j3": ("cancelled", None),
        "j4": ("pending", None),
    }
    answer = as_json(run("balance", "a", "--json"))
    assert isinstance(answer, dict)
    assert (answer["balance"], answer["reserved"], answer["available"]) == (10, 3, 7)
