"""Fixtures for the command line: a fresh SQLite file per test, a runner, a demo database.

Every test gets its own `sqlite:///` file through `--db`; the demo month is written once
per session and copied for the tests that read it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_helpers import SMALL, Run
from typer.testing import CliRunner, Result

from tools.cli import app


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A fresh SQLite database URL for this test (the file does not exist yet)."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def run(db: str) -> Run:
    """run(*args, input=None, env=None): the CLI through Typer's runner, with --db <db>."""
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None,
               env: dict[str, str] | None = None, use_db: bool = True) -> Result:
        argv = [*args, "--db", db] if use_db else list(args)
        return runner.invoke(app, argv, input=input, env=env, catch_exceptions=False)

    return invoke


@pytest.fixture
def small(run: Run, tmp_path: Path) -> Path:
    """The database of the test, holding SMALL (12 events); returns the file imported."""
    path = tmp_path / "small.jsonl"
    path.write_text(SMALL)
    result = run("import", str(path))
    assert result.exit_code == 0, result.stderr
    return path


@pytest.fixture(scope="session")
def demo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo month (seed 42) written once per session into a SQLite file."""
    path = tmp_path_factory.mktemp("demo") / "demo.db"
    result = CliRunner().invoke(app, ["demo", "--db", f"sqlite:///{path}"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return path


@pytest.fixture
def demo_db(demo_file: Path, tmp_path: Path) -> str:
    """A copy of the demo database for this test."""
    copy = tmp_path / "demo.db"
    shutil.copyfile(demo_file, copy)
    return f"sqlite:///{copy}"


