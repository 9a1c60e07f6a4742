"""The schema: created only by Alembic, no drift from the models, newer revisions refused.

Also how opening fails: an unreachable database and a database never upgraded
each give one clear error.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import io
import os
import pkgutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from journal_testkit import ev
from sqlalchemy import create_engine, inspect, text

import eventstore
from eventstore import Batch, ConnectionProblem, Journal, SchemaError
from eventstore.migrate import alembic_config, code_head
from eventstore.schema import metadata
from eventstore.testing import write_at_revision


@pytest.fixture
def upgraded(database_url: str) -> Iterator[Journal]:
    j = Journal(database_url)
    yield j
    j.close()


def test_upgrade_from_empty_creates_the_journal(database_url: str) -> None:
    assert eventstore.upgrade(database_url) == (None, code_head())
    assert eventstore.upgrade(database_url) == (code_head(), code_head())
    engine = create_engine(database_url)
    with engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        assert {"events", "journal_head", "snapshots", "alembic_version"} <= tables
        assert conn.execute(text("SELECT position, hash FROM journal_head")).all() == [
            (0, "0" * 64)
        ]
    engine.dispose()
    with Journal(database_url, upgrade=False) as j:
        assert j.head() == 0 and j.verify() is None


def test_models_and_migrations_do_not_drift(upgraded: Journal) -> None:
    with upgraded._engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(ctx, metadata) == []
        # The same through Alembic's own `alembic check` command.
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        command.check(cfg)


def test_newer_revision_is_refused(upgraded: Journal) -> None:
    with upgraded._engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    for upgrade in (True, False):
        with pytest.raises(SchemaError) as err:
            Journal(upgraded.url, upgrade=upgrade)
        assert "9999_from_the_future" in str(err.value) and repr(code_head()) in str(err.value)
    with pytest.raises(SchemaError):
        eventstore.upgrade(upgraded.url)


def test_never_upgraded_database_names_the_command(database_url: str) -> None:
    with pytest.raises(SchemaError, match="gpu-credits db upgrade"):
        Journal(database_url, upgrade=False)
    with pytest.raises(SchemaError, match="gpu-credits db upgrade"):
        Journal(None, upgrade=False)


def test_a_refusal_to_upgrade_creates_and_writes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    with pytest.raises(SchemaError, match="gpu-credits db upgrade"):
        Journal(f"sqlite:///{missing}", upgrade=False)
    assert not missing.exists()
    other = tmp_path / "app.db"
    with contextlib.closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
        conn.commit()
    before = other.read_bytes()
    # Not "run `gpu-credits db upgrade`": that would refuse another application's file too.
    with pytest.raises(SchemaError, match="another application's database"):
        Journal(f"sqlite:///{other}", upgrade=False)
    assert other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_migrations_do_not_depend_on_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with Journal("sqlite:///relative.db") as j:
        j.append([eventstore.NewEvent("a", "s", "t", 1, {})])
    assert (tmp_path / "relative.db").exists()


def test_alembic_s_own_command_line_makes_a_journal_as_db_upgrade_does(
        tmp_path: Path) -> None:
    # migrations/alembic.ini offers `alembic -c migrations/alembic.ini -x url=... upgrade
    # head`: the file it makes holds personal data, so it is the owner's alone whatever
    # the umask, as one `gpu-credits db upgrade` makes.
    from alembic.config import main as alembic_main

    import migrations

    ini = Path(migrations.__file__).parent / "alembic.ini"
    path = tmp_path / "by-alembic.db"
    umask = os.umask(0o022)
    try:
        alembic_main(argv=["-c", str(ini), "-x", f"url=sqlite:///{path}", "upgrade", "head"])
    finally:
        os.umask(umask)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with Journal(f"sqlite:///{path}", upgrade=False) as journal:
        assert journal.head() == 0


def test_unreachable_postgres_is_one_clear_line() -> None:
    with pytest.raises(ConnectionProblem) as err:
        Journal("postgresql+psycopg://postgres@127.0.0.1:1/test")
    message = str(err.value)
    assert "127.0.0.1:1" in message and "check that the server is running" in message
    assert "\n" not in message


def test_unopenable_sqlite_file_is_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(ConnectionProblem, match="folder exists"):
        Journal(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ConnectionProblem, match="not a SQLite database"):
        Journal(f"sqlite:///{garbage}")


def test_unsupported_urls_and_arguments() -> None:
    with pytest.raises(ValueError, match="unsupported journal URL"):
        Journal("mysql://localhost/x")
    with pytest.raises(ValueError):
        Journal(None, lock_timeout=0)


def test_head_revision_constant_is_alembics_head() -> None:
    """Opening checks the schema against HEAD_REVISION without Alembic: a new migration
    must move it too."""
    from eventstore.migrate import HEAD_REVISION

    assert code_head() == HEAD_REVISION


def test_opening_an_upgraded_journal_does_not_load_alembic(tmp_path: Path) -> None:
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'j.db'}"
    Journal(url).close()  # creates and upgrades
    script = (
        "import sys\n"
        "from eventstore import Journal\n"
        f"j = Journal({url!r}); j.head(); j.close()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_events_table_holds_a_recorded_event_s_fields_in_order() -> None:
    from eventstore.records import COLUMNS
    from eventstore.schema import events

    assert tuple(c.name for c in events.columns) == COLUMNS


def test_positions_recorded_before_batches_existed_are_each_a_batch_of_their_own(
        database_url: str) -> None:
    # One append, written by code before 0004.
    write_at_revision(database_url, "0003", [ev("a", 2), ev("b", 1)])
    with Journal(database_url) as journal:  # upgrades to the head: batches appear
        anchor = journal.head_anchor()
        assert journal.batches() == []
        journal.append([ev("c", 0), ev("d", 0)])
        assert journal.batches() == [Batch(3, 4)]
        assert journal.verify_chain(anchor=anchor).ok and journal.verify() is None


def _offline_script(url: str, revisions: str) -> str:
    """The SQL `alembic upgrade REVISIONS --sql` writes for `url`'s dialect."""
    out = io.StringIO()
    cfg = alembic_config()
    cfg.stdout = out
    cfg.set_main_option("sqlalchemy.url", url)
    with contextlib.redirect_stdout(out):
        command.upgrade(cfg, revisions, sql=True)
    return out.getvalue()


