"""A ledger answers the same on every machine: the real `gpu-credits` process under other
time zones, locales, stdout encodings and terminals prints what scripts read (JSON, CSV,
JSON Lines) byte for byte as it does under C.UTF-8 and UTC, and never stops half-way
through a table because the terminal cannot show a name."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import ROOT

# Names and memos a locale or an encoding could get wrong: accents, emoji, Turkish dotted
# and dotless i, right-to-left scripts, text that looks like Rich markup.
UNICODE_ACCOUNT = "\u00dcn\u00efc\u00f6d\u00e9 \U0001f680"
TURKISH_ACCOUNT = "\u0130stanbul-\u0131i"
JOB = "j\u00f6b-1"
EVENTS = "".join(json.dumps(event, ensure_ascii=False) + "\n" for event in [
    {"type": "account", "account": "ali", "max_running": 2},
    {"type": "grant", "account": "ali", "amount": 100, "time": 1764547200,
     "expiry": 1767225600, "pool": "h100",
     "memo": "PO 4411 \u2014 caf\u00e9 \u2615 \U0001f680"},
    {"type": "grant", "account": TURKISH_ACCOUNT, "amount": 50, "time": 1764547200,
     "expiry": 1765000000, "memo": "\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627"},
    {"type": "consume", "account": "ali", "amount": 30, "time": 1764633600, "pool": "h100",
     "memo": "[red]not markup[/red]"},
    {"type": "grant", "account": UNICODE_ACCOUNT, "amount": 7, "time": 1764633600,
     "memo": "\u00df \u05e2\u05d1\u05e8\u05d9\u05ea end"},
    {"type": "consume", "account": UNICODE_ACCOUNT, "amount": 10, "time": 1764720000},
    {"type": "submit", "account": "ali", "job": JOB, "cost": 8, "priority": 1,
     "time": 1764720000, "pool": "h100"},
    {"type": "start", "job": JOB, "time": 1764720100},
    {"type": "complete", "job": JOB, "success": False, "time": 1764720500,
     "refund_fraction": 0.5},
    {"type": "adjust", "account": "ali", "amount": -3, "time": 1764720600,
     "reason": "Gr\u00fc\u00dfe"},
])

# Times written without an offset are UTC wherever the command runs, on the days New York
# leaves (2025-11-02 01:30 happens twice there) and enters (2026-03-08 02:30 never happens
# there) summer time, and a date alone is midnight UTC.
SCRIPT_COMMANDS: dict[str, tuple[str, ...]] = {
    "export": ("export", "--recorded"),
    "statement-csv": ("statement", "ali", "--from", "2025-11-02T01:30",
                      "--to", "2026-03-08 02:30", "--csv"),
    "balance-json": ("balance", UNICODE_ACCOUNT, "--at", "2025-12-02", "--json"),
}

BASELINE = {"LC_ALL": "C.UTF-8", "TZ": "UTC"}

ENVIRONMENTS: dict[str, dict[str, str]] = {
    "new-york": {"LC_ALL": "C.UTF-8", "TZ": "America/New_York"},
    "posix": {"LC_ALL": "POSIX", "TZ": "UTC"},
    # Locales the machine may lack: Python still reads the variables.
    "turkish-chatham": {"LANG": "tr_TR.UTF-8", "LC_ALL": "tr_TR.UTF-8",
                        "TZ": "Pacific/Chatham"},
    "german-kolkata": {"LANG": "de_DE.UTF-8", "LC_ALL": "de_DE.UTF-8", "TZ": "Asia/Kolkata"},
    "ascii-stdout": {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "ascii"},
    "latin1-stdout": {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "latin-1",
                      "TZ": "Europe/Berlin"},
    # The C locale as Python sees it when it neither coerces it to C.UTF-8 nor turns on
    # its UTF-8 mode: every stream ASCII.
    "ascii-locale": {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"},
    "narrow-colour": {"LC_ALL": "C.UTF-8", "COLUMNS": "20", "FORCE_COLOR": "1",
                      "TERM": "xterm-256color"},
    "wide-plain": {"LC_ALL": "C.UTF-8", "COLUMNS": "300", "NO_COLOR": "1", "TERM": "dumb"},
}

# Under the ASCII locale the command line's own arguments arrive as bytes Python cannot
# decode, so a non-ASCII account typed there is refused (docs/cli.md).
NOT_IN = {"ascii-locale": {"balance-json"}}

# What a run takes from the test's own environment; everything else (locale, time zone,
# encodings, terminal) is set by the case.
_KEPT = ("PATH", "PYTHONPATH", "GPU_CREDITS_PURE_PYTHON", "SYSTEMROOT")


def _command() -> list[str]:
    """The installed console script beside this interpreter, else `python -m tools.cli`."""
    script = Path(sys.executable).with_name("gpu-credits")
    return [str(script)] if script.exists() else [sys.executable, "-m", "tools.cli"]


def gpu_credits(args: Sequence[str], *, env: dict[str, str], cwd: Path,
                home: Path | None = None, closed_stdout: bool = False,
                closed_stderr: bool = False, stdout: int | None = None,
                stderr: int | None = None) -> subprocess.CompletedProcess[bytes]:
    """One run of the console script with only `env` (and PATH, PYTHONPATH) set; bytes out
    (`closed_stdout`, `closed_stderr`: started without one, as `>&-` starts it; `stdout`,
    `stderr`: a file descriptor to write to instead of one the test reads)."""
    full = {k: os.environ[k] for k in _KEPT if k in os.environ}
    # This checkout's code, not the one the console script was installed from.
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), full.get("PYTHONPATH")) if p)
    if home is not None:
        full["HOME"] = str(home)
    full.update(env)
    closed = [fd for fd, shut in ((1, closed_stdout), (2, closed_stderr)) if shut]
    return subprocess.run([*_command(), *args], cwd=cwd, env=full, timeout=120, check=False,
                          stdout=subprocess.PIPE if stdout is None else stdout,
                          stderr=subprocess.PIPE if stderr is None else stderr,
                          preexec_fn=(lambda: [os.close(fd) for fd in closed]) if closed
                          else None)


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite journal holding EVENTS, written under the baseline environment."""
    folder = tmp_path_factory.mktemp("environments")
    (folder / "events.jsonl").write_text(EVENTS, encoding="utf-8")
    path = folder / "ledger.db"
    done = gpu_credits(["--db", f"sqlite:///{path}", "import", "events.jsonl"],
                       env=BASELINE, cwd=folder, home=folder)
    assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def baseline(ledger: Path) -> dict[str, bytes]:
    """What each script command prints under C.UTF-8 and UTC."""
    answers = {}
    for name, args in SCRIPT_COMMANDS.items():
        done = gpu_credits(["--db", f"sqlite:///{ledger}", *args], env=BASELINE,
                           cwd=ledger.parent, home=ledger.parent)
        assert done.returncode == 0 and done.stderr == b"", (name, done.stderr)
        answers[name] = done.stdout
    return answers


