"""The command line under attack: anchors, signed anchors, hostile names, secrets in URLs,
exports aimed at the journal, and paths that do not exist."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest
from cli_helpers import Run, as_json, cli, db_path, error_lines, tamper
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from tests.sqlite_copies import online_backup
from tools.cli import app


def _head(run: Run) -> str:
    result = run("head")
    assert result.exit_code == 0, result.stderr
    return result.stdout.strip()


def _sql(db: str, *statements: str) -> list[tuple[object, ...]]:
    """Run statements on the SQLite file behind the journal's back, committed; the rows
    the last one gives."""
    conn = sqlite3.connect(db_path(db))
    try:
        rows: list[tuple[object, ...]] = []
        for statement in statements:
            rows = conn.execute(statement).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def test_head_prints_an_anchor_that_verify_accepts(run: Run, small: Path) -> None:
    anchor = _head(run)
    position, _, digest = anchor.partition(":")
    assert position == "12" and len(digest) == 64
    assert as_json(run("head", "--json")) == {"position": 12, "hash": digest}
    result = run("verify", "--anchor", anchor)
    assert result.exit_code == 0, result.stderr
    assert f"ok: holds anchor {anchor} unchanged" in result.stdout.splitlines()
    report = as_json(run("verify", "--anchor", anchor, "--json"))
    assert isinstance(report, dict) and report["ok"] is True
    assert report["anchors"] == [{"ok": True, "events": 12, "anchor": anchor}]


def test_an_anchor_survives_appends(run: Run, small: Path, tmp_path: Path) -> None:
    anchor = _head(run)
    late = tmp_path / "late.jsonl"
    late.write_text('{"type": "consume", "account": "b", "amount": 1, "time": 20}\n')
    assert run("import", str(late)).exit_code == 0
    assert run("verify", "--anchor", anchor).exit_code == 0
    assert _head(run) != anchor


def test_every_anchor_given_is_checked(run: Run, small: Path, tmp_path: Path) -> None:
    old = _head(run)
    late = tmp_path / "late.jsonl"
    late.write_text('{"type": "consume", "account": "b", "amount": 1, "time": 20}\n')
    assert run("import", str(late)).exit_code == 0
    new = _head(run)
    both = run("verify", "--anchor", old, "--anchor", new)
    assert both.exit_code == 0, both.stderr
    assert [line for line in both.stdout.splitlines() if "holds anchor" in line] == [
        f"ok: holds anchor {old} unchanged", f"ok: holds anchor {new} unchanged"]
    # A wrong anchor is never passed over for a right one given after it.
    wrong = f"12:{new.partition(':')[2]}"
    for first, second in ((wrong, new), (new, wrong)):
        result = run("verify", "--anchor", first, "--anchor", second)
        assert result.exit_code == 1, result.stdout
        assert "verification failed at position 12" in result.stderr
    report = as_json(run("verify", "--anchor", old, "--anchor", new, "--json"))
    assert isinstance(report, dict)
    assert [a["anchor"] for a in report["anchors"]] == [old, new]


def test_a_truncated_tail_fails_against_the_anchor(run: Run, small: Path, db: str) -> None:
    anchor = _head(run)
    conn = sqlite3.connect(db_path(db))
    try:
        (previous,) = conn.execute("SELECT hash FROM events WHERE position = 11").fetchone()
        conn.execute("DELETE FROM events WHERE position = 12")
        conn.execute("UPDATE journal_head SET position = 11, hash = ?", (previous,))
        conn.commit()
    finally:
        conn.close()
    # Consistent on its own, but the import verified the journal up to 12: the mark it
    # left says so, and every command, verify first, refuses the cut journal.
    alone = run("verify")
    assert alone.exit_code == 1
    assert error_lines(alone) == [
        "gpu-credits: error: verification failed at position 12: the journal ends at "
        "position 11, but it was verified up to position 12: records 12..12 were removed"]
    for command in (["export"], ["revisions"], ["replay"], ["balance", "a"]):
        refused = run(*command)
        assert refused.exit_code == 1 and "records 12..12 were removed" in refused.stderr
    result = run("verify", "--anchor", anchor)
    assert result.exit_code == 1  # the anchor, kept outside, says the same
    (line,) = error_lines(result)
    assert "failed at position 12" in line and "records 12..12 were removed" in line


def test_a_backup_older_than_an_anchor_fails_verify_saying_so(
        run: Run, small: Path, db: str, tmp_path: Path) -> None:
    backup = tmp_path / "backup.db"
    online_backup(db_path(db), backup)  # at position 12
    assert run("grant", "a", "5", "--at", "20").exit_code == 0
    anchor = _head(run)  # kept outside: position 13
    online_backup(backup, db_path(db))  # the restore
    # Consistent on its own, its own verified mark included: only the anchor tells.
    assert run("verify").exit_code == 0
    result = run("verify", "--anchor", anchor)
    assert result.exit_code == 1
    (line,) = error_lines(result)
    assert "failed at position 13: the journal ends at position 12, before the anchor's " \
           "position 13" in line
    assert "restored from a copy older than the anchor" in line
    failed = run("verify", "--anchor", anchor, "--json")
    assert failed.exit_code == 1
    report = json.loads(failed.stdout)
    assert report["ok"] is False and report["first_bad_position"] == 13


def test_verify_names_what_is_wrong_with_the_head_marker(run: Run, small: Path,
                                                         db: str) -> None:
    _sql(db, "UPDATE journal_head SET position = 15")
    result = run("verify")
    assert result.exit_code == 1 and "head marker names position 15" in result.stderr
    refused = run("grant", "a", "5", "--at", "20")
    assert refused.exit_code == 1 and "nothing was appended" in refused.stderr
    assert _sql(db, "SELECT max(position) FROM events") == [(12,)]


def test_a_single_edit_fails_at_its_position(run: Run, small: Path, db: str) -> None:
    anchor = _head(run)
    tamper(db_path(db), 5, '"amount":70', '"amount":7')
    result = run("verify", "--anchor", anchor, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert (report["ok"], report["first_bad_position"]) == (False, 5)


@pytest.mark.parametrize("anchor", ["12", "12:abc", "x:" + "0" * 64, "-1:" + "0" * 64, ""])
def test_bad_anchor_syntax_is_bad_input(run: Run, small: Path, anchor: str) -> None:
    result = run("verify", "--anchor", anchor)
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1 and "POSITION:HASH" in result.stderr


# -- signed anchors -----------------------------------------------------------------------


def _keys(tmp_path: Path, name: str, seed: int) -> tuple[Path, Path]:
    key = Ed25519PrivateKey.from_private_bytes(bytes([seed]) * 32)
    private, public = tmp_path / f"{name}.pem", tmp_path / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public


def test_out_dash_is_stdout_as_a_dash_is_stdin(run: Run, small: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`import -`, `reconcile -` and `whatif --policy -` read stdin; `export --out -` and
    `head --sign KEY --out -` wrote a file named `-` in the folder instead of stdout."""
    private, _ = _keys(tmp_path, "auditor", 7)
    monkeypatch.chdir(tmp_path)
    exported = run("export", "--out", "-")
    assert exported.exit_code == 0, exported.stderr
    assert exported.stdout == run("export").stdout and exported.stdout
    signed = run("head", "--sign", str(private), "--out", "-")
    assert signed.exit_code == 0, signed.stderr
    assert json.loads(signed.stdout)["position"] == 12
    assert not (tmp_path / "-").exists()


