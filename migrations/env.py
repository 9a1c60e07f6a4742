"""Alembic environment for the journal.

The journal passes its own open connection in `config.attributes["connection"]`
(so an in-memory SQLite database and the caller's transaction are reused, and the
upgrade runs under the journal's write lock). Alembic's command line instead gives
a URL: `-x url=...`, else `sqlalchemy.url`, else $GPU_CREDITS_DB.
"""

from __future__ import annotations

import os

from alembic import context

from eventstore.backends import backend_for
from eventstore.migrate import MIGRATION_LOCK
from eventstore.schema import metadata

config = context.config


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=metadata,
        # SQLite cannot ALTER most things: later migrations rebuild tables in batch.
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url")
    url = url or config.get_main_option("sqlalchemy.url") or os.environ.get("GPU_CREDITS_DB")
    if not url:
        raise SystemExit("give a database: alembic -x url=sqlite:///gpu-credits.db ...")
    return url


if context.is_offline_mode():
    # One transaction on every dialect, as `db upgrade` runs it: Alembic leaves BEGIN and
    # COMMIT out of a SQLite script unless told that its DDL is transactional (it is).
    context.configure(url=_url(), target_metadata=metadata, literal_binds=True,
                      transactional_ddl=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    given = config.attributes.get("connection")
    if given is not None:
        _run(given)
    else:
        # Opened as `gpu-credits db upgrade` opens it: a new SQLite file made 0600 (a
        # journal holds personal data), never another application's file, the journal's
        # pragmas, and one transaction under the journal's write lock.
        backend = backend_for(_url(), 10.0)
        backend.prepare()
        engine = backend.create_engine()
        try:
            with engine.connect() as conn, backend.begin_write(conn, [MIGRATION_LOCK]):
                _run(conn)
        finally:
            engine.dispose()
