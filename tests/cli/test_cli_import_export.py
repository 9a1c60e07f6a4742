"""import and export: validation before anything is appended, idempotence, round trips."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import typer.main
from cli_helpers import LATE, SMALL, Run, as_json, error_lines, journal_head, lines_of
from typer.testing import CliRunner, Result

from eventstore import Journal
from tools.cli import app

CONTRACT_EXAMPLE = """\
{"type": "grant",    "account": "a", "amount": 100, "time": 0, "expiry": 10, "pool": "h100"}
{"type": "consume",  "account": "a", "amount": 70,  "time": 3, "pool": "h100"}
{"type": "account",  "account": "a", "max_running": 2}
{"type": "submit",   "account": "a", "job": "j1", "cost": 8, "priority": 1, "time": 4}
{"type": "start",    "job": "j1", "time": 5}
{"type": "complete", "job": "j1", "success": true, "time": 9, "refund_fraction": 0.5}
{"type": "cancel",   "job": "j2", "time": 6}
"""


def _digest(run: Run) -> str:
    digest = as_json(run("replay", "--json"))["digest"]  # type: ignore[index]
    assert isinstance(digest, str)
    return digest


def test_the_contract_example_imports(run: Run, tmp_path: Path, db: str) -> None:
    path = tmp_path / "example.jsonl"
    path.write_text(CONTRACT_EXAMPLE)
    result = run("import", str(path))
    assert result.exit_code == 0, result.stderr
    assert "appended 7 events, 0 already present" in result.stdout
    assert journal_head(db) == 7
    journal = Journal(db)
    try:
        streams = {rec.payload.get("job"): rec.stream for rec in journal.read()
                   if rec.type in ("start", "complete", "cancel")}
        account = next(r for r in journal.read() if r.type == "account")
    finally:
        journal.close()
    assert streams == {"j1": "a", "j2": "job:j2"}  # j2 was never submitted
    assert account.time == -(2**62)  # no time: from the start of the timeline


def test_reimporting_the_same_file_appends_nothing(run: Run, small: Path, db: str) -> None:
    again = run("import", str(small))
    assert again.exit_code == 0
    assert "appended 0 events, 12 already present" in again.stdout
    assert journal_head(db) == 12


def test_a_grown_file_with_other_line_endings_appends_only_its_new_line(
        run: Run, small: Path, tmp_path: Path, db: str) -> None:
    grown = tmp_path / "grown.jsonl"
    text = SMALL + '{"type": "consume", "account": "b", "amount": 1, "time": 12}\n'
    grown.write_bytes(text.replace("\n", "\r\n").encode())
    result = run("import", str(grown))
    assert result.exit_code == 0
    assert "appended 1 event, 12 already present" in result.stdout


def test_a_time_in_milliseconds_is_refused_unless_allowed(run: Run, tmp_path: Path,
                                                          db: str) -> None:
    millis = tmp_path / "millis.jsonl"
    millis.write_text('{"type": "consume", "account": "b", "amount": 1, '
                      '"time": 1796083200000}\n')
    refused = run("import", str(millis))
    assert refused.exit_code == 2
    assert "probably milliseconds" in refused.stderr
    assert journal_head(db) == 0
    allowed = run("import", str(millis), "--allow-far-times")
    assert allowed.exit_code == 0
    assert journal_head(db) == 1


def test_every_bad_line_is_reported_and_nothing_is_appended(run: Run, small: Path,
                                                            tmp_path: Path, db: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([
        '{"type": "grant", "account": "a", "amount": 100, "time": 20}',
        '{"type": "grant", "account": "a", "amount": true, "time": 20}',
        '{"type": "consume", "account": "a", "amount": 70}',
        "not json",
        '{"type": "submit", "account": "a", "job": "j9", "cost": 8, "priority": 1, '
        '"time": 20, "colour": "red"}',
        '{"type": "complete", "job": "j1", "success": true, "time": 21, '
        '"refund_fraction": 1.5}',
        '{"type": "grant", "account": "a", "amount": 5, "time": 30, "expiry": 30}',
        "[1, 2]",
        '{"type": "explode", "time": 3}',
        '{"type": "grant", "account": "a", "amount": -5, "time": 30}',
        '{"type": "grant", "account": "", "amount": 5, "time": 30}',
        '{"type": "grant", "account": "a", "amount": 5.0, "time": 30}',
        '{"type": "grant", "account": "a", "amount": 5, "time": "noon"}',
    ]) + "\n")
    result = run("import", str(bad))
    assert result.exit_code == 2
    errors = error_lines(result)
    assert [e.split(":")[1] for e in errors[:-1]] == [str(n) for n in range(2, 14)]
    assert all(e.startswith(f"{bad}:") for e in errors[:-1])
    assert "amount" in errors[0] and "missing time" in errors[1]
    assert "not valid JSON" in errors[2] and "colour" in errors[3]
    assert "refund_fraction" in errors[4] and "expiry" in errors[5]
    assert errors[-1] == f"gpu-credits: error: 12 invalid line(s) in {bad}; nothing appended"
    assert journal_head(db) == 12


def test_an_id_recorded_with_other_content_is_a_bad_line(run: Run, small: Path,
                                                         tmp_path: Path, db: str) -> None:
    first = tmp_path / "first.jsonl"
    first.write_text('{"type": "grant", "account": "a", "amount": 5, "time": 20, "id": "x"}\n')
    assert run("import", str(first)).exit_code == 0
    second = tmp_path / "second.jsonl"
    second.write_text('{"type": "grant", "account": "b", "amount": 7, "time": 21}\n'
                      '{"type": "grant", "account": "a", "amount": 6, "time": 20, "id": "x"}\n')
    result = run("import", str(second))
    assert result.exit_code == 2
    assert error_lines(result)[0].startswith(f"{second}:2: id 'x' is already recorded")
    assert journal_head(db) == 13


def test_one_id_twice_in_a_file(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "twice.jsonl"
    same = '{"type": "grant", "account": "a", "amount": 5, "time": 1, "id": "g"}\n'
    path.write_text(same + same)
    result = run("import", str(path))
    assert result.exit_code == 0
    assert "appended 1 event, 1 already present" in result.stdout
    path.write_text(same + same.replace("5", "6"))
    result = run("import", str(path))
    assert result.exit_code == 2
    assert error_lines(result)[0] == f"{path}:2: id 'g' is used on line 1 for another event"


def test_a_null_optional_field_is_its_default(run: Run, tmp_path: Path, db: str) -> None:
    path = tmp_path / "nulls.jsonl"
    plain = ('{"type": "grant", "account": "a", "amount": 10, "time": 0}\n'
             '{"type": "submit", "account": "a", "job": "j", "cost": 4, "priority": 1, "time": 1}\n'
             '{"type": "start", "job": "j", "time": 2}\n'
             '{"type": "complete", "job": "j", "success": false, "time": 3}\n')
    path.write_text(plain)
    assert run("import", str(path)).exit_code == 0
    path.write_text(plain.replace('"time": 0}', '"time": 0, "priority": null, "pool": null}')
                    .replace('"success": false,', '"success": false, "refund_fraction": null,'))
    again = run("import", str(path))
    assert again.exit_code == 0, again.stderr
    assert "appended 0 events, 4 already present" in again.stdout  # the same lines
    assert journal_head(db) == 4
    assert as_json(run("balance", "a", "--json"))["balance"] == 10  # type: ignore[index]


def test_a_key_of_the_journal_own_is_an_unknown_field(run: Run, tmp_path: Path,
                                                     db: str) -> None:
    """`$private` (a seal) and `$erased` are keys of the stored payload, never of a line:
    an export writes neither, so a line holding one is refused like any unknown field,
    not read with the key dropped (or, on an erasure, taken for its `events`)."""
    path = tmp_path / "dollar.jsonl"
    path.write_text(
        '{"type": "grant", "account": "a", "amount": 5, "time": 0}\n'
        '{"type": "grant", "account": "a", "amount": 5, "time": 1, "$private": "ab"}\n'
        '{"type": "consume", "account": "a", "amount": 1, "time": 2, "$x": 1}\n'
        '{"type": "erase", "$erased": ["g"], "time": 3}\n')
    result = run("import", str(path))
    assert result.exit_code == 2
    errors = error_lines(result)
    assert errors[:3] == [
        f"{path}:2: grant event has unknown field(s) $private (a key starting with $ is "
        "the journal's own, never a line's)",
        f"{path}:3: consume event has unknown field(s) $x (a key starting with $ is "
        "the journal's own, never a line's)",
        f"{path}:4: erase event has unknown field(s) $erased (a key starting with $ is "
        "the journal's own, never a line's)",
    ]
    assert journal_head(db) == 0


def test_a_field_name_or_type_of_any_text_is_named_on_one_short_line(
        run: Run, tmp_path: Path, db: str) -> None:
    """A field name or a type is the line's own text: with a line break, or thousands of
    characters long, it is still named on one line of stderr, shown as a value."""
    path = tmp_path / "names.jsonl"
    grant = {"type": "grant", "account": "a", "amount": 5, "time": 0}
    path.write_text("\n".join(json.dumps(r) for r in [
        {**grant, "a\nb": 1},
        {**grant, "\x1b[31mred": 1, "x" * 3000: 1},
        {"type": "y" * 5000, "time": 0},
    ]) + "\n")
    result = run("import", str(path))
    assert result.exit_code == 2
    errors = error_lines(result)
    assert len(errors) == 4
    assert errors[0] == f"{path}:1: grant event has unknown field(s) 'a\\nb'"
    assert errors[1].startswith(f"{path}:2: grant event has unknown field(s) '\\x1b[31mred', "
                                "'xxxx")
    assert errors[2].startswith(f"{path}:3: unknown type 'yyyy")
    assert all(len(e) < 400 for e in errors)
    assert journal_head(db) == 0


def test_import_from_stdin(run: Run) -> None:
    result = run("import", "-", input=SMALL)
    assert result.exit_code == 0, result.stderr
    assert "<stdin>: appended 12 events" in result.stdout
    assert "appended 0 events" in run("import", "-", input=SMALL).stdout


def test_import_from_a_pipe(run: Run, tmp_path: Path) -> None:
    # `gpu-credits import <(zcat events.jsonl.gz)` names a pipe, which cannot be read twice
    # the way a file is: it is read once, like stdin.
    fifo = tmp_path / "events.pipe"
    os.mkfifo(fifo)

    def imported_through_the_pipe() -> Result:
        writer = threading.Thread(target=fifo.write_text, args=(SMALL,), daemon=True)
        writer.start()
        try:
            return run("import", str(fifo))
        finally:
            writer.join(timeout=10)

    result = imported_through_the_pipe()
    assert result.exit_code == 0, result.stderr
    assert f"{fifo}: appended 12 events" in result.stdout
    assert "appended 0 events, 12 already present" in imported_through_the_pipe().stdout


def test_a_missing_file_is_one_line(run: Run, tmp_path: Path) -> None:
    result = run("import", str(tmp_path / "nope.jsonl"))
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    assert "cannot read" in result.stderr


def test_job_events_find_their_account_in_the_journal(run: Run, tmp_path: Path,
                                                      db: str) -> None:
    (tmp_path / "one.jsonl").write_text(
        '{"type": "grant", "account": "a", "amount": 50, "time": 0}\n'
        '{"type": "submit", "account": "a", "job": "j", "cost": 5, "priority": 0, "time": 1}\n')
    (tmp_path / "two.jsonl").write_text('{"type": "start", "job": "j", "time": 2}\n')
    assert run("import", str(tmp_path / "one.jsonl")).exit_code == 0
    assert run("import", str(tmp_path / "two.jsonl")).exit_code == 0
    journal = Journal(db)
    try:
        assert journal.stream_version("a") == 3
    finally:
        journal.close()


def test_export_is_canonical_with_ids(run: Run, small: Path, tmp_path: Path) -> None:
    late = tmp_path / "late.jsonl"
    late.write_text(LATE)
    assert run("import", str(late)).exit_code == 0
    records = [json.loads(line) for line in lines_of(run("export").stdout)]
    assert len(records) == 13
    assert all("id" in r for r in records)
    # What the journal recorded, for an auditor (asked for): every position once, and
    # a UTC time; the same lines otherwise.
    assert not any("recorded_at" in r or "position" in r for r in records)
    audited = [json.loads(line) for line in lines_of(run("export", "--recorded").stdout)]
    assert sorted(r.pop("position") for r in audited) == list(range(1, 14))
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", r.pop("recorded_at"))
               for r in audited)
    assert audited == records
    times = [r.get("time", -(2**62)) for r in records]
    assert times == sorted(times)
    # The two accounts (no time), the grant at t=0, then both grants at t=1 in arrival
    # order: b's (line 6 of the first file) before the late one, recorded last.
    ids = [r["id"] for r in records]
    assert ids.index("late-grant") == 4
    assert records[3]["account"] == "b" and ids[3].startswith("import-")


def test_recorded_adds_what_export_help_says_for_each_format(run: Run, small: Path) -> None:
    # What the columns are: a CSV has the position always, --recorded adds recorded_at;
    # JSON Lines have neither, --recorded adds both.
    def keys(*extra: str) -> set[str]:
        result = run("export", *extra)
        assert result.exit_code == 0, result.stderr
        if "csv" in extra:
            return set(result.stdout.splitlines()[0].split(","))
        return set(json.loads(lines_of(result.stdout)[0]))

    recorded = {"position", "recorded_at"}
    assert keys("--format", "csv") & recorded == {"position"}
    assert keys("--format", "csv", "--recorded") & recorded == recorded
    assert keys() & recorded == set()
    assert keys("--recorded") & recorded == recorded
    # And what the help says they are.
    command = typer.main.get_command(app).commands["export"]  # type: ignore[attr-defined]
    option, = (p for p in command.params if p.name == "recorded")
    assert "recorded-at time" in option.help and "position (CSV always has it)" in option.help
    assert "The CSV has each event's `position` always" in (command.help or "")


def _imports_to(export: Path, fresh: str, events: int, digest: str) -> None:
    """`export` imports into the empty database `fresh`, all `events` of it, and replays
    there to `digest`."""
    runner = CliRunner()
    imported = runner.invoke(app, ["import", str(export), "--db", fresh])
    assert imported.exit_code == 0, imported.stderr
    assert f"appended {events} events" in imported.stdout
    replayed = as_json(runner.invoke(app, ["replay", "--json", "--db", fresh]))
    assert replayed["digest"] == digest  # type: ignore[index]


def test_export_round_trips_to_the_same_digest(run: Run, small: Path, tmp_path: Path) -> None:
    late = tmp_path / "late.jsonl"
    late.write_text(LATE)
    assert run("import", str(late)).exit_code == 0
    digest = _digest(run)
    for fmt, extra in (("jsonl", ()), ("csv", ()), ("jsonl", ("--recorded",)),
                       ("csv", ("--recorded",))):
        name = f"{'recorded' if extra else 'plain'}.{fmt}"
        out = tmp_path / f"export-{name}"
        result = run("export", "--format", fmt, "--out", str(out), *extra)
        assert result.exit_code == 0, result.stderr
        _imports_to(out, f"sqlite:///{tmp_path / f'fresh-{name}.db'}", 13, digest)
        # Importing the export into the database it came from appends nothing.
        assert "appended 0 events" in run("import", str(out)).stdout


def test_corrections_timed_before_what_they_name_round_trip(run: Run, tmp_path: Path) -> None:
    """A void timed before its grant and a reversal timed before its usage come first in
    the export (canonical order): the export still imports, to the same digest."""
    for args in (("grant", "a", "100", "--at", "50", "--id", "g1"),
                 ("void", "g1", "--at", "10", "--reason", "cancelled", "--id", "v1"),
                 ("grant", "a", "30", "--at", "0", "--id", "g0"),
                 ("consume", "a", "20", "--at", "70", "--id", "c1"),
                 ("consume", "a", "5", "--at", "80", "--id", "c2")):
        assert run(*args).exit_code == 0, args
    early_reversal = tmp_path / "reversal.jsonl"
    early_reversal.write_text(json.dumps({"type": "reverse", "event": "c1", "time": 5,
                                          "reason": "seconds, not ms", "id": "r1"}) + "\n")
    assert run("import", str(early_reversal)).exit_code == 0
    digest = _digest(run)
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"export.{fmt}"
        assert run("export", "--format", fmt, "--out", str(out)).exit_code == 0
        if fmt == "jsonl":
            assert [json.loads(line)["id"] for line in lines_of(out.read_text())] == [
                "g0", "r1", "v1", "g1", "c1", "c2"]
        fresh = f"sqlite:///{tmp_path / f'fresh-{fmt}.db'}"
        _imports_to(out, fresh, 6, digest)
        runner = CliRunner()
        assert runner.invoke(app, ["verify", "--db", fresh]).exit_code == 0
        balance = as_json(runner.invoke(app, ["balance", "a", "--json", "--db", fresh]))
        assert balance["balance"] == 25  # type: ignore[index]


def test_a_json_lines_file_with_a_byte_order_mark_imports(run: Run, tmp_path: Path) -> None:
    """Not mistaken for CSV (its first line holds commas and "type"), nor refused as bad
    JSON: the mark is not part of the first line."""
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + CONTRACT_EXAMPLE.encode())
    result = run("import", str(marked))
    assert result.exit_code == 0, result.stderr
    assert "appended 7 events" in result.stdout


def test_csv_import_needs_the_export_header(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "odd.csv"
    path.write_text("id,type,colour\nx,grant,red\n")
    result = run("import", str(path))
    assert result.exit_code == 2
    assert error_lines(result)[0].startswith(f"{path}:1: unknown column(s) 'colour'")
    path.write_text("type,account,amount,time\ngrant,a,ten,1\n")
    result = run("import", str(path))
    assert error_lines(result)[0] == f"{path}:2: amount must be an integer, got 'ten'"
    as_jsonl = tmp_path / "data.txt"
    as_jsonl.write_text("type,account,amount,time\ngrant,a,10,1\n")
    assert run("import", "--format", "csv", str(as_jsonl)).exit_code == 0


def test_the_summary_counts_bad_lines_not_problems(run: Run, db: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "void", "grant": "nope", "time": 7258118401}\n'
                   '{"type": "grant", "account": "a", "amount": 5, "time": 1}\n')
    result = run("import", str(bad))
    assert result.exit_code == 2
    errors = error_lines(result)
    assert [e.split(":")[1] for e in errors[:-1]] == ["1", "1"]  # two problems, one line
    assert errors[-1] == f"gpu-credits: error: 1 invalid line(s) in {bad}; nothing appended"
    assert journal_head(db) == 0


def test_a_write_committed_while_another_writer_holds_the_lock_says_so(
        run: Run, db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A command whose events are committed when another writer (a service, a long
    import) takes SQLite's write lock for longer than lock_timeout, just before the
    command records the journal's verified mark, succeeds with a warning: its events are
    recorded, so an `error` (exit 2) would be untrue; its retry appends nothing."""
    import functools
    import sqlite3

    from projections import anchors
    from tools import cli

    monkeypatch.setattr(cli, "Journal", functools.partial(Journal, lock_timeout=0.2))
    advance = anchors.advance_verified
    path = db.removeprefix("sqlite:///")

    def another_writer_first(journal: Any) -> Any:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            return advance(journal)
        finally:
            other.rollback()
            other.close()

    monkeypatch.setattr(anchors, "advance_verified", another_writer_first)
    source = tmp_path / "small.jsonl"
    source.write_text(SMALL)
    first = run("import", str(source))
    assert first.exit_code == 0, first.stderr
    assert "appended 12 events" in first.stdout
    assert "warning: what this command recorded is committed" in first.stderr
    assert "stayed locked by another writer" in first.stderr
    grant = run("grant", "b", "5", "--id", "more")
    assert grant.exit_code == 0, grant.stderr
    monkeypatch.setattr(anchors, "advance_verified", advance)
    again = run("import", str(source))
    assert again.exit_code == 0, again.stderr
    assert "appended 0 events, 12 already present" in again.stdout
    with Journal(db) as journal:
        assert journal.head() == 13
        assert journal.verify() is None