def test_signed_anchor_round_trip(run: Run, small: Path, tmp_path: Path, db: str) -> None:
    private, public = _keys(tmp_path, "auditor", 7)
    _, other = _keys(tmp_path, "other", 8)
    statement = tmp_path / "anchor.json"
    result = run("head", "--sign", str(private), "--out", str(statement))
    assert result.exit_code == 0, result.stderr
    assert stat.S_IMODE(os.stat(statement).st_mode) == 0o600
    content = json.loads(statement.read_text())
    assert content["position"] == 12
    # What was written is said on stderr: stdout stays empty for a script.
    assert result.stdout == ""
    assert f"wrote a signed anchor of 12:{content['hash']} to" in result.stderr
    assert f"{content['position']}:{content['hash']}" == _head(run)
    ok = run("verify", "--anchor-file", str(statement), "--public-key", str(public))
    assert ok.exit_code == 0, ok.stderr
    # The anchor it attests is checked, not only its signature.
    assert f"ok: holds anchor 12:{content['hash']} unchanged" in ok.stdout
    # The wrong key: refused, a failed check.
    wrong = run("verify", "--anchor-file", str(statement), "--public-key", str(other))
    assert wrong.exit_code == 1 and "signed by" in wrong.stderr
    # An edited statement: refused.
    content["position"] = 11
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(content))
    result = run("verify", "--anchor-file", str(edited), "--public-key", str(public))
    assert result.exit_code == 1 and "signature does not match" in result.stderr
    # Writing over the statement needs --force.
    again = run("head", "--sign", str(private), "--out", str(statement))
    assert again.exit_code == 2 and "--force" in again.stderr
    assert run("head", "--sign", str(private), "--out", str(statement),
               "--force").exit_code == 0
    # A statement that checks out, against a journal that no longer holds it.
    tamper(db_path(db), 4, '"amount":50', '"amount":5')
    result = run("verify", "--anchor-file", str(statement), "--public-key", str(public))
    assert result.exit_code == 1


