"""demo, import and verify as real processes on fresh SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from cli_helpers import SMALL, cli, tamper


def test_demo_in_a_fresh_folder_uses_the_default_database(tmp_path: Path) -> None:
    done = cli("demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "gpu-credits.db").exists()
    assert "Audit summary" in done.stdout
    assert done.stderr == ""
    refused = cli("demo", "--seed", "1", cwd=tmp_path)
    assert refused.returncode == 2
    assert len(refused.stderr.splitlines()) == 1


def test_import_and_verify_as_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    (tmp_path / "small.jsonl").write_text(SMALL)
    done = cli("import", "small.jsonl", "--db", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "appended 12 events" in done.stdout
    again = cli("import", "-", stdin=SMALL.encode(), cwd=tmp_path,
                env={"GPU_CREDITS_DB": url})
    assert again.returncode == 0
    assert "appended 0 events, 12 already present" in again.stdout

    (tmp_path / "bad.jsonl").write_text('{"type": "grant", "account": "a"}\nnope\n')
    bad = cli("import", "bad.jsonl", "--db", url, cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "bad.jsonl:1: grant event is missing time",
        "bad.jsonl:2: not valid JSON: Expecting value at column 1",
        "gpu-credits: error: 2 invalid line(s) in bad.jsonl; nothing appended",
    ]
    assert "Traceback" not in bad.stderr

    ok = cli("verify", "--db", url, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    tamper(tmp_path / "p.db", 7, '"cost":8', '"cost":9')
    failed = cli("verify", "--db", url, cwd=tmp_path)
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == [
        "gpu-credits: error: verification failed at position 7: hash chain broken at "
        "position 7: its stored hash is not the one its content and its predecessor give: "
        "the record or its hash was altered"]


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    for argv in (["balance", "nobody"], ["balance", "a", "--at", "whenever"]):
        done = cli(*argv, "--db", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
        assert done.returncode == 2, argv
        assert len(done.stderr.splitlines()) == 1, done.stderr
        assert done.stderr.startswith("gpu-credits: error: ")


def test_a_checkpoint_passed_over_is_said_once_per_command_with_the_way_out(
        tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'p.db'}"
    (tmp_path / "small.jsonl").write_text(SMALL)
    assert cli("import", "small.jsonl", "--db", url, cwd=tmp_path).returncode == 0
    assert cli("replay", "--db", url, cwd=tmp_path).returncode == 0  # saves a checkpoint
    # Its bytes altered: it no longer checks out, and each command folds the journal.
    conn = sqlite3.connect(tmp_path / "p.db")
    with conn:
        (state,) = conn.execute("SELECT state FROM snapshots WHERE name = 'ledger'").fetchone()
        altered = bytes(state).replace(b'"position":12', b'"position":11', 1)
        assert altered != state
        conn.execute("UPDATE snapshots SET state = ? WHERE name = 'ledger'", (altered,))
    conn.close()
    for command in (("accounts",), ("jobs",), ("expiring",), ("balance", "a")):
        done = cli(*command, "--db", url, cwd=tmp_path)
        assert done.returncode == 0, (command, done.stderr)
        # A warning line as every other: a script watching stderr for the prefix sees it.
        assert done.stderr.splitlines() == [
            "gpu-credits: warning: checkpoint 2 at position 12 ignored (its own hash does "
            "not match its bytes): starting from an older checkpoint, or the journal's "
            "first event, instead (gpu-credits replay saves fresh checkpoints)"], command
    assert cli("replay", "--db", url, cwd=tmp_path).returncode == 0
    assert cli("accounts", "--db", url, cwd=tmp_path).stderr == ""