def test_a_refused_first_import_leaves_no_database_file_and_reports_every_line(
        run: Run, tmp_path: Path, db: str) -> None:
    """Bad lines of the first pass and lines only the second pass refuses (a void of a
    grant nowhere) are all named, as on an empty database, and no file is created."""
    from tools.cli import sqlite_path

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"type": "grant", "account": "a", "amount": 5, "time": 1, "id": "g1"}\n'
        '{"type": "void", "grant": "g-nowhere", "time": 2}\n'
        '{"type": "grant", "account": "a", "amount": 0, "time": 3}\n'
        '{"type": "grant", "account": "a", "amount": 5, "time": 4, "id": "g1"}\n')
    path = sqlite_path(db)
    assert path is not None
    result = run("import", str(bad))
    assert result.exit_code == 2
    assert list(path.parent.glob(path.name + "*")) == [], result.stderr
    on_empty = tmp_path / "empty.db"
    Journal(f"sqlite:///{on_empty}").close()
    existing = run("import", str(bad), "--db", f"sqlite:///{on_empty}", use_db=False)
    assert existing.exit_code == 2
    assert error_lines(result) == error_lines(existing)
    assert [e.split(":")[1] for e in error_lines(result)[:-1]] == ["2", "3", "4"]


@pytest.mark.parametrize("lines", [
    ['{"type": "void", "grant": "g-nowhere", "time": 2}'],
    ['{"type": "grant", "account": "a", "amount": 5, "time": 1, "id": "g1"}',
     '{"type": "grant", "account": "a", "amount": 6, "time": 1, "id": "g1"}'],
    ['{"type": "consume", "account": "a", "amount": 5, "time": 1, "id": "u1"}',
     '{"type": "void", "grant": "u1", "time": 2}'],
    ['{"type": "reverse", "event": "r2", "time": 1, "reason": "x", "id": "r1"}',
     '{"type": "reverse", "event": "r1", "time": 2, "reason": "x", "id": "r2"}'],
], ids=["void-of-nothing", "one-id-two-events", "void-of-no-grant", "reversals-in-a-ring"])
def test_a_file_only_the_second_pass_refuses_leaves_no_database_file(
        run: Run, tmp_path: Path, db: str, lines: list[str]) -> None:
    """Every line parses, so the first pass finds nothing; the lines are refused only by
    what the second pass resolves against the journal (here empty). No file either."""
    from tools.cli import sqlite_path

    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    path = sqlite_path(db)
    assert path is not None
    result = run("import", str(bad))
    assert result.exit_code == 2
    assert "nothing appended" in error_lines(result)[-1]
    assert list(path.parent.glob(path.name + "*")) == [], result.stderr


