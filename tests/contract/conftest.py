"""Fixtures of the contract suite: a CLI runner on the test's own SQLite file (`db`)."""

from __future__ import annotations

import pytest

from contract.kit import Run, cli_runner


@pytest.fixture
def cli(db: str) -> Run:
    """cli(*args, input=None, env=None, db_first=False): run gpu-credits with --db."""
    return cli_runner(db)
