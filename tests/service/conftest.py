"""Fixtures of the HTTP service tests: an app on a fresh journal, with a settable clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tools.service import create_app
from tools.service.auth import Token


class Clock:
    """The service's clock for live decisions: a number the test moves."""

    def __init__(self, now: int = 100) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'service.db'}"


@pytest.fixture
def client(db_url: str, clock: Clock) -> Iterator[TestClient]:
    """A client of a service on an empty SQLite journal, no tokens."""
    with TestClient(create_app(db_url, clock=clock, mount_web=False)) as c:
        yield c


TOKENS = {
    "worker": "worker-token-0123456789",
    "finance": "finance-token-0123456789",
    "auditor": "auditor-token-0123456789",
}


@pytest.fixture
def secured(db_url: str, clock: Clock) -> Iterator[TestClient]:
    """A client of a service with one token per role."""
    tokens = [Token(role, secret.encode()) for role, secret in TOKENS.items()]
    with TestClient(create_app(db_url, clock=clock, tokens=tokens, mount_web=False)) as c:
        yield c


def bearer(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role]}"}