@pytest.mark.parametrize("revisions", ["head", "0005:head"])
def test_a_postgresql_upgrade_can_be_written_as_a_script(revisions: str) -> None:
    # For a DBA to run later: no database is asked anything while it is written.
    script = _offline_script("postgresql+psycopg://nobody@127.0.0.1:1/none", revisions)
    assert f"version_num='{code_head()}'" in script
    assert "ADD COLUMN first_position" in script


def test_a_sqlite_script_is_written_from_empty_and_refused_where_it_cannot_know() -> None:
    assert f"version_num='{code_head()}'" in _offline_script("sqlite:///never.db", "head")
    with pytest.raises(RuntimeError, match="gpu-credits db upgrade"):
        _offline_script("sqlite:///never.db", "0005:head")


@pytest.mark.parametrize("url", ["sqlite:///never.db",
                                 "postgresql+psycopg://nobody@127.0.0.1:1/none"])
def test_an_upgrade_script_is_one_transaction(url: str, tmp_path: Path) -> None:
    # A DBA's script stopped midway (an error, a lost session) must leave the database at
    # its old revision, as `gpu-credits db upgrade` does: Alembic brackets a script in
    # BEGIN/COMMIT on SQLite only when told that its DDL is transactional.
    script = _offline_script(url, "0003:head")
    lines = [line for line in script.splitlines() if line.strip()
             and not line.startswith("--")]
    assert lines[0] == "BEGIN;" and lines[-1] == "COMMIT;"
    assert script.count("BEGIN;") == 1 and script.count("COMMIT;") == 1
    if url.startswith("sqlite"):
        path = tmp_path / "at-0003.db"
        write_at_revision(f"sqlite:///{path}", "0003", [ev("a", 1)])
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.executescript(script)
        with Journal(f"sqlite:///{path}", upgrade=False) as journal:
            assert journal.head() == 1 and journal.verify() is None


#: Each released revision's code (its module without docstring and comments), hashed. A
#: journal already at a revision never runs it again, so editing a released one changes
#: nothing on the journals that need it (revision 0005 once gained two columns that way):
#: a change to the schema is a new revision. Add a row here with each new one.
RELEASED_MIGRATIONS = {
    "0001": "15b63a8fe612dff9",
    "0002": "a9c6b90df8a45fbd",
    "0003": "00a175bcfab9b69e",
    "0004": "6bd1a4ea367ace6e",
    "0005": "a45b150909e5a770",
    "0006": "6fd54860cc02a32c",
}


def _code_digest(source: str) -> str:
    body = [node for node in ast.parse(source).body
            if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str))]
    dumped = ast.dump(ast.Module(body=body, type_ignores=[]))
    return hashlib.sha256(dumped.encode()).hexdigest()[:16]


def test_released_migrations_are_never_edited() -> None:
    import migrations.versions

    found = {}
    for info in pkgutil.iter_modules(migrations.versions.__path__):
        module = importlib.import_module(f"migrations.versions.{info.name}")
        found[module.revision] = _code_digest(Path(str(module.__file__)).read_text())
    assert found == RELEASED_MIGRATIONS, (
        "a released migration changed, or a new one has no row: change the schema with a "
        "new revision, and pin it here")