def test_a_first_import_with_corrections_that_resolve_appends_them(
        run: Run, tmp_path: Path, db: str) -> None:
    """The check above lets through what the second pass takes: a void and a reversal
    of a reversal, timed before what they name (as an export lists them)."""
    good = tmp_path / "good.jsonl"
    good.write_text(
        '{"type": "reverse", "event": "r1", "time": 0, "reason": "x", "id": "r2"}\n'
        '{"type": "void", "grant": "g1", "time": 1, "id": "v1"}\n'
        '{"type": "reverse", "event": "v1", "time": 1, "reason": "x", "id": "r1"}\n'
        '{"type": "grant", "account": "a", "amount": 5, "time": 2, "id": "g1"}\n')
    result = run("import", str(good))
    assert result.exit_code == 0, result.stderr
    assert journal_head(db) == 4


def test_a_first_import_into_a_new_file_checks_its_lines_once(
        run: Run, tmp_path: Path, db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from projections import importing

    passes: list[int] = []
    survey = importing.survey_stream

    def counted(*args: Any, **kwargs: Any) -> importing.Survey:
        passes.append(1)
        return survey(*args, **kwargs)

    monkeypatch.setattr(importing, "survey_stream", counted)
    good = tmp_path / "good.jsonl"
    good.write_text(CONTRACT_EXAMPLE)
    assert run("import", str(good)).exit_code == 0
    assert len(passes) == 1 and journal_head(db) == 7
    assert run("import", str(good)).exit_code == 0
    assert len(passes) == 2 and journal_head(db) == 7


_BEFORE = [
    {"type": "grant", "id": "g1", "account": "a", "amount": 50, "time": 0},
    {"type": "grant", "id": "g2", "account": "a", "amount": 50, "time": 0},
    {"type": "consume", "id": "u1", "account": "a", "amount": 1, "time": 1},
    {"type": "consume", "id": "u2", "account": "a", "amount": 2, "time": 1},
    {"type": "account", "account": "a", "max_running": 2},
    {"type": "submit", "account": "a", "job": "j1", "cost": 5, "priority": 1, "time": 4},
    {"type": "start", "job": "j1", "time": 5},
    {"type": "void", "grant": "g1", "time": 8, "reason": "cancelled"},
    {"type": "reverse", "event": "u1", "time": 9, "reason": "wrong"},
]


@pytest.mark.parametrize("other", [
    [{"type": "submit", "account": "a", "job": "j2", "cost": 5, "priority": 1, "time": 4},
     {"type": "start", "job": "j2", "time": 5}],
    [{"type": "void", "grant": "g2", "time": 8, "reason": "cancelled"}],
    [{"type": "reverse", "event": "u2", "time": 9, "reason": "wrong"}],
    [{"type": "account", "account": "a", "max_running": 3}],
], ids=["other-job", "other-grant-voided", "other-event-reversed", "new-cap"])
def test_other_events_without_an_amount_at_the_same_time_are_no_redelivery(
        run: Run, tmp_path: Path, other: list[dict[str, Any]]) -> None:
    # Events without an amount were matched on account, type and time alone: a second
    # file's submit of another job in the same second, a void of another grant, a new
    # cap, was warned about as a possible re-delivery (and the warning read "of None").
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text(_lines(*_BEFORE))
    second.write_text(_lines(*other))
    assert run("import", str(first)).exit_code == 0
    result = run("import", str(second))
    assert result.exit_code == 0, result.stderr
    assert f"appended {len(other)} event" in result.stdout
    assert "re-delivery" not in result.stderr


def test_a_redelivered_job_under_other_ids_is_warned_about_by_its_job(
        run: Run, tmp_path: Path) -> None:
    # A re-delivery is still told, for events without an amount too.
    with_ids, without = tmp_path / "with-ids.jsonl", tmp_path / "without.jsonl"
    submit = {"type": "submit", "account": "a", "job": "j1", "cost": 5, "priority": 1,
              "time": 4}
    with_ids.write_text(_lines({"type": "grant", "account": "a", "amount": 50, "time": 0},
                               {**submit, "id": "s-1"}))
    without.write_text(_lines(submit))
    assert run("import", str(with_ids)).exit_code == 0
    result = run("import", str(without))
    assert result.exit_code == 0, result.stderr
    (warning,) = result.stderr.strip().splitlines()
    assert "re-delivery" in warning and "submit of job 'j1' for a at 4" in warning


def _lines(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def test_a_redelivered_cap_is_warned_about_from_the_start_of_the_timeline(
        run: Run, tmp_path: Path) -> None:
    with_ids, without = tmp_path / "with-ids.jsonl", tmp_path / "without.jsonl"
    cap = {"type": "account", "account": "a", "max_running": 2}
    with_ids.write_text(_lines({**cap, "id": "cap-1"}))
    without.write_text(_lines(cap))
    assert run("import", str(with_ids)).exit_code == 0
    result = run("import", str(without))
    assert result.exit_code == 0, result.stderr
    (warning,) = result.stderr.strip().splitlines()
    assert "first: account for a from the start of the timeline)" in warning


def test_a_file_imported_with_far_times_imports_again_without_the_flag(
        run: Run, tmp_path: Path, db: str) -> None:
    # The far-time rule is for new events, as for a single-event command's retry: a file
    # imported once with --allow-far-times was refused when imported again without it,
    # though every line was already recorded and nothing would be appended.
    far = {"type": "grant", "account": "a", "amount": 5, "time": 7_258_118_401}
    path = tmp_path / "far.jsonl"
    path.write_text(_lines(far, {"type": "grant", "account": "a", "amount": 1, "time": 1}))
    assert run("import", str(path), "--allow-far-times").exit_code == 0
    again = run("import", str(path))
    assert again.exit_code == 0, again.stderr
    assert "appended 0 events, 2 already present" in again.stdout
    # A new far line still needs the flag, whatever else the file holds.
    path.write_text(_lines(far, {"type": "grant", "account": "a", "amount": 1, "time": 1},
                           {"type": "consume", "account": "a", "amount": 1,
                            "time": 7_258_118_402},
                           {"type": "consume", "account": "a", "amount": 2, "time": 2}))
    grown = run("import", str(path))
    assert grown.exit_code == 2
    assert error_lines(grown)[0].startswith(f"{path}:3: time 7258118402 is after 2200-01-01")
    assert journal_head(db) == 2


def test_far_times_into_a_new_file_leave_no_file(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "far.jsonl"
    path.write_text(_lines({"type": "grant", "account": "a", "amount": 5,
                            "time": 7_258_118_401}))
    target = tmp_path / "new.db"
    result = run("import", str(path), "--db", f"sqlite:///{target}", use_db=False)
    assert result.exit_code == 2
    assert "probably milliseconds" in result.stderr
    assert not target.exists()