def test_signed_anchor_options_go_together(run: Run, small: Path, tmp_path: Path) -> None:
    result = run("verify", "--anchor-file", str(tmp_path / "x.json"))
    assert result.exit_code == 2
    private, _ = _keys(tmp_path, "k", 3)
    result = run("head", "--sign", str(tmp_path / "missing.pem"))
    assert result.exit_code == 2 and "cannot read" in result.stderr
    result = run("head", "--sign", str(_keys(tmp_path, "k", 3)[1]))  # a public key
    assert result.exit_code == 2 and len(error_lines(result)) == 1
    statement = run("head", "--sign", str(private))
    assert statement.exit_code == 0 and json.loads(statement.stdout)["position"] == 12


# -- no database is ever created by reading ------------------------------------------------


@pytest.mark.parametrize("command", [["verify"], ["head"], ["balance", "a"],
                                     ["statement", "a"], ["export"], ["replay"],
                                     ["explain", "a"], ["revisions"]])
def test_reading_a_missing_file_is_bad_input(run: Run, db: str, command: list[str]) -> None:
    result = run(*command)
    assert result.exit_code == 2
    assert error_lines(result) == [
        f"gpu-credits: error: no database file {db_path(db)} (from {db}); a command that "
        "only reads never creates one: check --db or $GPU_CREDITS_DB, or create it with "
        "gpu-credits import or demo"]
    assert not db_path(db).exists()


def test_verify_counts_every_event_of_the_journal_reversed_ones_included(run: Run) -> None:
    """"N events, hash chain intact" is the journal's size: a reversed event and its
    reversal are in the chain checked, though the fold leaves the reversed one out."""
    for args in (("grant", "a", "100", "--at", "0", "--id", "g1"),
                 ("consume", "a", "5", "--at", "1", "--id", "c1"),
                 ("reverse", "c1", "--reason", "x")):
        assert run(*args).exit_code == 0
    assert _head(run).startswith("3:")
    for checkpointed in (False, True):
        text = run("verify")
        assert text.exit_code == 0, text.stderr
        assert text.stdout.startswith("ok: 3 events, hash chain intact")
        report = as_json(run("verify", "--json"))
        assert isinstance(report, dict) and report["ok"] is True and report["events"] == 3
        assert report["checkpoints"] == int(checkpointed)
        if not checkpointed:
            assert run("replay").exit_code == 0


def test_verify_on_an_empty_file_does_not_write_a_schema(run: Run, db: str) -> None:
    db_path(db).write_bytes(b"")
    result = run("verify")
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    conn = sqlite3.connect(db_path(db))
    try:
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    finally:
        conn.close()


# -- export never destroys -----------------------------------------------------------------


def test_export_refuses_the_journal_and_existing_files(run: Run, small: Path, db: str,
                                                       tmp_path: Path) -> None:
    for target in (db_path(db), Path(f"{db_path(db)}-wal")):
        result = run("export", "--out", str(target), "--force")
        assert result.exit_code == 2
        assert "journal's own file" in result.stderr
    assert run("verify").exit_code == 0
    out = tmp_path / "out.jsonl"
    out.write_text("keep me\n")
    result = run("export", "--out", str(out))
    assert result.exit_code == 2 and "--force" in result.stderr
    assert out.read_text() == "keep me\n"
    assert run("export", "--out", str(out), "--force").exit_code == 0
    assert len(out.read_text().splitlines()) == 12
    fresh = tmp_path / "fresh.jsonl"
    assert run("export", "--out", str(fresh)).exit_code == 0
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o600


# -- names are text, URLs are redacted -----------------------------------------------------

