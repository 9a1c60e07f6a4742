"""The correction commands: grant, consume, adjust, void, reverse; errors append nothing."""

from __future__ import annotations

import json

import pytest
from cli_helpers import Run, error_lines, journal_head


def _balance(run: Run, account: str, *extra: str) -> int:
    result = run("balance", account, "--json", *extra)
    assert result.exit_code == 0, result.stderr
    return int(json.loads(result.stdout)["balance"])


def _json(run: Run, *args: str) -> dict[str, object]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    out: dict[str, object] = json.loads(result.stdout)
    return out


def test_grant_and_consume_record_one_event_each(run: Run, db: str) -> None:
    granted = _json(run, "grant", "acme", "100", "--at", "1", "--expiry", "50",
                    "--priority", "10", "--memo", "PO 4411", "--id", "g1")
    assert (granted["id"], granted["amount"], granted["priority"]) == ("g1", 100, 10)
    used = _json(run, "consume", "acme", "130", "--at", "2", "--memo", "run 17")
    assert used["debt"] == 30
    human = run("consume", "acme", "5", "--at", "3")
    assert human.exit_code == 0 and "debt after it: 35" in human.stdout
    assert journal_head(db) == 3
    exported = [json.loads(line) for line in run("export").stdout.splitlines()]
    assert exported[0]["memo"] == "PO 4411" and exported[0]["priority"] == 10
    statement = _json(run, "statement", "acme")
    assert [line["memo"] for line in statement["lines"]][:2] == ["PO 4411", "run 17"]
    # A grant to an account in debt pays the debt first, and says how much.
    paying = run("grant", "acme", "50", "--at", "4", "--id", "g2")
    assert paying.exit_code == 0, paying.stderr
    assert paying.stdout.endswith(", no expiry; 35 paid debt first\n"), paying.stdout
    assert "paid debt first" not in run("grant", "acme", "1", "--at", "5").stdout


def test_a_retry_with_the_same_id_appends_nothing(run: Run, db: str) -> None:
    for _ in range(2):
        assert run("grant", "acme", "100", "--at", "1", "--id", "g1").exit_code == 0
    assert journal_head(db) == 1


def test_a_retry_of_a_far_event_taken_with_allow_far_times_needs_it_no_more(
        run: Run, db: str) -> None:
    """The far-time rule is for new events: the retry of one recorded with the flag
    prints what the first call printed, and the id with another event is refused."""
    far = "1796083200000"
    first = run("consume", "acme", "1", "--at", far, "--allow-far-times", "--id", "u-ms",
                "--json")
    assert first.exit_code == 0, first.stderr
    again = run("consume", "acme", "1", "--at", far, "--id", "u-ms", "--json")
    assert (again.exit_code, again.stdout) == (0, first.stdout), again.stderr
    other = run("consume", "acme", "2", "--at", far, "--id", "u-ms")
    assert other.exit_code == 2 and "u-ms" in other.stderr
    new = run("consume", "acme", "1", "--at", far, "--id", "u-new")
    assert new.exit_code == 2 and "2200-01-01" in new.stderr
    assert journal_head(db) == 1


def test_a_time_without_at_is_never_before_the_latest_event(run: Run) -> None:
    run("grant", "acme", "100", "--at", "4000000000")
    used = _json(run, "consume", "acme", "10")
    assert used["time"] == 4000000000


def test_adjust_takes_a_negative_amount_and_requires_a_reason(run: Run, db: str) -> None:
    run("grant", "acme", "10", "--at", "1")
    debit = _json(run, "adjust", "acme", "-25", "--reason", "double-billed run 17",
                  "--at", "2")
    assert (debit["amount"], debit["debt"]) == (-25, 15)
    credit = _json(run, "adjust", "acme", "40", "--reason", "goodwill", "--at", "3")
    assert credit["amount"] == 40
    assert _balance(run, "acme") == 25
    # The credit paid the debit's debt first, and its statement line says so.
    (line,) = [line for line in _json(run, "statement", "acme")["lines"]
               if line["time"] == 3]
    assert line["detail"] == "adjustment of +40 credits: goodwill; 15 paid debt first", line
    missing = run("adjust", "acme", "-5")
    assert missing.exit_code == 2 and "--reason" in missing.stderr
    zero = run("adjust", "acme", "0", "--reason", "nothing")
    assert zero.exit_code == 2 and "must not be 0" in zero.stderr
    assert journal_head(db) == 3


