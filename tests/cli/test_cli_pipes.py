"""A check's verdict survives a reader that goes away.

`gpu-credits verify | head -1` or `reconcile charges.csv | head` gives the reader what it
wanted and stops writing; the exit status is still the check's: 1 when it failed, so
`set -o pipefail` (or `${PIPESTATUS[0]}`) sees a failed check as failed, never as the
success of a reader that left early.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ROOT, SMALL, Run, cli, db_path, imported, tamper


def _reader_gone(args: list[str], db: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """gpu-credits ARGS with a stdout pipe its reader closed before it wrote a byte."""
    command = [sys.executable, "-m", "tools.cli", *args, "--db", db]
    script = (f"import subprocess, sys; p = subprocess.Popen({command!r}, cwd={str(cwd)!r}, "
              "stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True); "
              "p.stdout.close(); err = p.stderr.read(); code = p.wait(); "
              "sys.stderr.write(err); sys.exit(code)")
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


@pytest.fixture
def charges(run: Run, small: Path, tmp_path: Path) -> Path:
    """A charges file that disagrees with the small ledger: j1 was charged 4, not 5."""
    path = tmp_path / "charges.csv"
    path.write_text("account,job,amount\na,j1,5\n")
    return path


@pytest.mark.parametrize("form", [[], ["--json"], ["--csv"]], ids=["table", "json", "csv"])
def test_a_failed_reconcile_exits_1_when_its_reader_went_away(
        charges: Path, db: str, tmp_path: Path, form: list[str]) -> None:
    done = _reader_gone(["reconcile", str(charges), *form], db, tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args", [["statement", "a"], ["statement", "a", "--csv"],
                                  ["jobs", "--json"]], ids=lambda a: " ".join(a))
def test_an_answer_that_checks_nothing_exits_0_when_its_reader_went_away(
        run: Run, small: Path, db: str, tmp_path: Path, args: list[str]) -> None:
    done = _reader_gone(args, db, tmp_path)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("form", [[], ["--json"]], ids=["text", "json"])
def test_a_failed_verify_exits_1_and_says_why_when_its_reader_went_away(
        run: Run, db: str, tmp_path: Path, form: list[str]) -> None:
    imported(run, tmp_path / "small.jsonl", SMALL)
    tamper(db_path(db), 5, '"amount":70', '"amount":71')
    done = _reader_gone(["verify", *form], db, tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-credits: error: verification failed")


def test_a_passing_verify_exits_0_when_its_reader_went_away(
        run: Run, small: Path, db: str, tmp_path: Path) -> None:
    done = _reader_gone(["verify"], db, tmp_path)
    assert (done.returncode, done.stderr) == (0, "")


# -- what a file name can hold ---------------------------------------------------------------


ESCAPE_NAME = "c\x1b[31mred\x07.jsonl"


def test_a_file_name_cannot_send_control_codes_to_the_terminal(tmp_path: Path,
                                                               db: str) -> None:
    """A file name is the user's, but what it holds is anyone's who named the file: its
    control characters are shown escaped (`\\x1b`), in the summary and in an error, never
    sent to the terminal as they are (an escape sequence could recolour or rewrite it)."""
    (tmp_path / ESCAPE_NAME).write_text(
        '{"type": "grant", "account": "a", "amount": 5, "time": 1}\n')
    done = cli("import", ESCAPE_NAME, "--db", db, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "c\\x1b[31mred\\x07.jsonl: appended 1 event" in done.stdout
    charges = tmp_path / ("charges" + ESCAPE_NAME)
    charges.write_text("account,job,amount\na,nope,1\n")
    reconciled = cli("reconcile", charges.name, "--db", db, cwd=tmp_path)
    assert reconciled.returncode == 1, reconciled.stderr
    assert "\x1b" not in reconciled.stdout and "chargesc\\x1b[31m" in reconciled.stdout
    exported = cli("export", "--out", "out" + ESCAPE_NAME, "--db", db, cwd=tmp_path)
    assert exported.returncode == 0 and "\x1b" not in exported.stderr, exported.stderr
    assert "to outc\\x1b[31mred\\x07.jsonl" in exported.stderr
    missing = cli("import", "no" + ESCAPE_NAME, "--db", db, cwd=tmp_path)
    assert missing.returncode == 2
    assert "\x1b" not in missing.stderr and "\x07" not in missing.stderr
    assert "cannot read noc\\x1b[31mred\\x07.jsonl" in missing.stderr


def test_a_warning_from_the_database_is_one_line_without_its_password(
        run: Run, small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A database's message runs over lines (the statement, a link) and may quote its URL:
    the warning that carries it is one line, the password shown as ***."""
    from eventstore import JournalError
    from projections import anchors

    def refuse(journal: object) -> None:
        raise JournalError("disk I/O error\n[SQL: UPDATE journal_marks]\n"
                           "(at postgresql+psycopg://ledger:s3cret@db/ledger)")

    monkeypatch.setattr(anchors, "advance_verified", refuse)
    result = run("grant", "a", "5", "--at", "20")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu-credits: warning: ")
    assert "s3cret" not in result.stderr and "ledger:***@db" in result.stderr


