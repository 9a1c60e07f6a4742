"""balance, statement, explain, revisions, replay and verify on a small hand-made month."""

from __future__ import annotations

import csv
import io
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import LATE, Run, as_json, db_path, error_lines, imported, tamper


def _late(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    path.write_text(LATE)
    assert run("import", str(path)).exit_code == 0


def _obj(value: object) -> dict[str, Any]:
    assert isinstance(value, dict)
    return value


# -- balance -------------------------------------------------------------------------------


def test_balance_json_has_the_contract_keys(run: Run, small: Path) -> None:
    b = _obj(as_json(run("balance", "b", "--json")))
    assert b == {"account": "b", "balance": -10, "available": -10, "reserved": 0,
                 "debt": 10, "pools": {"general": -10}, "at": 11, "as_known_at": 12}


def test_balance_at_an_event_time(run: Run, small: Path) -> None:
    at5 = _obj(as_json(run("balance", "a", "--at", "5", "--json")))
    assert (at5["balance"], at5["reserved"], at5["available"]) == (80, 8, 72)
    assert sum(at5["pools"].values()) == at5["balance"]
    at9 = _obj(as_json(run("balance", "a", "--at", "9", "--json")))
    assert (at9["balance"], at9["reserved"], at9["pools"]["h100"]) == (76, 0, 76)
    latest = _obj(as_json(run("balance", "a", "--json")))
    assert latest["balance"] == 0  # the h100 grant expired at t=10


def test_balance_as_known_at_a_position(run: Run, small: Path, tmp_path: Path) -> None:
    _late(run, tmp_path)
    before = _obj(as_json(run("balance", "a", "--at", "4", "--as-known-at", "12", "--json")))
    after = _obj(as_json(run("balance", "a", "--at", "4", "--json")))
    assert (before["balance"], before["as_known_at"]) == (80, 12)
    assert (after["balance"], after["as_known_at"]) == (120, 13)
    assert after["pools"] == {"general": 20, "h100": 100}
    known_now = _obj(as_json(run("balance", "a", "--at", "4", "--as-known-at",
                                 "2100-01-01T00:00Z", "--json")))
    assert known_now["as_known_at"] == 13
    # Before anything was recorded there is nothing to answer from: said, not zeros.
    known_never = run("balance", "a", "--as-known-at", "2000-01-01", "--json")
    assert known_never.exit_code == 2
    assert "nothing was recorded yet at 2000-01-01" in known_never.stderr
    past = run("balance", "a", "--as-known-at", "14")
    assert past.exit_code == 2
    assert "position 14 is past the journal's head 13" in past.stderr


def test_balance_of_one_pool(run: Run, small: Path) -> None:
    result = _obj(as_json(run("balance", "a", "--at", "5", "--pool", "h100", "--json")))
    assert (result["pool"], result["pool_balance"], result["balance"]) == ("h100", 80, 80)
    text = run("balance", "a", "--at", "5", "--pool", "h100")
    assert "h100" in text.stdout and "80" in text.stdout


POOLS_PAID_OFF = """\
{"type": "grant", "account": "used-up", "amount": 10, "time": 1, "pool": "h100"}
{"type": "consume", "account": "used-up", "amount": 10, "time": 2, "pool": "h100"}
{"type": "consume", "account": "paid-by-general", "amount": 10, "time": 1, "pool": "h100"}
{"type": "grant", "account": "paid-by-general", "amount": 20, "time": 2}
{"type": "consume", "account": "paid-by-own", "amount": 10, "time": 1, "pool": "h100"}
{"type": "grant", "account": "paid-by-own", "amount": 10, "time": 2, "pool": "h100"}
{"type": "grant", "account": "drawn-from-general", "amount": 20, "time": 1}
{"type": "consume", "account": "drawn-from-general", "amount": 5, "time": 2, "pool": "h100"}
"""


def test_a_pool_the_account_used_stays_listed_at_zero_however_it_was_paid(
        run: Run, tmp_path: Path) -> None:
    """A pool used up, a pool whose debt a general grant or its own grant paid, and a
    pool used only from general credits: each is listed, at 0, by balance and accounts."""
    imported(run, tmp_path / "pools.jsonl", POOLS_PAID_OFF)
    want = {"used-up": {"h100": 0}, "paid-by-general": {"general": 10, "h100": 0},
            "paid-by-own": {"h100": 0}, "drawn-from-general": {"general": 15, "h100": 0}}
    for account, pools in want.items():
        assert _obj(as_json(run("balance", account, "--json")))["pools"] == pools, account
        one = run("balance", account, "--pool", "h100")
        assert one.exit_code == 0 and one.stderr == "", account  # no "is it a typo?"
    rows = _obj(as_json(run("accounts", "--json")))
    assert {row["account"]: row["pools"] for row in rows["accounts"]} == want
    assert rows["totals"]["pools"] == {"general": 25, "h100": 0}
    table = run("accounts").stdout
    assert "h100" in table and "general" in table


def test_a_pool_typo_names_the_pools_as_listed(run: Run, tmp_path: Path) -> None:
    imported(run, tmp_path / "pools.jsonl", """\
{"type": "grant", "account": "a", "amount": 10, "time": 1, "pool": "h100", "priority": 10}
""")
    result = run("balance", "a", "--pool", "a100")
    assert result.exit_code == 0
    assert error_lines(result) == [
        "gpu-credits: warning: account 'a' has never had a grant, usage or debt in pool "
        "'a100' (its pools: general, h100); is it a typo?"]


def test_balance_human_output_and_iso_times(run: Run, small: Path) -> None:
    result = run("balance", "a", "--at", "9")
    assert result.exit_code == 0
    assert "balance" in result.stdout and "76" in result.stdout


def test_unknown_account_names_the_known_ones(run: Run, small: Path) -> None:
    for command in (["balance", "x"], ["statement", "x"], ["explain", "x"]):
        result = run(*command)
        assert result.exit_code == 2
        assert error_lines(result) == ["gpu-credits: error: unknown account 'x' (known: a, b)"]


def test_an_unknown_account_spelled_otherwise_names_the_ones_held(run: Run,
                                                                 tmp_path: Path) -> None:
    # Names are compared exactly; a miss only by letter case, spaces or Unicode form says
    # which names it may have meant, and two names that look alike (composed and
    # decomposed) are told apart in the list.
    lines = [{"type": "grant", "account": name, "amount": 1, "time": 0}
             for name in ("Acme Labs", "caf\u00e9", "cafe\u0301", *(f"t{i}" for i in range(30)))]
    imported(run, tmp_path / "n.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    missed = run("balance", "acme  labs")
    assert missed.exit_code == 2
    assert error_lines(missed)[0].startswith(
        "gpu-credits: error: unknown account 'acme  labs'; the journal holds 'Acme Labs', "
        "spelled otherwise only in letter case, spaces or Unicode form (known: Acme Labs, ")
    both = error_lines(run("statement", "CAF\u00c9"))[0]
    assert "holds 'cafe\\u0301', 'caf\u00e9', spelled otherwise" in both, both
    assert "(known: Acme Labs, 'cafe\\u0301', caf\u00e9, t0," in both, both
    assert "spelled otherwise" not in run("balance", "nobody").stderr


@pytest.mark.parametrize("checkpoint", [False, True], ids=["folded", "from-a-checkpoint"])
def test_an_empty_account_name_is_an_unknown_account(run: Run, small: Path,
                                                    checkpoint: bool) -> None:
    # statement, explain and jobs --account passed the empty name to the journal, whose
    # refusal ("stream must be a non-empty str") named a word no user gave.
    if checkpoint:
        assert run("replay").exit_code == 0
    for command in (["balance", ""], ["statement", ""], ["explain", ""],
                    ["jobs", "--account", ""]):
        result = run(*command)
        assert result.exit_code == 2
        assert error_lines(result) == ["gpu-credits: error: unknown account '' (known: a, b)"]


def test_an_account_named_only_by_rejected_submits_has_no_balance(run: Run,
                                                                 tmp_path: Path) -> None:
    """A submit naming an account that does not exist is rejected, and makes none:
    `balance` does not know it, as `accounts` lists it not; the submits it names stay
    in its statement and in the jobs report, for the audit trail."""
    path = tmp_path / "nobody.jsonl"
    path.write_text('{"type": "grant", "account": "a", "amount": 10, "time": 0}\n'
                    '{"type": "submit", "account": "nobody", "job": "j1", "cost": 5, '
                    '"priority": 1, "time": 10}\n')
    assert run("import", str(path)).exit_code == 0
    result = run("balance", "nobody")
    assert result.exit_code == 2
    assert error_lines(result) == ["gpu-credits: error: unknown account 'nobody' (known: a)"]
    assert [a["account"] for a in _obj(as_json(run("accounts", "--json")))["accounts"]] == ["a"]
    statement = run("statement", "nobody")
    assert statement.exit_code == 0 and "rejected: unknown account 'nobody'" in statement.stdout


def test_bad_as_known_at(run: Run, small: Path) -> None:
    result = run("balance", "a", "--as-known-at", "soon")
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    # It names the word given and both forms the option takes.
    for word in ("'soon'", "position", "ISO-8601"):
        assert word in result.stderr, result.stderr



@pytest.mark.parametrize("bad", ["-1", "soon"])
def test_a_bad_as_known_at_names_the_positions_that_answer(run: Run, small: Path,
                                                           bad: str) -> None:
    # Position 0 is refused on a journal that holds events (nothing was recorded yet):
    # the error for another bad word must not offer it as valid.
    result = run("balance", "a", "--as-known-at", bad)
    assert result.exit_code == 2 and len(error_lines(result)) == 1
    assert "known positions are 1 to 12" in result.stderr, result.stderr
    assert "0 or more" not in result.stderr


# -- statement -----------------------------------------------------------------------------


def test_statement_json_lines_and_running_balance(run: Run, small: Path) -> None:
    st = _obj(as_json(run("statement", "a", "--json")))
    kinds = [(line["type"], line["change"], line["balance"], line["reserved"])
             for line in st["lines"]]
    assert kinds == [
        ("account", 0, 0, 0), ("grant", 100, 100, 0), ("grant", 50, 150, 0),
        ("consume", -70, 80, 0), ("submit", 0, 80, 8), ("submit", 0, 80, 8),
        ("start", 0, 80, 8), ("complete", -4, 76, 0), ("expire", -76, 0, 0),
    ]
    assert st["lines"][5]["status"] == "rejected"
    assert "only 0 available" in st["lines"][5]["detail"]
    consume = st["lines"][3]
    assert [a for _, a in consume["grants"]] == [50, 20]
    assert st["lines"][-1]["time"] == 10  # the expiry, at the grant's expiry time
    assert st["closing"] == {"balance": 0, "reserved": 0}
    assert st["opening"] is None


def test_statement_debt_and_rejection(run: Run, small: Path) -> None:
    st = _obj(as_json(run("statement", "b", "--json")))
    last = st["lines"][-1]
    assert (last["type"], last["change"], last["balance"], last["debt_created"]) == (
        "consume", -40, -10, 10)
    assert st["lines"][2]["status"] == "rejected"


def test_statement_from_opens_with_a_balance(run: Run, small: Path) -> None:
    st = _obj(as_json(run("statement", "a", "--from", "5", "--json")))
    assert (st["opening"]["balance"], st["opening"]["reserved"]) == (80, 8)
    assert [line["type"] for line in st["lines"]] == ["start", "complete", "expire"]
    to = _obj(as_json(run("statement", "a", "--to", "9", "--json")))
    assert to["closing"] == {"balance": 76, "reserved": 0}


def test_statement_closing_equals_balance_after_late_events(run: Run, small: Path,
                                                            tmp_path: Path) -> None:
    _late(run, tmp_path)
    st = _obj(as_json(run("statement", "a", "--json")))
    balance = _obj(as_json(run("balance", "a", "--json")))
    assert st["closing"] == {"balance": balance["balance"], "reserved": balance["reserved"]}
    assert not [line for line in st["lines"] if line["type"] == "adjust"]
    expiries = [(line["time"], line["change"]) for line in st["lines"]
                if line["type"] == "expire"]
    assert expiries == [(5, -7), (9, -4), (10, -100)]
    running = 0
    for line in st["lines"]:
        running += line["change"]
        assert line["balance"] == running


def test_statement_csv_reconciles(run: Run, small: Path) -> None:
    result = run("statement", "a", "--csv")
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert sum(int(r["change"]) for r in rows) == int(rows[-1]["balance"]) == 0
    assert rows[1]["type"] == "grant" and rows[1]["time"] == "0"
    with_opening = list(csv.DictReader(io.StringIO(run("statement", "a", "--csv", "--from",
                                                       "5").stdout)))
    assert with_opening[0]["type"] == "opening" and with_opening[0]["balance"] == "80"


def test_statement_table(run: Run, small: Path) -> None:
    result = run("statement", "a")
    assert result.exit_code == 0
    assert "Statement of a" in result.stdout and "closing" in result.stdout
    # The subtotals say how they add up: each kind's sign, then the closing balance.
    subtotals = [line.split() for line in result.stdout.split("Subtotals")[1].splitlines()
                 if line.strip()]
    assert subtotals == [
        ["opening", "balance", "0"], ["granted", "+", "150"], ["used", "-", "78"],
        ["refunded", "+", "4"], ["expired", "unused", "-", "76"], ["adjusted", "+", "0"],
        ["voided", "-", "0"], ["closing", "balance", "=", "0"]]


def test_statement_shows_memos_in_table_and_csv(run: Run, tmp_path: Path) -> None:
    assert run("grant", "m", "100", "--at", "0", "--memo", "PO 4411", "--id", "po").exit_code == 0
    assert run("consume", "m", "5", "--at", "1", "--memo", "run 17").exit_code == 0
    assert run("consume", "m", "1", "--at", "2").exit_code == 0
    table = run("statement", "m")
    assert table.exit_code == 0
    assert "memo: PO 4411" in table.stdout and "memo: run 17" in table.stdout
    rows = list(csv.DictReader(io.StringIO(run("statement", "m", "--csv").stdout)))
    assert [r["detail"].partition("; memo: ")[2] for r in rows] == ["PO 4411", "run 17", ""]


def _grant_pairs(cell: str) -> list[tuple[str, int]]:
    """The `grants` cell read as documented: space-separated `grant:credits`, a grant id
    holding a space, a quote or a backslash written as a JSON string (which a shell-style
    split reads back)."""
    return [(grant, int(credits))
            for grant, _, credits in (pair.rpartition(":") for pair in shlex.split(cell))]


def test_statement_csv_grants_read_back_whatever_the_grant_ids(run: Run,
                                                               tmp_path: Path) -> None:
    # Grant ids are printable text: a space, a colon or a quote in one must not make the
    # cell read as other grants than those that paid.
    ids = ["PO 4411", "a:b", '"q"', "it's", "a\\b", "plain", "x \\ y"]
    for expiry, grant_id in enumerate(ids, 10):
        assert run("grant", "g", "10", "--at", "0", "--expiry", str(expiry),
                   "--id", grant_id).exit_code == 0
    assert run("consume", "g", "65", "--at", "1").exit_code == 0
    rows = list(csv.DictReader(io.StringIO(run("statement", "g", "--csv").stdout)))
    assert _grant_pairs(rows[-1]["grants"]) == [
        ("PO 4411", 10), ("a:b", 10), ('"q"', 10), ("it's", 10), ("a\\b", 10),
        ("plain", 10), ("x \\ y", 5)]
    assert rows[-1]["grants"].startswith('"PO 4411":10 a:b:10 ')


def test_statement_from_after_the_last_event_opens_with_the_balance_then(
        run: Run, tmp_path: Path) -> None:
    assert run("grant", "e", "100", "--at", "0", "--expiry", "1000").exit_code == 0
    assert run("consume", "e", "1", "--at", "60").exit_code == 0
    st = _obj(as_json(run("statement", "e", "--from", "2000", "--json")))
    at = _obj(as_json(run("balance", "e", "--at", "2000", "--json")))
    assert (st["from"], st["to"], at["balance"]) == (2000, 2000, 0)
    assert st["opening"]["balance"] == 0 and st["lines"] == []
    rows = list(csv.DictReader(io.StringIO(run("statement", "e", "--from", "2000",
                                               "--csv").stdout)))
    assert [(r["type"], r["balance"]) for r in rows] == [("opening", "0")]


# Grant 10, a job holding 8, a usage of 5 (2 from the grant, 3 owed), the job cancelled:
# its 8 credits come back and pay the 3 owed first.
RELEASED_IN_DEBT = """\
{"type": "grant", "account": "d", "amount": 10, "time": 0, "expiry": 1000, "id": "g1"}
{"type": "submit", "account": "d", "job": "j1", "cost": 8, "priority": 1, "time": 1}
{"type": "consume", "account": "d", "amount": 5, "time": 2, "id": "u1"}
{"type": "cancel", "job": "j1", "time": 3, "id": "x1"}
"""


def test_statement_says_the_debt_a_release_paid_in_every_form(run: Run,
                                                             tmp_path: Path) -> None:
    imported(run, tmp_path / "debt.jsonl", RELEASED_IN_DEBT)
    assert _obj(as_json(run("balance", "d", "--json")))["debt"] == 0
    words = "job j1 cancelled: released 8; 3 paid debt first (g1 3)"
    lines = _obj(as_json(run("statement", "d", "--json")))["lines"]
    assert (lines[-1]["event_id"], lines[-1]["debt_paid"], lines[-1]["detail"]) == (
        "x1", 3, words)
    assert sum(line["debt_created"] - line["debt_paid"] for line in lines) == 0
    rows = list(csv.DictReader(io.StringIO(run("statement", "d", "--csv").stdout)))
    assert (rows[-1]["debt_paid"], rows[-1]["detail"]) == ("3", words)
    assert words in run("statement", "d").stdout
    (g1,) = _obj(as_json(run("explain", "d", "--json")))["grants"]
    assert (g1["paid_debt"], g1["used"], g1["remaining"]) == (3, 2, 5)


def test_explain_lists_each_release_whose_credits_paid_debt(run: Run,
                                                            tmp_path: Path) -> None:
    # Beside the grant's total debt paid, the releases that paid it: here the cancel's 3,
    # and none of the 4 that g2 paid on arrival.
    imported(run, tmp_path / "debt.jsonl", RELEASED_IN_DEBT + """\
{"type": "consume", "account": "d", "amount": 9, "time": 4, "id": "u2"}
{"type": "grant", "account": "d", "amount": 6, "time": 5, "id": "g2"}
""")
    ex = _obj(as_json(run("explain", "d", "--json")))
    g1, g2 = ex["grants"]
    assert list(g1) == ["grant", "time", "position", "pool", "amount", "expiry",
                        "paid_debt", "used", "uses", "expired", "held", "remaining",
                        "released_to_debt", "priority", "refill"]
    assert (g1["paid_debt"], g1["used"], g1["remaining"]) == (3, 7, 0)
    assert [{k: r[k] for k in ("time", "position", "event_id", "kind", "amount", "job")}
            for r in g1["released_to_debt"]] == [
        {"time": 3, "position": 4, "event_id": "x1", "kind": "release", "amount": 3,
         "job": "j1"}]
    assert (g2["paid_debt"], g2["released_to_debt"]) == (4, [])
    text = run("explain", "d").stdout
    assert "Released credits that paid debt" in text
    assert re.search(r"x1\s+job j1: 3 paid debt first \(g1 3\)", text)


def test_statement_from_after_to_is_bad_input(run: Run, small: Path) -> None:
    result = run("statement", "a", "--from", "9", "--to", "5")
    assert result.exit_code == 2 and result.stdout == ""
    assert "--from 9 is after --to 5" in result.stderr and len(error_lines(result)) == 1
    # One instant is a range: its opening balance and what happened then.
    assert run("statement", "a", "--from", "5", "--to", "5").exit_code == 0


# -- explain -------------------------------------------------------------------------------


def test_explain_account_lineage(run: Run, small: Path) -> None:
    ex = _obj(as_json(run("explain", "a", "--json")))
    grants = {g["position"]: g for g in ex["grants"]}  # lines 3 and 4 of the file
    g1, g2 = grants[3], grants[4]
    assert (g1["amount"], g1["used"], g1["expired"], g1["remaining"]) == (100, 24, 76, 0)
    assert [(u["kind"], u["amount"], u["job"]) for u in g1["uses"]] == [
        ("consume", 20, None), ("job", 4, "j1")]
    assert (g2["used"], g2["expired"]) == (50, 0)
    assert [s["amount"] for s in ex["spends"]] == [70, 4]
    assert [r["job"] for r in ex["rejections"]] == ["j2"]
    text = run("explain", "a")
    assert text.exit_code == 0 and "Grants and what became of them" in text.stdout


def test_explain_job_rejected_with_figures(run: Run, small: Path) -> None:
    ex = _obj(as_json(run("explain", "--job", "j3", "--json")))
    assert (ex["state"], ex["accepted"], ex["account"]) == ("rejected", False, "b")
    assert "costs 500, only 30 available" in ex["reason"]
    text = run("explain", "--job", "j3")
    assert "rejected at submit" in text.stdout


def test_explain_job_charge_and_payers(run: Run, small: Path) -> None:
    ex = _obj(as_json(run("explain", "--job", "j1", "--json")))
    assert (ex["state"], ex["charge"], ex["released"]) == ("failed", 4, 4)
    assert [a for _, a in ex["paid_by"]] == [4]
    assert [e["type"] for e in ex["events"]] == ["submit", "start", "complete"]


def test_explain_job_says_what_it_released_lapsed(run: Run, tmp_path: Path) -> None:
    # Held 6 of g1 (expiring at 20) and 4 of g2; failed at 30, all refunded: g1's 6 lapse
    # as they are released, and g3's unused 5 expire at that moment too (not the job's).
    imported(run, tmp_path / "lapse.jsonl", "".join(json.dumps(e) + "\n" for e in [
        {"type": "grant", "id": "g1", "account": "a", "amount": 50, "expiry": 20, "time": 0},
        {"type": "consume", "account": "a", "amount": 44, "time": 1},
        {"type": "grant", "id": "g2", "account": "a", "amount": 40, "time": 2},
        {"type": "submit", "account": "a", "job": "j", "cost": 10, "priority": 1, "time": 3},
        {"type": "start", "job": "j", "time": 4},
        {"type": "grant", "id": "g3", "account": "a", "amount": 5, "expiry": 25, "time": 5},
        {"type": "complete", "job": "j", "success": False, "refund_fraction": 1.0,
         "time": 30}]))
    ex = _obj(as_json(run("explain", "--job", "j", "--json")))
    assert (ex["charge"], ex["released"], ex["lapsed"]) == (0, 10, 6)
    text = run("explain", "--job", "j").stdout
    assert "released 10 (6 lapsed: their grant had expired or was voided)" in text


def test_explain_pending_job_says_why(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "queue.jsonl"
    path.write_text(
        '{"type": "account", "account": "c", "max_running": 1}\n'
        '{"type": "grant", "account": "c", "amount": 100, "time": 0}\n'
        '{"type": "submit", "account": "c", "job": "c1", "cost": 10, "priority": 1, '
        '"time": 1}\n'
        '{"type": "submit", "account": "c", "job": "c2", "cost": 10, "priority": 1, '
        '"time": 2}\n'
        '{"type": "submit", "account": "c", "job": "c3", "cost": 10, "priority": 0, '
        '"time": 2}\n'
        '{"type": "start", "job": "c1", "time": 3}\n')
    assert run("import", str(path)).exit_code == 0
    c3 = _obj(as_json(run("explain", "--job", "c3", "--json")))
    assert c3["state"] == "pending" and c3["ahead"] == 1
    assert "already runs 1 of at most 1" in c3["waiting"]
    c1 = _obj(as_json(run("explain", "--job", "c1", "--json")))
    assert c1["state"] == "running" and c1["held_from"]
    assert c1["waiting"] == "running; 10 credits held until it completes"
    # As known before its start, c1 was next.
    before = _obj(as_json(run("explain", "--job", "c1", "--as-known-at", "3", "--json")))
    assert before["state"] == "pending"
    assert before["waiting"] == "first in line: the next start_next starts it"
    assert "running; 10 credits held until it completes" in run("explain", "--job",
                                                               "c1").stdout


def test_explain_unknown_job(run: Run, small: Path) -> None:
    result = run("explain", "--job", "nope")
    assert result.exit_code == 2
    assert error_lines(result) == ["gpu-credits: error: unknown job 'nope' (no event names it)"]
    long = run("explain", "--job", "j" * 300)
    assert error_lines(long) == [
        f"gpu-credits: error: unknown job '{'j' * 39}... (300 characters) (no event names it)"]


# -- revisions, replay, verify ------------------------------------------------------------


def test_revisions_show_what_the_late_event_changed(run: Run, small: Path,
                                                    tmp_path: Path) -> None:
    assert as_json(run("revisions", "--json")) == []
    assert "no revisions" in run("revisions").stdout
    _late(run, tmp_path)
    rows = as_json(run("revisions", "--json"))
    assert isinstance(rows, list)
    assert {r["late_event_id"] for r in rows} == {"late-grant"}
    assert all(r["late_time"] == 1 for r in rows)
    j2 = next(r for r in rows if r["type"] == "submit" and not r["before"]["ok"])
    assert j2["after"]["ok"] is True
    # Each revised event's account, as `GET /v1/revisions` gives it.
    assert {(r["type"], r["account"]) for r in rows} >= {("submit", "a")}
    assert {r["account"] for r in rows} == {"a"}
    assert "Revisions by late events" in run("revisions").stdout
    # Each outcome before and after, in words: the debt, the charge, the reason refused.
    text = " ".join(run("revisions").stdout.split())
    assert "#5 consume" in text and "ok; debt 0; paid by" in text
    assert "ok; charged 4; paid by" in text
    assert "rejected; job 'j2' costs 5, only 0 available" in text


def test_revisions_of_one_account(run: Run, small: Path, tmp_path: Path) -> None:
    """`--account` keeps the revisions of that account's events, as `GET
    /v1/revisions?account=` does; an account the journal does not name is an error, not
    an empty list."""
    _late(run, tmp_path)
    every = as_json(run("revisions", "--json"))
    assert isinstance(every, list) and every
    assert as_json(run("revisions", "--account", "a", "--json")) == every
    assert as_json(run("revisions", "--account", "b", "--json")) == []
    assert "no revisions of account 'b'" in run("revisions", "--account", "b").stdout
    unknown = run("revisions", "--account", "nobody")
    assert unknown.exit_code == 2
    assert error_lines(unknown) == [
        "gpu-credits: error: unknown account 'nobody' (known: a, b)"]


def test_replay_digest_and_to(run: Run, small: Path) -> None:
    full = _obj(as_json(run("replay", "--json")))
    assert (full["events"], full["revisions"], full["anomalies"]) == (12, 0, 0)
    assert len(full["digest"]) == 64
    assert run("replay").stdout.split()[-1] == full["digest"]
    early = _obj(as_json(run("replay", "--to", "4", "--json")))
    assert early["events"] == 9 and early["digest"] != full["digest"]


def test_verify_ok_then_a_changed_byte(run: Run, small: Path, db: str) -> None:
    ok = run("verify")
    assert ok.exit_code == 0
    assert ok.stdout.startswith("ok:")
    assert _obj(as_json(run("verify", "--json")))["ok"] is True
    tamper(db_path(db), 5, '"amount":70', '"amount":71')
    bad = run("verify")
    assert bad.exit_code == 1
    assert "position 5" in bad.stdout
    assert error_lines(bad) == [
        "gpu-credits: error: verification failed at position 5: hash chain broken at "
        "position 5: its stored hash is not the one its content and its predecessor give: "
        "the record or its hash was altered"]
    report = run("verify", "--json")
    assert report.exit_code == 1


def _terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Make stderr's console a terminal writing into the returned buffer."""
    from rich.console import Console

    from tools import render

    screen = io.StringIO()
    plain = render.console

    def console(*, stderr: bool = False) -> Console:
        if not stderr:
            return plain()
        return Console(file=screen, force_terminal=True, width=100, highlight=False,
                       markup=False, emoji=False)

    monkeypatch.setattr(render, "console", console)
    return screen


def test_verify_shows_each_stage_with_its_count_on_a_terminal(
        run: Run, small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run("replay").exit_code == 0  # a checkpoint to re-derive
    screen = _terminal(monkeypatch)
    assert run("verify").exit_code == 0
    shown = screen.getvalue()
    for stage in ("checking the hash chain", "re-deriving the checkpoints", "replaying"):
        assert stage in shown
    assert "12/12" in shown and "/?" not in shown
    # For a script, nothing but the JSON.
    screen.truncate(0)
    assert run("verify", "--json").exit_code == 0
    assert screen.getvalue() == ""


@pytest.mark.parametrize("command", ["balance", "statement", "explain"])
def test_iso_times_are_accepted(run: Run, small: Path, command: str) -> None:
    # Small integer times are not epoch seconds; ISO dates still parse (to large times).
    args = {"balance": ["balance", "a", "--at", "2026-11-03"],
            "statement": ["statement", "a", "--to", "2026-11-03T12:00Z"],
            "explain": ["explain", "a"]}[command]
    assert run(*args).exit_code == 0


def test_explain_job_says_when_an_account_not_open_at_the_submit_is_opened(
        run: Run, tmp_path: Path) -> None:
    imported(run, tmp_path / "early.jsonl", "\n".join([
        '{"type": "submit", "time": "2026-01-01T00:00:00Z", "account": "a", "job": "j1", '
        '"cost": 5, "priority": 1}',
        '{"type": "account", "time": "2026-01-02T00:00:00Z", "account": "a"}',
    ]) + "\n")
    said = run("explain", "--job", "j1")
    assert said.exit_code == 0, said.stderr
    assert ("rejected at submit: unknown account 'a'; the account is opened later, at "
            "2026-01-02T00:00:00Z") in said.stdout
    told = as_json(run("explain", "--job", "j1", "--json"))
    assert isinstance(told, dict) and told["account_opened_at"] == 1767312000
    before = run("explain", "--job", "j1", "--as-known-at", "1")
    assert "rejected at submit: unknown account 'a'\n" in before.stdout
    assert as_json(run("explain", "--job", "j1", "--json", "--as-known-at", "1")
                   ) == {**told, "account_opened_at": None}