def test_void_stops_the_rest_of_a_grant(run: Run, db: str) -> None:
    run("grant", "acme", "100", "--at", "0", "--id", "g1")
    run("consume", "acme", "30", "--at", "2")
    voided = _json(run, "void", "g1", "--at", "6", "--reason", "contract cancelled")
    assert voided["voided"] == 70
    assert _balance(run, "acme", "--at", "5") == 70
    assert _balance(run, "acme", "--at", "6") == 0
    again = run("void", "g1", "--at", "7")
    assert again.exit_code == 2 and "already voided" in again.stderr
    assert journal_head(db) == 3


def test_credits_a_job_releases_after_its_grant_was_voided_lapse_and_say_so(
        run: Run) -> None:
    jobs = ('{"type": "grant", "account": "acme", "amount": 100, "time": 0, "id": "g1"}\n'
            '{"type": "submit", "account": "acme", "job": "j1", "cost": 40, "priority": 1, '
            '"time": 1}\n'
            '{"type": "start", "job": "j1", "time": 2}\n')
    assert run("import", "-", input=jobs).exit_code == 0
    assert run("void", "g1", "--at", "5").exit_code == 0
    failed = ('{"type": "complete", "job": "j1", "success": false, "time": 6, '
              '"refund_fraction": 1}\n')
    assert run("import", "-", input=failed).exit_code == 0
    details = [line["detail"] for line in _json(run, "statement", "acme")["lines"]
               if line["time"] == 6]
    assert any("released by job j1 after the grant was voided at" in d for d in details), (
        details)


def test_a_void_timed_before_its_grant_voids_all_of_it_and_says_so(run: Run) -> None:
    run("grant", "acme", "100", "--at", "50", "--id", "g1")
    run("grant", "acme", "30", "--at", "0", "--id", "g0")
    said = run("void", "g1", "--at", "10", "--reason", "contract cancelled", "--id", "v1")
    assert "takes effect later" in said.stdout and "none of its 100 credits" in said.stdout
    assert _json(run, "void", "g1", "--at", "10", "--reason", "contract cancelled",
                 "--id", "v1")["voided"] == 100
    assert _balance(run, "acme", "--at", "60") == 30
    statement = _json(run, "statement", "acme")
    lines = statement["lines"]
    assert isinstance(lines, list)
    # The grant's line adds it, the next takes it all away as voided (not expired, and
    # not "released by job None").
    after = [line for line in lines if line["time"] == 50]
    assert [(line["type"], line["change"]) for line in after] == [("grant", 100),
                                                                  ("void", -100)]
    assert "voided at" in after[1]["detail"] and "job" not in after[1]["detail"]
    subtotals = statement["subtotals"]
    assert isinstance(subtotals, dict)
    assert (subtotals["granted"], subtotals["voided"], subtotals["expired"]) == (130, 100, 0)
    explained = _json(run, "explain", "acme")
    g1 = next(g for g in explained["grants"] if g["grant"] == "g1")  # type: ignore[attr-defined]
    assert (g1["paid_debt"], g1["expired"], g1["remaining"]) == (0, 100, 0)


@pytest.mark.parametrize(("target", "message"), [("nope", "no event 'nope'"),
                                                  ("u1", "not a grant")])
def test_void_of_anything_but_a_grant_is_refused(run: Run, db: str, target: str,
                                                 message: str) -> None:
    run("consume", "acme", "30", "--at", "2", "--id", "u1")
    result = run("void", target)
    assert result.exit_code == 2 and message in result.stderr
    assert journal_head(db) == 1


def test_reverse_takes_an_event_out_and_a_second_reverse_puts_it_back(run: Run,
                                                                      db: str) -> None:
    run("grant", "acme", "100", "--at", "0")
    run("consume", "acme", "1", "--at", "1796083200000", "--allow-far-times", "--id", "u-991")
    assert _balance(run, "acme", "--at", "50") == 100
    reversed_ = _json(run, "reverse", "u-991", "--reason", "timestamp was in milliseconds",
                      "--id", "r1")
    assert reversed_["event"] == "u-991"
    # Live decisions no longer move to the reversed event's time.
    assert int(_json(run, "consume", "acme", "1")["time"]) < 1796083200000
    twice = run("reverse", "u-991", "--reason", "again")
    assert twice.exit_code == 2 and "already reversed" in twice.stderr
    assert run("reverse", "r1", "--reason", "it was right").exit_code == 0
    assert journal_head(db) == 5