@pytest.mark.parametrize(("args", "command"), [
    (["balance", "a", "--at"], "balance"), (["statement", "a", "--from"], "statement"),
    (["--db", "sqlite:///x.db", "explain", "--job"], "explain"), (["db", "upgrade", "--bogus"],
                                                                 "db upgrade"),
    (["balance"], "balance"), (["--bogus"], None)])
def test_a_usage_error_points_to_the_help_of_its_command(run: Run, args: list[str],
                                                         command: str | None) -> None:
    """An option given without its value is the command's usage error: the hint names that
    command's help, as for an unknown option or a missing argument."""
    result = run(*args, use_db=False)
    assert result.exit_code == 2
    hint = "gpu-credits" + (f" {command}" if command else "") + " --help"
    assert result.stderr.rstrip().endswith(f"(see '{hint}')"), result.stderr


@pytest.mark.parametrize("args", [["--help"], [], ["statement", "--help"], ["db"]],
                         ids=lambda a: " ".join(a) or "no-args")
def test_help_to_a_reader_gone_exits_0(tmp_path: Path, args: list[str]) -> None:
    """`gpu-credits --help | head -1` is answered as every other reader that went away:
    exit 0, nothing on stderr (the help's own console exited 1)."""
    command = [sys.executable, "-m", "tools.cli", *args]
    script = (f"import subprocess, sys; p = subprocess.Popen({command!r}, "
              "stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True); "
              "p.stdout.close(); err = p.stderr.read(); code = p.wait(); "
              "sys.stderr.write(err); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["balance", "a"], ["balance", "a", "--json"],
                                  ["export"], ["statement", "a", "--csv"]],
                         ids=lambda a: " ".join(a))
def test_a_full_stdout_is_named_in_the_error(run: Run, small: Path, db: str,
                                             tmp_path: Path, args: list[str]) -> None:
    """stdout on a full disk (`> /dev/full`) is an error that says what could not be
    written, as `--out FILE` names its file: exit 2, one line."""
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "tools.cli", *args, "--db", db],
                              cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr == ("gpu-credits: error: cannot write the answer to stdout: "
                           "No space left on device\n")


# -- --out over what is not a file of the command's own ------------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_failed_export_never_removes_a_path_it_did_not_create(
        run: Run, small: Path, tmp_path: Path) -> None:
    """`--out LINK --force` where LINK leads to a device (`/dev/stdout` does) that fails
    the write: the error is said, and LINK stays; only a file the export made itself is
    removed when its write fails."""
    link = tmp_path / "out.jsonl"
    link.symlink_to("/dev/full")
    result = run("export", "--out", str(link), "--force")
    assert result.exit_code == 2 and "No space left on device" in result.stderr
    assert link.is_symlink() and Path("/dev/full").exists()


def test_a_fifo_whose_reader_left_stays_a_fifo(run: Run, tmp_path: Path, db: str) -> None:
    """`export --out FIFO --force` whose reader goes away: the FIFO is not removed."""
    import os
    import threading

    big = tmp_path / "big.jsonl"
    big.write_text("".join(
        json.dumps({"type": "consume", "account": "a", "amount": 1, "time": 10 + i}) + "\n"
        for i in range(5_000)))
    assert run("import", str(big)).exit_code == 0
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def read_one_line() -> None:
        with open(fifo, encoding="utf-8") as reader:
            reader.readline()

    reader = threading.Thread(target=read_one_line)
    reader.start()
    done = cli("export", "--out", str(fifo), "--force", "--db", db, cwd=tmp_path)
    reader.join(timeout=60)
    assert done.returncode in (0, 2), done.stderr
    assert fifo.exists() and stat.S_ISFIFO(fifo.stat().st_mode)


@pytest.mark.parametrize(("term", "args"), [
    ("dumb", ["replay"]), ("xterm-256color", ["replay"]),
    ("xterm-256color", ["replay", "--json"]), ("xterm-256color", ["revisions", "--json"]),
    ("xterm-256color", ["verify", "--json"])], ids=lambda v: v if isinstance(v, str)
    else " ".join(v))
def test_no_progress_bar_and_no_blank_line_on_a_dumb_terminal(
        run: Run, small: Path, db: str, term: str, args: list[str]) -> None:
    """A progress bar needs a terminal that can redraw a line: on TERM=dumb none is drawn,
    and nothing at all (not a stray blank line) reaches stderr; other terminals show it,
    unless the answer is `--json`, for a script (as `verify --json` always had it)."""
    import os
    import pty

    controller, terminal = pty.openpty()
    try:
        env = {**os.environ, "TERM": term, "PYTHONPATH": str(ROOT)}
        env.pop("COLUMNS", None)
        done = subprocess.run([sys.executable, "-m", "tools.cli", *args, "--db", db],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=terminal, env=env,
                              timeout=120, check=False)
        os.close(terminal)
        said = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # the terminal's other end is closed: all read
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(controller)
    assert done.returncode == 0 and done.stdout
    if term == "dumb" or "--json" in args:
        assert said == b""
    else:
        assert b"replaying" in said
