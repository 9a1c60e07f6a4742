"""Fixtures of the contract suite: a fresh SQLite file per test and a CLI runner."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from contract.kit import Run
from tools.cli import app


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture
def cli(db: str) -> Run:
    """cli(*args, input=None, env=None, db_first=False): run gpu-credits with --db."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None,
               db_first: bool = False, use_db: bool = True) -> Result:
        if not use_db:
            argv = list(args)
        elif db_first:
            argv = ["--db", db, *args]
        else:
            argv = [*args, "--db", db]
        return runner.invoke(app, argv, input=input, env=env, catch_exceptions=False)

    return invoke