HOSTILE = """\
{"type": "grant", "account": "team[/red]", "amount": 10, "time": 0, "pool": "[bold]h100"}
{"type": "consume", "account": "team[/red]", "amount": 3, "time": 1, "pool": "[bold]h100"}
{"type": "grant", "account": ":smile: [link=http://x]y[/link]", "amount": 5, "time": 0}
{"type": "grant", "account": "team[/red]", "amount": 4, "time": 0, "expiry": 9, "pool": "[i]a"}
{"type": "submit", "account": "team[/red]", "job": "[bold]j", "cost": 2, "priority": 1, "time": 2}
"""


def test_names_from_the_journal_are_shown_literally(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "hostile[red].jsonl"
    path.write_text(HOSTILE)
    assert run("import", str(path)).exit_code == 0
    for command in (["statement", "team[/red]"], ["balance", "team[/red]"],
                    ["explain", "team[/red]"], ["balance", "team[/red]", "--pool", "[bold]h100"],
                    ["statement", ":smile: [link=http://x]y[/link]"]):
        result = run(*command)
        assert result.exit_code == 0, (command, result.stderr)
    assert "team[/red]" in run("statement", "team[/red]").stdout
    assert "[bold]h100" in run("balance", "team[/red]").stdout
    assert ":smile: [link=http://x]y[/link]" in run(
        "statement", ":smile: [link=http://x]y[/link]").stdout
    jobs = run("jobs").stdout
    assert "[bold]j" in jobs and "team[/red]" in jobs
    expiring = run("expiring", "--at", "2").stdout
    assert "team[/red]" in expiring and "[i]a" in expiring
    missing = run("balance", "nobody[/red]")
    assert missing.exit_code == 2 and "nobody[/red]" in missing.stderr


SECRET_URL = "postgresql+psycopg://auditor:hunter2@127.0.0.1:1/ledger"


@pytest.mark.parametrize("args", [
    ["--db", "mysql://auditor:hunter2@db.example/ledger", "verify"],
    ["--db", "mysql://auditor:hunter2@db.example/ledger", "db", "upgrade"],
    ["--db", SECRET_URL + "?connect_timeout=1", "balance", "a"],
    ["--db", "postgresql+psycopg://h:1/x?password=hunter2&connect_timeout=1", "verify"],
])
def test_passwords_are_never_printed(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0
    assert "hunter2" not in result.output
    assert "hunter2" not in result.stderr


def test_the_empty_journal_hint_hides_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import cli

    class Empty:
        url = SECRET_URL

        def head(self) -> int:
            return 0

    def refuse() -> None:
        from projections.errors import LedgerError

        raise LedgerError("unknown account 'a'")

    with pytest.raises(cli.CliError) as info:
        cli._known(Empty(), refuse)  # type: ignore[arg-type]
    assert "hunter2" not in str(info.value) and "auditor:***@" in str(info.value)


def test_redact() -> None:
    from tools.render import redact

    assert redact(f"cannot open {SECRET_URL}: refused") == (
        "cannot open postgresql+psycopg://auditor:***@127.0.0.1:1/ledger: refused")
    assert redact("sqlite:///x.db") == "sqlite:///x.db"
    assert redact("postgresql://h/db?password=pw&x=1") == "postgresql://h/db?password=***&x=1"
    assert redact("postgresql://u:p@ss@h/db") == "postgresql://u:***@h/db"


# -- no answer from an altered journal -----------------------------------------------------


@pytest.mark.parametrize("command", [["balance", "a"], ["statement", "a"], ["explain", "a"],
                                     ["explain", "--job", "j1"], ["replay"], ["revisions"],
                                     ["export"], ["head"], ["balance", "a", "--json"]])
def test_queries_refuse_an_altered_journal(run: Run, small: Path, db: str,
                                           command: list[str]) -> None:
    # Recorded by another writer after the import verified the journal up to its head.
    from eventstore import Journal, NewEvent

    with Journal(db) as journal:
        journal.append([NewEvent("later", "b", "consume", 12, {"account": "b", "amount": 1})])
    tamper(db_path(db), 13, '"amount":1', '"amount":2')
    result = run(*command)
    assert result.exit_code == 1
    assert result.stdout == ""
    (line,) = error_lines(result)
    assert "position 13" in line


@pytest.mark.parametrize("command", [["replay"], ["revisions"], ["export"], ["verify"]])
def test_commands_that_read_every_event_check_every_event(run: Run, small: Path, db: str,
                                                          command: list[str]) -> None:
    """Even the events the import already verified (the point queries check after it)."""
    tamper(db_path(db), 5, '"amount":70', '"amount":7')
    result = run(*command)
    assert result.exit_code == 1
    assert "position 5" in error_lines(result)[-1]


def test_area_commands_run_as_a_process(tmp_path: Path) -> None:
    # `python -m tools.cli` must know the commands the area modules register.
    result = cli("head", "--db", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert result.returncode == 2
    assert "no database file" in result.stderr
    assert not (tmp_path / "none.db").exists()


@pytest.mark.parametrize("state", ["'garbage'", "CAST(x'ff00fe' AS TEXT)"])
def test_a_checkpoint_stored_as_text_is_damaged_not_an_internal_error(
        run: Run, small: Path, db: str, state: str) -> None:
    """SQLite keeps text in the BLOB column: a query answers from the journal without
    it, and verify names it unreadable (exit 1), never a traceback."""
    assert run("replay").exit_code == 0
    _sql(db, f"UPDATE snapshots SET state = {state} WHERE name = 'ledger'",
         "UPDATE snapshots SET position = 'x7' WHERE name = 'verified-chain'")
    answered = run("balance", "a", "--json")
    assert answered.exit_code == 0, answered.stderr
    checked = run("verify")
    assert checked.exit_code == 1 and "unreadable" in checked.stderr
    assert "internal error" not in answered.stderr + checked.stderr


def test_an_export_of_an_altered_private_part_writes_nothing(run: Run, tmp_path: Path,
                                                            db: str) -> None:
    """The full check is verify's walk: a memo altered beside the chain is found before
    the first line goes to stdout, not halfway."""
    lines = [json.dumps({"type": "grant", "account": "a", "amount": 1, "time": t})
             for t in range(2000)]  # more than an export writes before its first read-back
    lines.append(json.dumps({"type": "consume", "account": "a", "amount": 3, "time": 2000,
                             "memo": "run 17"}))
    source = tmp_path / "many.jsonl"
    source.write_text("\n".join(lines) + "\n")
    assert run("import", str(source)).exit_code == 0
    _sql(db, "UPDATE private_parts SET data = replace(data, 'run 17', 'run 71')")
    result = run("export")
    assert result.exit_code == 1 and result.stdout == ""
    assert "does not match the seal" in result.stderr


def test_a_checkpoint_of_an_older_format_is_a_stale_cache_for_verify_too(
        run: Run, small: Path, db: str) -> None:
    """A checkpoint that an older gpu-credits saved (its header's version older, sealed
    as it was then): `balance` folds without it and `verify` passes, warning of it; the
    next replay saves a fresh one, which verify compares."""
    import hashlib

    import orjson

    from projections.checkpoint import MAGIC, _header_bytes

    assert run("replay").exit_code == 0
    ((rid, data),) = _sql(db, "SELECT id, state FROM snapshots WHERE name = 'ledger'")
    assert isinstance(data, bytes)
    end = data.find(b"\n", len(MAGIC))
    header, body = orjson.loads(data[len(MAGIC):end]), data[end + 1:]
    header.pop("sha256")
    header["version"] = 1
    header["sha256"] = hashlib.sha256(_header_bytes(header) + b"\n" + body).hexdigest()
    old = MAGIC + _header_bytes(header) + b"\n" + body
    _sql(db, f"UPDATE snapshots SET state = x'{old.hex()}' WHERE id = {rid}")
    answered = run("balance", "a", "--json")
    assert answered.exit_code == 0, answered.stderr
    checked = run("verify")
    assert checked.exit_code == 0, checked.stdout + checked.stderr
    assert "1 checkpoint(s) saved in another format" in checked.stdout
    stale = run("verify", "--json")
    assert stale.exit_code == 0
    assert ["version 1" in why for why in json.loads(stale.stdout)["stale_checkpoints"]] \
        == [True]
    from fastapi.testclient import TestClient

    from tools.service import create_app

    with TestClient(create_app(db, mount_web=False)) as client:
        answer = client.post("/v1/journal/verify").json()
    assert answer["ok"] and ["version 1" in why for why in answer["stale_checkpoints"]] \
        == [True]
    assert run("replay").exit_code == 0
    again = run("verify", "--json")
    assert again.exit_code == 0
    report = json.loads(again.stdout)
    assert report["checkpoints"] == 1 and report["stale_checkpoints"] == []
