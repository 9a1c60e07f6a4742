"""Backends are found by URL scheme and imported only when a URL asks for one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eventstore.backends import REGISTRY, backend_for


def test_a_sqlite_journal_never_imports_the_postgresql_driver(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'j.db'}"
    script = (
        "import sys\n"
        "from eventstore import Journal, NewEvent\n"
        f"j = Journal({url!r})\n"
        "j.append([NewEvent('a', 's', 't', 1, {})])\n"
        "assert j.verify() is None\n"
        "j.close()\n"
        "Journal().close()\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'psycopg'\n"
        "                or m == 'eventstore.backends.postgres')\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        (None, "SQLite"),
        ("sqlite://", "SQLite"),
        ("sqlite:///x.db", "SQLite"),
        ("sqlite+pysqlite:///x.db", "SQLite"),
        ("postgresql://u@h/d", "PostgreSQL"),
        ("postgres://u@h/d", "PostgreSQL"),
        ("postgresql+psycopg://u@h/d", "PostgreSQL"),
    ],
)
def test_the_url_scheme_chooses_the_backend(url: str | None, backend: str) -> None:
    chosen = backend_for(url, 1.0)
    assert chosen.name == backend
    if backend == "PostgreSQL":
        assert chosen.url.startswith("postgresql+psycopg://")


@pytest.mark.parametrize(
    "url", ["mysql://u:hunter2@h/d", "postgresql+asyncpg://u:hunter2@h/d", "nonsense", ""]
)
def test_an_unknown_scheme_is_refused_without_showing_the_password(url: str) -> None:
    with pytest.raises(ValueError, match="unsupported journal URL") as caught:
        backend_for(url, 1.0)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize("url", ["postgresql+psycopg://app:hun@ter2@127.0.0.1:1/ledger",
                                 "postgresql://app:p@ss@zq9@db/ledger"])
def test_a_password_holding_a_raw_at_sign_is_refused_without_showing_any_of_it(
        url: str) -> None:
    # The URL parser ends the password at its first '@', so the rest of it was taken for
    # the host and shown in the "cannot reach PostgreSQL at ter2@127.0.0.1" that followed.
    with pytest.raises(ValueError, match="%40") as caught:
        backend_for(url, 1.0)
    message = str(caught.value)
    assert "ter2" not in message and "ss@" not in message and "zq9" not in message


def test_every_registered_backend_names_an_importable_class() -> None:
    import importlib

    from eventstore.backend import Backend

    for target in set(REGISTRY.values()):
        module, _, name = target.partition(":")
        assert issubclass(getattr(importlib.import_module(module), name), Backend)


def test_no_backend_module_imports_the_registry() -> None:
    folder = Path(__file__).resolve().parents[2] / "eventstore" / "backends"
    for path in folder.glob("*.py"):
        if path.name == "__init__.py":
            continue
        text = path.read_text()
        assert "from . import" not in text and "eventstore.backends import" not in text
        assert "from .. import" not in text, path.name  # not the package face either