def test_the_baseline_is_utf8_and_plain(baseline: dict[str, bytes]) -> None:
    export = baseline["export"].decode("utf-8")
    assert UNICODE_ACCOUNT in export and TURKISH_ACCOUNT in export
    assert '"recorded_at": "20' in export and export.count("Z\"}\n") == 10
    assert "\x1b" not in "".join(v.decode("utf-8") for v in baseline.values())
    assert b'"at": 1764633600' in baseline["balance-json"]
    # The statement's window in UTC: the grant at 2025-12-01 is in, with its time.
    assert b"2025-12-01T00:00:00Z" in baseline["statement-csv"]


@pytest.mark.parametrize("case", list(ENVIRONMENTS))
def test_what_scripts_read_is_the_same_in_every_environment(
        case: str, ledger: Path, baseline: dict[str, bytes]) -> None:
    env = ENVIRONMENTS[case]
    for name, args in SCRIPT_COMMANDS.items():
        if name in NOT_IN.get(case, ()):
            continue
        done = gpu_credits(["--db", f"sqlite:///{ledger}", *args], env=env,
                           cwd=ledger.parent, home=ledger.parent)
        assert (done.returncode, done.stderr) == (0, b""), name
        assert done.stdout == baseline[name], name


@pytest.mark.parametrize("env", [ENVIRONMENTS["ascii-stdout"], ENVIRONMENTS["ascii-locale"]],
                         ids=["ascii-stdout", "ascii-locale"])
