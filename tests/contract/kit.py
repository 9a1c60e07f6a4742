"""Helpers of the contract suite: the CLI runner, readers of its answers, and a skip for
missing commands."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import pytest
import typer.main
from typer.testing import CliRunner, Result

from tools.cli import app

Run = Callable[..., Result]


def cli_runner(db: str) -> Run:
    """run(*args, input=None, env=None, db_first=False, use_db=True): gpu-credits through
    Typer's runner, with `--db db` after the arguments (before them with db_first)."""
    runner = CliRunner()

    def invoke(*args: str, input: str | bytes | None = None,
               env: dict[str, str] | None = None, db_first: bool = False,
               use_db: bool = True) -> Result:
        if not use_db:
            argv = list(args)
        elif db_first:
            argv = ["--db", db, *args]
        else:
            argv = [*args, "--db", db]
        return runner.invoke(app, argv, input=input, env=env, catch_exceptions=False)

    return invoke


def has_command(name: str) -> bool:
    """Whether `gpu-credits NAME` is registered (some arrive with other areas' work)."""
    group = typer.main.get_command(app)
    return name in getattr(group, "commands", {})


def needs(*names: str) -> pytest.MarkDecorator:
    """Skip until every named command exists."""
    missing = [n for n in names if not has_command(n)]
    return pytest.mark.skipif(bool(missing), reason=f"commands not registered: {missing}")


def last_number(text: str) -> int:
    """The last integer `text` prints: where `consume` puts the debt after it."""
    numbers = re.findall(r"-?\d+", text)
    assert numbers, text
    return int(numbers[-1])


def balance_json(cli: Run, account: str, *extra: str) -> dict[str, object]:
    """`gpu-credits balance ACCOUNT --json EXTRA...`, which must succeed, as an object."""
    result = cli("balance", account, "--json", *extra)
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert isinstance(answer, dict)
    return answer