def test_a_live_decision_after_a_far_event_names_that_event(run: Run, db: str) -> None:
    run("consume", "acme", "1", "--at", "1796083200000", "--allow-far-times", "--id", "u-ms")
    result = run("grant", "acme", "5")
    assert result.exit_code == 2
    assert ("latest event time on the timeline, 1796083200000 (position 1)" in result.stderr
            and "reverse that event" in result.stderr)
    assert journal_head(db) == 1
    assert run("grant", "acme", "5", "--at", "10").exit_code == 0
    assert run("grant", "acme", "5", "--allow-far-times").exit_code == 0
    assert journal_head(db) == 3


def test_far_times_are_refused_unless_allowed(run: Run, db: str) -> None:
    result = run("grant", "acme", "100", "--at", "1796083200000")
    assert result.exit_code == 2 and "probably milliseconds" in result.stderr
    result = run("consume", "acme", "1", "--at", "1796083200000")
    assert result.exit_code == 2
    assert journal_head(db) == 0
    # An expiry may be later.
    assert run("grant", "acme", "100", "--at", "1", "--expiry", "99999999999").exit_code == 0


@pytest.mark.parametrize("args", [
    ("grant", "acme", "0"),
    ("grant", "acme", "-5"),
    ("grant", "acme", "5", "--priority", "101"),
    ("grant", "acme", "5", "--at", "10", "--expiry", "10"),
    ("consume", "acme", "-5"),
    ("reverse", "nope", "--reason", "x"),
    ("reverse", "nope"),
])
def test_bad_input_exits_2_and_appends_nothing(run: Run, db: str, args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.count("\n") == 1
    assert journal_head(db) == 0


def test_statement_and_explain_show_each_correction(run: Run) -> None:
    for args in (("grant", "acme", "100", "--at", "0", "--id", "g1"),
                 ("grant", "acme", "50", "--at", "0", "--id", "g2", "--priority", "10"),
                 ("consume", "acme", "30", "--at", "2", "--id", "u1"),
                 ("adjust", "acme", "-25", "--reason", "dup", "--at", "3", "--id", "x1"),
                 ("void", "g1", "--at", "6", "--id", "v1"),
                 ("consume", "acme", "500", "--at", "7", "--id", "u2"),
                 ("reverse", "u2", "--reason", "wrong", "--id", "r1")):
        assert run(*args).exit_code == 0
    lines = {line["event_id"]: line for line in _json(run, "statement", "acme")["lines"]}
    assert lines["u1"]["grants"] == [["g2", 30]]  # priority 10 first
    assert (lines["x1"]["change"], lines["v1"]["change"]) == (-25, -95)
    assert (lines["u2"]["change"], lines["u2"]["status"]) == (0, "reversed")
    assert not [line for line in lines.values() if "unexplained" in line["detail"]]
    explained = _json(run, "explain", "acme")
    g1 = next(g for g in explained["grants"] if g["grant"] == "g1")
    assert (g1["expired"], g1["remaining"]) == (95, 0)
    assert [s["event_id"] for s in explained["spends"]] == ["u1", "x1"]


@pytest.mark.parametrize(("args", "named"), [
    (("grant", "acme", "-5"), ["-5", "positive"]),
    (("grant", "acme", "1.5"), ["'1.5'", "1 to 9007199254740991"]),
    (("grant", "acme", "10.0"), ["'10.0'", "1 to 9007199254740991"]),
    (("grant", "acme", "1_000"), ["'1_000'", "1 to 9007199254740991"]),
    (("grant", "acme", "+5"), ["'+5'", "1 to 9007199254740991"]),
    (("grant", "acme", "abc"), ["'abc'", "1 to 9007199254740991"]),
    (("grant", "acme", "5", "--priority", "x"), ["--priority", "'x'", "0 to 100"]),
    (("grant", "acme", "5", "--priority", "1e1"), ["--priority", "'1e1'", "0 to 100"]),
    (("consume", "acme", "２"), ["'２'", "1 to 9007199254740991"]),
    (("adjust", "acme", "-2.5", "--reason", "r"), ["'-2.5'", "(< 0, e.g. -25)"]),
    (("demo", "--seed", "x"), ["--seed", "'x'"]),
])
def test_a_number_that_is_no_integer_is_named_with_what_is_valid(
        run: Run, db: str, args: tuple[str, ...], named: list[str]) -> None:
    # Integers are read as import reads them (ASCII digits after an optional -): the
    # error names the word given and what the argument takes, on one line.
    result = run(*args)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.count("\n") == 1
    for part in named:
        assert part in result.stderr, result.stderr
    assert journal_head(db) == 0


@pytest.mark.parametrize("command", ["grant", "consume", "adjust"])
def test_a_mistyped_option_is_named_as_one_with_the_options_it_may_mean(
        run: Run, db: str, command: str) -> None:
    reason = ("--reason", "r") if command == "adjust" else ()
    result = run(command, "acme", "5", *reason, "--poo", "h100")
    assert result.exit_code == 2
    assert "No such option: --poo" in result.stderr and "--pool" in result.stderr
    result = run(command, "acme", "--bogus", "5", *reason)
    assert result.exit_code == 2 and "No such option: --bogus" in result.stderr
    assert journal_head(db) == 0


def test_negative_numbers_reach_arguments_and_option_values(run: Run, db: str) -> None:
    debit = _json(run, "adjust", "acme", "--reason", "r", "--at", "-3", "-25")
    assert (debit["amount"], debit["time"]) == (-25, -3)
    credit = _json(run, "adjust", "--at", "2", "acme", "5", "--reason", "-x")
    assert (credit["amount"], credit["reason"]) == (5, "-x")
    # After `--` every word is an argument, as usual.
    named = run("grant", "--at", "1", "--json", "--db", db, "--", "-acme", "5", use_db=False)
    assert named.exit_code == 0 and json.loads(named.stdout)["account"] == "-acme"


@pytest.mark.parametrize("command", [("grant", "-acme", "5"), ("balance", "-acme"),
                                     ("void", "-g1")])
def test_a_name_read_as_an_option_is_named_with_the_way_to_write_it(
        run: Run, db: str, command: tuple[str, ...]) -> None:
    # Click reads `-acme` as the short options -a -c -m -e and names only `-a`: the error
    # names the word typed and says that such an argument follows `--`.
    result = run(*command)
    assert result.exit_code == 2
    assert error_lines(result) == [
        f"gpu-credits: error: No such option: -{command[1][1]} (in '{command[1]}'); an "
        f"argument that starts with - follows --: 'gpu-credits {command[0]} [OPTIONS] -- "
        f"{command[1]} ...' (see 'gpu-credits {command[0]} --help')"]
    # An option misspelt stays named as it was.
    assert "No such option: --bogus (see" in run("grant", "acme", "5", "--bogus").stderr
    assert journal_head(db) == 0


@pytest.mark.parametrize("command", [("grant", "acme", "5"), ("consume", "acme", "5"),
                                     ("adjust", "acme", "5", "--reason", "r")])
def test_a_bad_id_is_named_by_its_option(run: Run, db: str, command: tuple[str, ...]) -> None:
    result = run(*command, "--id", "")
    assert result.exit_code == 2
    assert error_lines(result) == [
        "gpu-credits: error: Invalid value for --id: an event id must be a non-empty "
        "printable string, got '' (see 'gpu-credits " + command[0] + " --help')"]
    assert journal_head(db) == 0


def test_a_new_name_padded_with_spaces_is_refused_and_says_how(run: Run, db: str) -> None:
    for args in (["grant", " acme", "5", "--at", "1"],
                 ["grant", "acme", "5", "--at", "1", "--pool", "a100 "],
                 ["grant", "acme", "5", "--at", "1", "--id", "g1 "],
                 ["grant", "   ", "5", "--at", "1"]):
        refused = run(*args)
        assert refused.exit_code == 2, args
        assert "whitespace" in refused.stderr and "Traceback" not in refused.stderr
    assert journal_head(db) == 0
    assert "write it without the spaces" in run("grant", " acme", "5").stderr
    assert run("grant", "team a", "5", "--at", "1").exit_code == 0
    assert _balance(run, "team a") == 5


def test_a_new_name_in_decomposed_unicode_is_refused_naming_the_composed_one(
        run: Run, db: str) -> None:
    for args in (["grant", "cafe\u0301", "5", "--at", "1"],
                 ["grant", "acme", "5", "--at", "1", "--id", "inv-\u00e9te\u0301"]):
        refused = run(*args)
        assert refused.exit_code == 2, args
        assert "NFC" in refused.stderr and "Traceback" not in refused.stderr
    assert journal_head(db) == 0
    assert run("grant", "caf\u00e9", "5", "--at", "1").exit_code == 0


def test_usage_of_an_account_never_seen_is_recorded_with_a_warning(run: Run) -> None:
    assert run("grant", "acme", "10", "--at", "1").exit_code == 0
    typo = run("consume", "acmee", "30", "--at", "2")
    assert typo.exit_code == 0 and "debt after it: 30" in typo.stdout
    (warning,) = [line for line in typo.stderr.splitlines() if line]
    assert "warning: account 'acmee' had no event before this one" in warning
    assert "gpu-credits reverse" in warning
    for known in (("consume", "acme", "3", "--at", "3"), ("consume", "acmee", "1", "--at", "3")):
        again = run(*known)
        assert again.exit_code == 0 and again.stderr == "", known


def test_a_debit_of_an_account_never_seen_warns_as_usage_does(run: Run) -> None:
    assert run("grant", "acme", "10", "--at", "1").exit_code == 0
    typo = run("adjust", "acmee", "-25", "--reason", "run 17 billed twice", "--at", "2")
    assert typo.exit_code == 0 and "debt after it: 25" in typo.stdout
    (warning,) = [line for line in typo.stderr.splitlines() if line]
    assert "warning: account 'acmee' had no event before this one" in warning
    assert "its debit is its debt" in warning and "gpu-credits reverse" in warning
    # A credit opens an account, as a grant does; a known account's debit is no news.
    for quiet in (("adjust", "newco", "5", "--reason", "goodwill", "--at", "3"),
                  ("adjust", "acme", "-1", "--reason", "fix", "--at", "3")):
        done = run(*quiet)
        assert done.exit_code == 0 and done.stderr == "", quiet


def test_usage_in_a_pool_the_account_never_had_that_makes_debt_warns(run: Run) -> None:
    assert run("grant", "acme", "100", "--pool", "h100", "--at", "1").exit_code == 0
    typo = run("consume", "acme", "10", "--pool", "H100", "--at", "2")
    assert typo.exit_code == 0 and "debt after it: 10" in typo.stdout
    (warning,) = [line for line in typo.stderr.splitlines() if line]
    assert "warning: pool 'H100' had no event of account 'acme' before this one" in warning
    assert "(its pools: h100; h100 is spelled otherwise only in letter case, spaces or " \
        "Unicode form)" in warning
    assert "10 of this usage is debt" in warning and "gpu-credits reverse" in warning
    # Usage in a new pool that general credits pay makes no debt: no news. Nor does more
    # usage in a pool the account had, or a debit in a pool just used.
    assert run("grant", "acme", "50", "--at", "3").exit_code == 0
    for quiet in (("consume", "acme", "5", "--pool", "l40s", "--at", "4"),
                  ("consume", "acme", "500", "--pool", "H100", "--at", "5"),
                  ("adjust", "acme", "-5", "--pool", "l40s", "--reason", "fix", "--at", "6")):
        done = run(*quiet)
        assert done.exit_code == 0 and done.stderr == "", quiet
    debit = run("adjust", "acme", "-5", "--pool", "a100", "--reason", "fix", "--at", "7")
    assert debit.exit_code == 0
    assert "pool 'a100' had no event of account 'acme' before this one (its pools: " \
        "H100, general, h100, l40s)" in debit.stderr and "5 of this debit is debt" in debit.stderr


@pytest.mark.parametrize(("argv", "named"), [
    # Each command builds one event; of several bad fields the first declared is named
    # (docs/semantics.md): for grant, consume and adjust the account, then the amount.
    (["consume", "", "0"], "account"),
    (["grant", "", "0"], "account"),
    (["adjust", "", "0", "--reason", ""], "account"),
    (["consume", "a", "0", "--pool", ""], "amount"),
    (["grant", "a", "0", "--pool", "", "--priority", "500"], "amount"),
    (["consume", "a", "5", "--pool", "", "--memo", ""], "pool"),
    (["grant", "a", "5", "--pool", "", "--priority", "500"], "pool"),
    (["adjust", "", "5", "--reason", "r", "--pool", ""], "account"),
    # A rule about fields together (an adjustment is not 0) comes after the fields.
    (["adjust", "a", "0", "--reason", ""], "reason"),
    (["void", "", "--reason", ""], "grant"),
    (["reverse", "", "--reason", ""], "event"),
])
def test_an_event_with_several_bad_fields_names_the_first_declared(
        run: Run, db: str, argv: list[str], named: str) -> None:
    assert run("grant", "a", "5", "--at", "0").exit_code == 0
    result = run(*argv, "--at", "1") if argv[0] != "reverse" else run(*argv)
    assert result.exit_code == 2
    line, = error_lines(result)
    assert line.startswith(f"gpu-credits: error: {named} must be "), line
    assert journal_head(db) == 1


@pytest.mark.parametrize("argv", [
    ["grant", "acme", "0"],
    ["grant", "acme", "5", "--at", "10", "--expiry", "3"],
    ["consume", "acme", "-1"],
    ["adjust", "acme", "0", "--reason", "nothing"],
    ["void", "g-none"],
    ["reverse", "e-none", "--reason", "typo"],
])
def test_a_refused_first_command_leaves_no_database_file(run: Run, db: str,
                                                          argv: list[str]) -> None:
    """A failed command changes nothing: not even an empty database where none was."""
    from tools.cli import sqlite_path

    result = run(*argv)
    assert result.exit_code == 2 and len(error_lines(result)) == 1, result.stderr
    path = sqlite_path(db)
    assert path is not None and not path.exists()
    assert list(path.parent.iterdir()) == []


def test_a_first_command_on_a_new_file_records_once_and_warns_once(run: Run,
                                                                   db: str) -> None:
    result = run("consume", "acme", "5", "--at", "3", "--json")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("had no event before this one") == 1
    assert _json(run, "head")["position"] == 1
    assert journal_head(db) == 1


def test_a_grant_and_a_usage_report_in_a_pool_say_the_pool(run: Run) -> None:
    granted = run("grant", "acme", "10", "--pool", "h100", "--at", "1", "--id", "g1")
    assert granted.stdout.startswith("recorded grant g1: 10 credits to acme in pool h100 at ")
    used = run("consume", "acme", "4", "--pool", "h100", "--at", "2", "--id", "u1")
    assert used.stdout.startswith("recorded usage u1: 4 credits of acme in pool h100 at ")
    plain = run("grant", "acme", "1", "--at", "3", "--id", "g2")
    assert plain.stdout.startswith("recorded grant g2: 1 credit to acme at ")


def test_one_credit_is_said_in_the_singular(run: Run) -> None:
    granted = run("grant", "acme", "1", "--at", "1", "--expiry", "9", "--id", "g1")
    assert "recorded grant g1: 1 credit to acme" in granted.stdout
    used = run("consume", "acme", "1", "--at", "2", "--id", "u1")
    assert "recorded usage u1: 1 credit of acme" in used.stdout
    debit = run("adjust", "acme", "-1", "--reason", "typo", "--at", "3", "--id", "d1")
    assert "recorded debit d1: -1 credit for acme" in debit.stdout
    run("grant", "acme", "2", "--at", "4", "--id", "g2")  # pays the debit's 1 first
    voided = run("void", "g2", "--at", "6")
    assert "; 1 unused credit stop counting" in voided.stdout
    details = [line["detail"] for line in _json(run, "statement", "acme")["lines"]]
    assert "grant of 1 credit, expires" in details[0]
    assert any("adjustment of -1 credit: typo" in d for d in details)
    assert any("voided, 1 unused credit stop counting" in d for d in details)
    many = run("grant", "acme", "12", "--at", "7", "--id", "g3")
    assert "12 credits to acme" in many.stdout


@pytest.mark.parametrize("command", [("grant", "acme", "5"),
                                     ("adjust", "acme", "5", "--reason", "goodwill")])
def test_a_credit_that_would_hand_a_started_jobs_credits_to_another_is_refused(
        run: Run, db: str, command: tuple[str, ...]) -> None:
    """Credits at 1 would make j1 (rejected at 2) affordable, holding what j2, started at
    4, was accepted against: exit 2, one line, nothing appended; at 4 they are taken."""
    jobs = ('{"type": "grant", "account": "acme", "amount": 10, "time": 0}\n'
            '{"type": "submit", "account": "acme", "job": "j1", "cost": 15, "priority": 1, '
            '"time": 2}\n'
            '{"type": "submit", "account": "acme", "job": "j2", "cost": 10, "priority": 1, '
            '"time": 3}\n'
            '{"type": "start", "job": "j2", "time": 4}\n')
    assert run("import", "-", input=jobs).exit_code == 0
    refused = run(*command, "--at", "1")
    assert refused.exit_code == 2 and len(error_lines(refused)) == 1
    assert "would invalidate the start" in refused.stderr
    # What to do, in words every surface shares: the library's `at`, the command line's
    # `--at` and the service's `time` are each left out to record it now.
    assert "record it at a later time, or now (give no time)" in refused.stderr
    assert journal_head(db) == 4
    assert run(*command, "--at", "4").exit_code == 0