def test_a_table_naming_what_the_terminal_cannot_show_is_printed_whole(
        env: dict[str, str], ledger: Path) -> None:
    done = gpu_credits(["--db", f"sqlite:///{ledger}", "accounts"], env=env,
                       cwd=ledger.parent, home=ledger.parent)
    assert (done.returncode, done.stderr) == (0, b"")
    text = done.stdout.decode("ascii")
    # Each character the stream lacks is its escape; every row is there, the total too.
    assert "\\xdcn\\xefc\\xf6d\\xe9 \\U0001f680" in text
    assert "\\u0130stanbul-\\u0131i" in text and "total" in text
    # Escaped before the columns are measured: the table's edges stay in line.
    drawn = [line for line in text.splitlines() if line[:1] in "|+"]
    assert len(drawn) == 9 and len({len(line) for line in drawn}) == 1, text


def test_an_error_naming_what_the_terminal_cannot_show_is_one_line(ledger: Path) -> None:
    done = gpu_credits(["--db", f"sqlite:///{ledger}", "balance", "n\u00f6pe \U0001f680"],
                       env=ENVIRONMENTS["ascii-stdout"], cwd=ledger.parent,
                       home=ledger.parent)
    assert done.returncode == 2
    assert done.stdout == b""
    assert done.stderr.count(b"\n") == 1 and b"\\U0001f680" in done.stderr


@pytest.mark.parametrize(("args", "named"), [
    (("balance", UNICODE_ACCOUNT, "--json"), "ACCOUNT"),
    (("statement", "ali", "--from", "2025-11-02\u00b7"), "--from"),
    (("grant", "ali", "5", "--memo", "caf\u00e9"), "--memo"),
    (("grant", "caf\u00e9", "5"), "ACCOUNT"),
], ids=["read", "time", "memo", "write"])
def test_a_word_the_ascii_locale_cannot_decode_is_refused_in_one_line(
        args: tuple[str, ...], named: str, ledger: Path) -> None:
    before = ledger.read_bytes()
    done = gpu_credits(["--db", f"sqlite:///{ledger}", *args],
                       env=ENVIRONMENTS["ascii-locale"], cwd=ledger.parent, home=ledger.parent)
    assert (done.returncode, done.stdout) == (2, b"")
    lines = done.stderr.decode("ascii").splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"gpu-credits: error: {named} '")
    assert "cannot be read as text" in lines[0]
    assert "LANG=C.UTF-8" in lines[0] and "PYTHONUTF8=1" in lines[0]
    assert ledger.read_bytes() == before


def test_every_command_refuses_an_undecodable_word() -> None:
    """The check is the commands' class: one registered without it would take the word
    to the journal and end on an encoding error."""
    import typer

    from tools.cli import TextCommand, app

    def leaves(group: Any) -> list[tuple[str, object]]:
        found = []
        for name, command in group.commands.items():
            if hasattr(command, "commands"):  # a group (`db`)
                found += leaves(command)
            else:
                found.append((name, command))
        return found

    commands = leaves(typer.main.get_command(app))
    assert len(commands) > 20
    assert [n for n, c in commands if not isinstance(c, TextCommand)] == []


def test_under_the_ascii_locale_a_new_database_is_not_created_for_an_undecodable_name(
        tmp_path: Path) -> None:
    done = gpu_credits(["--db", f"sqlite:///{tmp_path}/new.db", "grant", "caf\u00e9", "5"],
                       env=ENVIRONMENTS["ascii-locale"], cwd=tmp_path)
    assert done.returncode == 2 and b"ACCOUNT 'caf\\xc3\\xa9'" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_under_the_ascii_locale_a_file_name_keeps_its_bytes(tmp_path: Path) -> None:
    """A path is not ledger text: the file system takes its bytes back as they came."""
    (tmp_path / "\u00e9v\u00e9nements.jsonl").write_text(EVENTS, encoding="utf-8")
    done = gpu_credits(["--db", f"sqlite:///{tmp_path}/l\u00e9dger.db", "import",
                        "\u00e9v\u00e9nements.jsonl"],
                       env=ENVIRONMENTS["ascii-locale"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "l\u00e9dger.db").exists()


@pytest.mark.parametrize("args", [("export",), ("accounts",)], ids=["export", "table"])
def test_without_a_stdout_the_answer_is_refused_in_one_line(
        args: tuple[str, ...], ledger: Path) -> None:
    done = gpu_credits(["--db", f"sqlite:///{ledger}", *args], env=BASELINE,
                       cwd=ledger.parent, closed_stdout=True)
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        "gpu-credits: error: cannot write the answer: stdout is closed (give the command a "
        "stdout, e.g. > FILE or > /dev/null)"]


