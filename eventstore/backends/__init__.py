"""The SQL backends, found by URL scheme and imported only when a URL asks for one.

Like SQLAlchemy's dialect registry: the table below names each backend as
"module:Class", and `backend_for` imports the module the URL's scheme selects, so
opening a SQLite journal never imports psycopg. A backend module imports only the
interface it implements (`eventstore.backend`), never this module: adding a backend
is one line here and one module beside the others.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from eventstore.errors import NotAJournalURL, shown

if TYPE_CHECKING:
    from ..backend import Backend

#: URL scheme (the part before "+driver") -> "module:Class".
REGISTRY: dict[str, str] = {
    "sqlite": "eventstore.backends.sqlite:SQLiteBackend",
    "postgresql": "eventstore.backends.postgres:PostgresBackend",
    "postgres": "eventstore.backends.postgres:PostgresBackend",
}

#: The URL a scheme's journal is opened with, when the scheme names no driver.
_DRIVER = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}

#: Drivers each backend is written for (its SQL goes to the driver directly).
_DRIVERS = {"sqlite": {"", "pysqlite"}, "postgresql": {"", "psycopg"}, "postgres": {"", "psycopg"}}


def _unsupported(url: str) -> ValueError:
    from ..backend import redact

    # Only what a URL can be: the command line and the service pass this on, and Python's
    # None (an in-memory journal) is no word a user can type there.
    return ValueError(
        f"unsupported journal URL {redact(url)!r}: use sqlite:///path.db or "
        "postgresql+psycopg://user@host:port/database"
    )


def backend_for(url: str | None, lock_timeout: float, *, read_only: bool = False) -> Backend:
    """The backend for a URL: None or sqlite:... -> SQLite, postgresql... -> PostgreSQL."""
    if url is None:
        url = "sqlite://"
    if isinstance(url, os.PathLike):
        # A pathlib.Path to the file is the usual slip: say the URL that names it.
        path = os.fspath(url)
        raise NotAJournalURL(f"a journal URL is text, got the path {path!r}: for a SQLite "
                             f"file pass 'sqlite:///{path}'")
    if not isinstance(url, str):
        raise NotAJournalURL("a journal URL must be a str such as 'sqlite:///ledger.db', or "
                             f"None (in memory), got {shown(url)} ({type(url).__name__})")
    head, sep, rest = url.partition(":")
    scheme, _, driver = head.lower().partition("+")
    target = REGISTRY.get(scheme)
    if not sep or target is None or driver not in _DRIVERS[scheme]:
        raise _unsupported(url)
    if scheme in _DRIVER:
        # Only psycopg 3 is supported: accept the bare scheme and mean it.
        url = _DRIVER[scheme] + ":" + rest
    module, _, name = target.partition(":")
    cls: type[Backend] = getattr(importlib.import_module(module), name)
    return cls(url, lock_timeout, read_only=read_only)
