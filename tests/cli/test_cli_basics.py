"""The command line's frame: --db anywhere, GPU_CREDITS_DB, exit codes, one-line errors."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import SMALL, Run, as_json, error_lines
from typer.testing import CliRunner

from projections import queries
from tools.cli import app, program_path


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("demo", "import", "export", "balance", "statement", "explain",
                    "revisions", "replay", "verify", "db"):
        assert command in result.stdout


def test_every_command_names_its_arguments_in_capitals_as_the_docs_do() -> None:
    """`gpu-credits balance ACCOUNT`, as the docs and `grant ACCOUNT AMOUNT` write it: a
    usage line reading `balance {account}` beside `grant {ACCOUNT} {AMOUNT}` reads as
    two kinds of thing."""
    import typer.main

    def arguments(command: Any, path: str = "gpu-credits") -> list[tuple[str, str]]:
        """(command, the name its usage line shows) for each argument, subcommands too."""
        named = [(path, param.metavar or param.name) for param in command.params
                 if param.param_type_name == "argument"]
        for name, sub in getattr(command, "commands", {}).items():
            named += arguments(sub, f"{path} {name}")
        return named

    shown = arguments(typer.main.get_command(app))
    assert shown and [(c, name) for c, name in shown if not name.isupper()] == []


@pytest.mark.parametrize(("argv", "lists"), [([], "balance"), (["db"], "upgrade")])
def test_a_group_without_a_command_prints_its_help_and_exits_0(argv: list[str],
                                                                lists: str) -> None:
    # Its help is the answer to "what can I run?", not a usage error.
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.stderr
    assert "Usage:" in result.stdout and lists in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("argv", [
    ["bogus"],
    ["balance"],
    ["balance", "a", "--bogus"],
    ["balance", "a", "--at", "yesterday"],
    # Times and durations beyond +-(2**53 - 1), the limit of every time.
    ["balance", "a", "--at", "9007199254740992"],
    ["accounts", "--at", "-9007199254740992"],
    ["expiring", "--within", "99999999999999999999d"],
    ["expiring", "--within", "0"],  # a window of no time
    ["export", "--format", "xml"],
    ["statement", "a", "--csv", "--json"],
    ["explain"],
    ["explain", "a", "--job", "j1"],
])
def test_usage_errors_exit_2_with_one_line(run: Run, argv: list[str]) -> None:
    result = run(*argv)
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-credits: error: ")
    assert result.stdout == ""


def test_db_before_or_after_the_command(tmp_path: Path) -> None:
    runner = CliRunner()
    source = tmp_path / "small.jsonl"
    source.write_text(SMALL)
    first, second = f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
    assert runner.invoke(app, ["--db", first, "import", str(source)]).exit_code == 0
    assert runner.invoke(app, ["import", str(source), "--db", second]).exit_code == 0
    a = runner.invoke(app, ["balance", "a", "--json", "--db", first])
    b = runner.invoke(app, ["--db", second, "balance", "a", "--json"])
    assert as_json(a) == as_json(b)
    # The command's own --db wins over the app's.
    c = runner.invoke(app, ["--db", f"sqlite:///{tmp_path / 'none.db'}", "balance", "a",
                            "--json", "--db", first])
    assert as_json(c) == as_json(a)


def test_gpu_credits_db_environment_variable(tmp_path: Path) -> None:
    runner = CliRunner()
    source = tmp_path / "small.jsonl"
    source.write_text(SMALL)
    env = {"GPU_CREDITS_DB": f"sqlite:///{tmp_path / 'env.db'}"}
    assert runner.invoke(app, ["import", str(source)], env=env).exit_code == 0
    assert (tmp_path / "env.db").exists()
    result = runner.invoke(app, ["balance", "b", "--json"], env=env)
    assert as_json(result)["balance"] == -10  # type: ignore[index]


def test_default_database_in_the_current_folder(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPU_CREDITS_DB", raising=False)
    (tmp_path / "small.jsonl").write_text(SMALL)
    result = CliRunner().invoke(app, ["import", "small.jsonl"])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "gpu-credits.db").exists()


def test_reading_a_missing_database_creates_nothing(run: Run, db: str) -> None:
    result = run("balance", "a")
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    assert "no database file" in result.stderr
    assert not Path(db.removeprefix("sqlite:///")).exists()
    exported = run("export")
    assert (exported.exit_code, exported.stdout) == (2, "")
    assert not Path(db.removeprefix("sqlite:///")).exists()


def test_db_upgrade_creates_then_keeps_the_schema(run: Run, db: str) -> None:
    first = run("db", "upgrade")
    assert first.exit_code == 0, first.stderr
    assert "upgraded" in first.stdout
    again = CliRunner().invoke(app, ["--db", db, "db", "upgrade"])
    assert again.exit_code == 0
    assert "already" in again.stdout


def test_an_unusable_database_url_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["replay", "--db", "mysql://nowhere/x"])
    assert result.exit_code == 2
    (line,) = error_lines(result)
    # What would be valid, as a command line can give it: a URL, never Python's None.
    assert "'mysql://nowhere/x'" in line and "sqlite:///" in line and "None" not in line, line
    not_a_db = tmp_path / "junk.db"
    not_a_db.write_text("this is not a database " * 100)
    result = CliRunner().invoke(app, ["replay", "--db", f"sqlite:///{not_a_db}"])
    assert result.exit_code == 2, result.stderr
    assert len(error_lines(result)) == 1


@pytest.mark.parametrize("argv", [
    ["--db", "", "grant", "a", "5", "--at", "1"],
    ["grant", "a", "5", "--at", "1", "--db", ""],
    ["--db", " ", "balance", "a"],
    ["db", "upgrade", "--db", ""],
])
def test_an_empty_db_is_refused_not_read_as_no_db(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  argv: list[str]) -> None:
    # `--db "$LEDGER"` with the variable unset must not write to the default database.
    monkeypatch.chdir(tmp_path)
    env = {"GPU_CREDITS_DB": f"sqlite:///{tmp_path / 'env.db'}"}
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "--db" in lines[0] and "empty" in lines[0], result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
@pytest.mark.parametrize("argv", [
    ["grant", "a", "5", "--at", "1"],
    ["import", "-"],
    ["db", "upgrade"],
])
def test_a_command_that_writes_refuses_an_in_memory_database(url: str,
                                                             argv: list[str]) -> None:
    # It would say "recorded" and keep nothing: the database ends with the command.
    result = CliRunner().invoke(app, [*argv, "--db", url], input=SMALL)
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and "in-memory" in lines[0], result.stderr
    assert "recorded" not in result.stdout and "appended" not in result.stdout


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_demo_runs_on_an_in_memory_database(url: str) -> None:
    # What it writes is there to be shown: the balances and the audit summary still print.
    result = CliRunner().invoke(app, ["demo", "--db", url])
    assert result.exit_code == 0, result.stderr
    assert "balance" in result.stdout.lower()
    assert "gone with the command" in result.stdout and "Try:" not in result.stdout
    # The audit summary counts what the month sent: appended, duplicates, late events.
    audit = [" ".join(line.split()) for line in result.stdout.splitlines()]
    for row in ("events appended", "duplicates sent", "late events"):
        assert any(re.match(rf"{row} [0-9,]+ ", line) for line in audit), row


ERROR = "gpu-credits: error: "


@pytest.mark.parametrize(("argv", "expected"), [
    # A name with a doubled inner space is not the known name with one, which the error
    # names as the one it may have meant.
    (["balance", "team  a"], "unknown account 'team  a'; the journal holds 'team a', "
     "spelled otherwise only in letter case, spaces or Unicode form (known: ' pad', team a)"),
    (["balance", "team a  "], "unknown account 'team a  '; the journal holds 'team a', "
     "spelled otherwise only in letter case, spaces or Unicode form (known: ' pad', team a)"),
    # A known name with a leading space is listed with it, quoted (as is any name a
    # plain list would make ambiguous).
    (["balance", "pad"], "unknown account 'pad'; the journal holds ' pad', spelled "
     "otherwise only in letter case, spaces or Unicode form (known: ' pad', team a)"),
    (["adjust", "team a", "5", "--reason", "   "], "got '   '"),
    (["statement", "team a", "--from", "x  \t y"], "not a time: 'x  \\t y'"),
    # A value the message does not quote with repr (a path) keeps its tabs and spaces.
    (["reconcile", "no  such\tfile.csv"], "cannot read no  such\tfile.csv: "),
])
def test_an_error_quotes_each_value_as_given(run: Run, tmp_path: Path, argv: list[str],
                                             expected: str) -> None:
    assert run("grant", "team a", "5", "--at", "0").exit_code == 0
    source = tmp_path / "pad.jsonl"
    source.write_text('{"type": "grant", "account": " pad", "amount": 5, "time": 0}\n')
    assert run("import", str(source)).exit_code == 0
    result = run(*argv)
    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 1 and lines[0].startswith(ERROR), result.stderr
    assert expected in lines[0]


def test_an_error_spanning_lines_is_one_line_with_its_values_intact(
        capsys: pytest.CaptureFixture[str]) -> None:
    # A library's message may span lines (an SQL error with its statement, indented):
    # each break and the indentation around it become one space, nothing else changes.
    from tools.cli import _say_error
    _say_error("  bad value 'a  b\tc' in\n    [SQL: SELECT  1]\r\n\tdone  ")
    assert capsys.readouterr().err == (
        f"{ERROR}bad value 'a  b\tc' in [SQL: SELECT  1] done\n")


def test_a_warning_quotes_its_value_as_given(run: Run) -> None:
    result = run("consume", "new  team", "5", "--at", "0")
    assert result.exit_code == 0, result.stderr
    warning, = result.stderr.splitlines()
    assert warning.startswith("gpu-credits: warning: account 'new  team' had no event")


def test_version_names_the_release_the_build_and_the_schema(tmp_path: Path) -> None:
    from importlib.metadata import version

    from eventstore.migrate import HEAD_REVISION, code_head
    from projections import native

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    build = "compiled" if native.in_use() else "Python source"
    assert result.stdout == (f"gpu-credits {version('gpu-credits')} (fold: {build}; "
                             f"journal schema {code_head()}; Python "
                             f"{sys.version.split()[0]})\n")
    assert code_head() == HEAD_REVISION
    # Eager: it answers before any command or database is looked at, and creates none.
    db = tmp_path / "never.db"
    again = CliRunner().invoke(app, ["--db", f"sqlite:///{db}", "--version", "balance"])
    assert again.exit_code == 0 and again.stdout == result.stdout
    assert not db.exists()


@pytest.mark.parametrize(("raised", "code", "said"), [
    (KeyboardInterrupt, 130, []),  # Ctrl-C: the shell's status for SIGINT, quietly
    (EOFError, 1, ["gpu-credits: error: aborted"]),  # click's Abort
])
def test_an_interrupted_command_exits_without_a_traceback(
        run: Run, small: Path, monkeypatch: pytest.MonkeyPatch, raised: type[BaseException],
        code: int, said: list[str]) -> None:
    def interrupted(*_: object, **__: object) -> None:
        raise raised

    monkeypatch.setattr(queries, "accounts", interrupted)
    result = run("accounts")
    assert (result.exit_code, result.stdout) == (code, "")
    assert [line for line in error_lines(result) if line] == said


def test_the_app_called_in_process_returns_the_exit_status(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # standalone_mode=False: the status is returned, not exited with (the benchmarks run
    # `import` this way and check it).
    db = f"sqlite:///{tmp_path / 'none.db'}"
    assert app(["--db", db, "balance", "a"], standalone_mode=False) == 2
    assert capsys.readouterr().err.startswith("gpu-credits: error: no database file")
    assert app(["--db", db, "bogus"], standalone_mode=False) == 2
    assert app(["--version"], standalone_mode=False) == 0


def test_the_demo_s_hints_run_this_program_as_the_user_would_type_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "gpu-credits"
    script.write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script)])
    # The name on $PATH is this program: its name.
    monkeypatch.setattr(shutil, "which", lambda name: str(script))
    assert program_path() == "gpu-credits"
    # Another program by that name on $PATH (or none): this one's path, from here.
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert program_path() == "venv/bin/gpu-credits"
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert program_path() == str(script.resolve())
    # Started another way (python -m tools.cli): the name when $PATH has it, else how.
    monkeypatch.setattr(sys, "argv", ["/somewhere/tools/cli.py"])
    assert program_path() == f"{sys.executable} -m tools.cli"
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/gpu-credits")
    assert program_path() == "gpu-credits"