def _gone_reader() -> int:
    """The writing end of a pipe whose reader went away (`| head -0`); the caller closes it."""
    read, write = os.pipe()
    os.close(read)
    return write


# `balance --pool` of a pool the account never had warns on stderr, then answers.
WARNS = ("balance", "ali", "--pool", "h10", "--at", "2025-12-02")


@pytest.mark.parametrize("where", ["gone-reader", "full-disk"])
def test_a_stderr_that_takes_nothing_loses_no_answer_and_no_exit_status(
        where: str, ledger: Path) -> None:
    """What is said on such a stderr is dropped, as on a closed one: the answer on stdout
    is whole and the exit status is the command's."""
    sink = _gone_reader() if where == "gone-reader" else os.open("/dev/full", os.O_WRONLY)
    try:
        runs = {name: gpu_credits(["--db", f"sqlite:///{ledger}", *args], env=BASELINE,
                                  cwd=ledger.parent, stderr=sink)
                for name, args in (("warns", WARNS), ("fails", ("balance", "nobody")))}
    finally:
        os.close(sink)
    plain = gpu_credits(["--db", f"sqlite:///{ledger}", *WARNS], env=BASELINE,
                        cwd=ledger.parent)
    assert b"warning" in plain.stderr and plain.returncode == 0
    assert (runs["warns"].returncode, runs["warns"].stdout) == (0, plain.stdout)
    assert (runs["fails"].returncode, runs["fails"].stdout) == (2, b"")


@pytest.mark.parametrize("closed_stderr", [False, True], ids=["stderr", "no-stderr"])
@pytest.mark.parametrize("args", [("balance", "ali"), ("balance", "ali", "--json"), WARNS,
                                  ("balance", "nobody")],
                         ids=["table", "json", "warning", "error"])
def test_a_stdout_reader_gone_is_answered_alike_by_every_output(
        args: tuple[str, ...], closed_stderr: bool, ledger: Path) -> None:
    """`| head -0`: the reader has what it wanted, exit 0, a table as JSON; an error is
    still its status."""
    sink = _gone_reader()
    try:
        done = gpu_credits(["--db", f"sqlite:///{ledger}", *args], env=BASELINE,
                           cwd=ledger.parent, stdout=sink, closed_stderr=closed_stderr)
    finally:
        os.close(sink)
    assert done.returncode == (2 if "nobody" in args else 0), done.stderr
    if not closed_stderr:
        assert b"Traceback" not in done.stderr and b"internal error" not in done.stderr


def test_default_database_in_an_odd_folder_without_home_under_umask_000(
        tmp_path: Path) -> None:
    folder = tmp_path / "ledger \u00fc \U0001f680 (copy)"
    folder.mkdir()
    (folder / "events.jsonl").write_text(EVENTS, encoding="utf-8")
    old = os.umask(0)
    try:
        # No --db, no $GPU_CREDITS_DB, no $HOME: the database is ./gpu-credits.db.
        done = gpu_credits(["import", "events.jsonl"], env={"LC_ALL": "POSIX"}, cwd=folder)
        assert done.returncode == 0, done.stderr
        out = gpu_credits(["export", "--out", "journal export.jsonl"],
                          env={"LC_ALL": "C", "PYTHONIOENCODING": "ascii"}, cwd=folder)
        assert out.returncode == 0, out.stderr
        printed = gpu_credits(["export"], env=BASELINE, cwd=folder)
    finally:
        os.umask(old)
    exported = folder / "journal export.jsonl"
    assert exported.read_bytes() == printed.stdout
    assert UNICODE_ACCOUNT in printed.stdout.decode("utf-8")
    # Neither the ledger nor its export is readable, let alone writable, by others.
    for path in (folder / "gpu-credits.db", exported):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
