"""Fixtures for the command line: a runner, a small ledger, a demo database.

Every test gets its own `sqlite:///` file (`db`, from tests/conftest.py) through `--db`;
the demo month is written once per session and copied for the tests that read it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_helpers import SMALL, Run, imported
from contract.kit import cli_runner
from typer.testing import CliRunner

from tools.cli import app


@pytest.fixture
def run(db: str) -> Run:
    """run(*args, input=None, env=None, use_db=True): the CLI through Typer's runner, with
    --db <db>."""
    return cli_runner(db)


@pytest.fixture
def small(run: Run, tmp_path: Path) -> Path:
    """The database of the test, holding SMALL (12 events); returns the file imported."""
    return imported(run, tmp_path / "small.jsonl", SMALL)


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


