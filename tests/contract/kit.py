"""Helpers of the contract suite: the CLI runner's type and a skip for missing commands."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import typer.main
from typer.testing import Result

from tools.cli import app

Run = Callable[..., Result]


def has_command(name: str) -> bool:
    """Whether `gpu-credits NAME` is registered (some arrive with other areas' work)."""
    group = typer.main.get_command(app)
    return name in getattr(group, "commands", {})


def needs(*names: str) -> pytest.MarkDecorator:
    """Skip until every named command exists."""
    missing = [n for n in names if not has_command(n)]
    return pytest.mark.skipif(bool(missing), reason=f"commands not registered: {missing}")
