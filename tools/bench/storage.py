"""Where the benchmarks keep their data: SQLite files in a work folder, PostgreSQL schemas.

Every PostgreSQL measurement runs in a schema of its own (`bench_...`), created before
and dropped after, selected through libpq's ``options=-csearch_path=...`` so our journal
(and its Alembic version table), the raw driver and `eventsourcing` all stay inside it.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PG_ENV = "GPU_CREDITS_BENCH_PG"


def pg_base_url() -> str:
    """The PostgreSQL the benchmarks use: $GPU_CREDITS_BENCH_PG, else the local test database."""
    return os.environ.get(PG_ENV) or DEFAULT_PG


def _parts(url: str) -> Any:
    from sqlalchemy.engine import make_url

    return make_url(url)


def libpq_dsn(url: str) -> str:
    """A psycopg connection string for a SQLAlchemy URL (no driver suffix)."""
    u = _parts(url).set(drivername="postgresql")
    rendered: str = u.render_as_string(hide_password=False)
    return rendered


def schema_url(url: str, schema: str) -> str:
    """The SQLAlchemy URL whose connections use `schema` first on the search path."""
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}options={quote(f'-csearch_path={schema}')}"


def pg_version(url: str) -> str | None:
    """The server's version string, or None when it does not answer within 5 s."""
    try:
        import psycopg

        with psycopg.connect(libpq_dsn(url), connect_timeout=5) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return None if row is None else str(row[0])
    except Exception:
        return None


RUN_ENV = "GPU_CREDITS_BENCH_RUN"


def run_token() -> str:
    """This harness run's token (set by the parent, inherited by every case's process);
    every schema it creates starts with ``bench_<token>_`` so the run can drop them all."""
    token = os.environ.get(RUN_ENV)
    if not token:
        token = os.environ[RUN_ENV] = secrets.token_hex(3)
    return token


def schema_name(tag: str) -> str:
    """A schema name of this run, the same in every process for the same tag."""
    return f"bench_{run_token()}_{tag}"


def new_schema_name(tag: str) -> str:
    return schema_name(f"{tag}_{os.getpid()}_{secrets.token_hex(3)}")


def drop_run_schemas(url: str) -> int:
    """Drop every schema this run created (a killed case may have left some)."""
    import psycopg

    prefix = f"bench_{run_token()}_"
    with psycopg.connect(libpq_dsn(url), autocommit=True, connect_timeout=10) as conn:
        names = [r[0] for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", (prefix,))]
    for name in names:
        drop_schema(url, name)
    return len(names)


def create_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True, connect_timeout=10) as conn:
        conn.execute("SET lock_timeout = '30s'")
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def es_pg_env(url: str, schema: str) -> dict[str, str]:
    """`eventsourcing`'s PostgreSQL settings (its POSTGRES_* keys) for our URL and schema."""
    u = _parts(url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(u.database or "postgres"),
        "POSTGRES_HOST": str(u.host or "127.0.0.1"),
        "POSTGRES_PORT": str(u.port or 5432),
        "POSTGRES_USER": str(u.username or "postgres"),
        "POSTGRES_PASSWORD": str(u.password or ""),
        "POSTGRES_SCHEMA": schema,
    }


def es_sqlite_env(path: Path | str) -> dict[str, str]:
    """`eventsourcing`'s SQLite settings for a database file."""
    return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)}


def sqlite_url(path: Path | str) -> str:
    return f"sqlite:///{path}"


def remove_sqlite(path: Path | str) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        p = Path(f"{path}{suffix}")
        if p.exists():
            p.unlink()


def copy_sqlite(src: Path | str, dst: Path | str) -> None:
    """Copy a (checkpointed) SQLite database file and its WAL, if any."""
    remove_sqlite(dst)
    for suffix in ("", "-wal"):
        s = Path(f"{src}{suffix}")
        if s.exists():
            shutil.copyfile(s, f"{dst}{suffix}")


class Place:
    """A fresh place for one run's database: a SQLite file or a PostgreSQL schema.

    ``with Place(kind, workdir, pg_url) as p:`` gives ``p.url`` (our journal's URL),
    ``p.sqlite_path`` / ``p.dsn`` + ``p.schema`` (raw drivers) and ``p.es_env``
    (eventsourcing); everything is removed on exit.
    """

    def __init__(self, kind: str, workdir: str, pg_url: str | None, tag: str) -> None:
        self.kind = kind
        self.workdir = workdir
        self.pg_url = pg_url
        self.tag = tag
        self.sqlite_path = ""
        self.schema = ""
        self.url = ""
        self.dsn = ""

    def __enter__(self) -> Place:
        if self.kind == "sqlite":
            self.sqlite_path = str(Path(self.workdir) / f"{self.tag}-{secrets.token_hex(4)}.db")
            remove_sqlite(self.sqlite_path)
            self.url = sqlite_url(self.sqlite_path)
        else:
            assert self.pg_url is not None, "PostgreSQL case without a PostgreSQL URL"
            self.schema = new_schema_name(self.tag)
            create_schema(self.pg_url, self.schema)
            self.url = schema_url(self.pg_url, self.schema)
            self.dsn = libpq_dsn(self.pg_url)
        return self

    @property
    def es_env(self) -> dict[str, str]:
        if self.kind == "sqlite":
            return es_sqlite_env(self.sqlite_path)
        assert self.pg_url is not None
        return es_pg_env(self.pg_url, self.schema)

    def __exit__(self, *exc: object) -> None:
        if self.kind == "sqlite":
            remove_sqlite(self.sqlite_path)
        elif self.pg_url is not None:
            drop_schema(self.pg_url, self.schema)
