"""Fixtures every test layer shares: journal backends and PostgreSQL isolation.

- `journal_url`: parametrised over "memory" (the string "memory"), "sqlite" (a
  file URL in tmp_path) and "postgres" (a fresh schema); open it with
  `open_journal(journal_url)`.
- `database_url`: the same without "memory": an empty SQLite file or PostgreSQL schema.
- `db`: a fresh SQLite file URL (the CLI's and the contract suite's database).
- `migrated_sqlite`: an empty journal file at the schema's head, to copy.
- `pg_url`: one PostgreSQL schema for the whole test session.
- `pg_fresh_url`: a new, empty schema for one test.
- `pg_database_url`: the database itself, for code that makes schemas of its own.
- `chain_check`: parametrised over "c" and "python": the test runs with the chain check
  in the C accelerator, then in its Python definition.

PostgreSQL comes from $GPU_CREDITS_TEST_PG. When it is unset the PostgreSQL tests
are skipped, except under CI=true, where they fail: CI must not pass by skipping.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing
from matrix import full_matrix

from eventstore.testing import open_journal

__all__ = ["open_journal"]

PG_ENV = "GPU_CREDITS_TEST_PG"

# Typer's test runner builds the click command again from every command's signature on
# each invoke: 23 ms, more than most commands take to answer, over thousands of invokes.
# A built click command keeps no state between invocations (click's own runner reuses
# one), so it is built once per app. Production builds it once per process anyway.
typer.testing._get_command = functools.cache(typer.main.get_command)


def _pg_base() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{PG_ENV} not set under CI=true: PostgreSQL tests must run in CI")
        pytest.skip(f"{PG_ENV} not set: PostgreSQL tests skipped")
    return url


def _schema_url(base: str, schema: str) -> str:
    # libpq "options" sets search_path for every connection the URL opens, so the
    # journal's tables (and alembic_version) land in the test's own schema.
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def _admin(base: str, sql: str) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    u = make_url(base).set(drivername="postgresql")
    dsn = u.render_as_string(hide_password=False)
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            # A test that died inside a transaction may still hold locks: wait a
            # little, then fail the teardown rather than hang the run.
            conn.execute("SET lock_timeout = '10s'")
            conn.execute(sql)  # type: ignore[arg-type]
    except psycopg.OperationalError as exc:
        pytest.fail(f"{PG_ENV}={u.render_as_string()} does not answer: {exc}".splitlines()[0])


_swept = False


def _sweep_orphans(base: str) -> None:
    """Drop test schemas left by runs that were killed (their pid no longer exists)."""
    import psycopg
    from sqlalchemy.engine import make_url

    dsn = make_url(base).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        names = [
            r[0]
            for r in conn.execute(r"SELECT nspname FROM pg_namespace WHERE nspname LIKE 'gpuc\_%'")
        ]
    for name in names:
        parts = name.split("_")
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            _admin(base, f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        except PermissionError:
            pass  # alive, another user's


def _new_schema(base: str) -> str:
    global _swept
    if not _swept:
        _swept = True
        _sweep_orphans(base)
    schema = f"gpuc_{os.getpid()}_{secrets.token_hex(4)}"
    _admin(base, f'CREATE SCHEMA "{schema}"')
    return schema


# -- pytest-xdist workers see the terminal the run was started from --------------------------
#
# A worker is started with COLUMNS=80 and LINES=24 in its environment whatever the run's
# own were, and the command line wraps its output to $COLUMNS (tools.render.console):
# the tests' outputs would differ from a run in one process. Each worker gets the
# controller's values back (none when it had none).

_TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput["terminal_env"] = {k: os.environ.get(k) for k in _TERMINAL_ENV}


def pytest_configure(config: pytest.Config) -> None:
    found: dict[str, str | None] = getattr(config, "workerinput", {}).get("terminal_env", {})
    for key, value in found.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


EXAMPLES_ENV = "GPU_CREDITS_EXAMPLES"
_WRITTEN_SETTINGS = "_gpu_credits_written_settings"


def examples_factor() -> float:
    """The factor on every property test's examples: the counts written in the tests
    keep `make test` within its budget; a longer hunt multiplies them (e.g. 10)."""
    raw = os.environ.get(EXAMPLES_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        factor = float(raw)
    except ValueError:
        factor = -1.0
    if not factor > 0 or factor == float("inf"):
        raise pytest.UsageError(f"{EXAMPLES_ENV}={raw!r}: give a positive number, the "
                                "factor on each property test's examples (e.g. 10)")
    return factor


def _left_to_the_full_matrix(item: pytest.Item) -> bool:
    # The chain check's Python definition reads the rows a backend returned, the same rows
    # on each: it runs on memory and SQLite, the C accelerator on every backend, and the
    # two are compared row by row in tests/eventstore/test_chain_accelerator.py.
    params: dict[str, Any] = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("chain_check") == "python" and any(
        isinstance(value, str) and value == "postgres" for value in params.values())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not full_matrix():
        left = [item for item in items if _left_to_the_full_matrix(item)]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [item for item in items if not _left_to_the_full_matrix(item)]
    factor = examples_factor()
    if factor == 1.0:
        return
    from hypothesis import settings

    for item in items:
        obj = getattr(item, "obj", None)
        test = getattr(obj, "__func__", obj)  # a test method's item holds it bound
        # The settings a @given test runs with are read from it at each call.
        current = getattr(test, "_hypothesis_internal_use_settings", None)
        if not getattr(test, "is_hypothesis_test", False) or current is None:
            continue
        # Every case of a parametrized test holds the same function: each scales the
        # count written in the test, kept aside the first time, never the last one's.
        written = getattr(test, _WRITTEN_SETTINGS, None)
        if written is None:
            written = current
            setattr(test, _WRITTEN_SETTINGS, written)
        scaled = max(1, round(written.max_examples * factor))
        test._hypothesis_internal_use_settings = settings(  # type: ignore[union-attr]
            written, max_examples=scaled)


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A fresh SQLite database URL for this test (the file does not exist yet)."""
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty SQLite journal at the schema's head, made once per session: a test that
    copies it skips the migration a new file costs."""
    path = tmp_path_factory.mktemp("migrated") / "journal.db"
    open_journal(f"sqlite:///{path}").close()
    return path


@contextlib.contextmanager
def _own_schema() -> Iterator[str]:
    """A PostgreSQL URL selecting a new, empty schema, dropped after the block."""
    base = _pg_base()
    schema = _new_schema(base)
    try:
        yield _schema_url(base, schema)
    finally:
        _admin(base, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A PostgreSQL URL selecting a schema of its own for this test session."""
    with _own_schema() as url:
        yield url


@pytest.fixture
def pg_database_url() -> str:
    """The PostgreSQL database itself (no schema chosen): for code that makes and drops
    schemas of its own there."""
    return _pg_base()


@pytest.fixture
def pg_fresh_url() -> Iterator[str]:
    """A PostgreSQL URL selecting a new, empty schema, dropped after the test."""
    with _own_schema() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty database of the test's own: a new SQLite file URL (the file does not
    exist yet) or a fresh PostgreSQL schema URL. One per database backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    url: str = request.getfixturevalue("pg_fresh_url")
    return url


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def journal_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """ "memory", a SQLite file URL, or a fresh PostgreSQL schema URL: one per backend."""
    kind: str = request.param
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    if kind == "postgres":
        url: str = request.getfixturevalue("pg_fresh_url")
        return url
    return kind


@pytest.fixture(params=["c", "python"])
def chain_check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which implementation of the chain check this run uses: "c" (skipped where the
    accelerator is not built or turned off) or "python" (the definition)."""
    from eventstore import hashing

    if request.param == "c":
        if not hashing.ACCELERATED:
            pytest.skip("the C chain check is not built here (or turned off)")
    else:
        monkeypatch.setattr(hashing, "_fast_chained", None)
    return str(request.param)


# -- tests that need the fold's Python source ------------------------------------------------
#
# A test marked `pure_python` monkeypatches a module of the fold that may run compiled
# (projections.native.COMPILED): compiled code calls its own functions directly, so the
# patch would not be seen. When this process runs the compiled fold, such a test runs in
# a child pytest with GPU_CREDITS_PURE_PYTHON=1 instead (all of them in one child, on the
# first one's turn), and passes, fails or skips as it did there. Under pytest-xdist every
# worker collects every test, so the first worker to need the child runs it for all and
# leaves its results in the run's shared temporary folder for the others.

_pure_results: dict[str, tuple[str, str]] | None = None


def _junit_key(nodeid: str) -> str:
    path, *rest = nodeid.split("::")
    return ".".join([path.removesuffix(".py").replace("/", "."), *rest])


def _run_pure(items: list[pytest.Item], rootdir: Path) -> dict[str, tuple[str, str]]:
    import subprocess
    import sys
    import tempfile
    import xml.etree.ElementTree as ElementTree

    from projections.native import PURE_ENV

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "pure.xml"
        # Each of the child's tests has half the time a test has here: one that hangs
        # fails there, with its stacks, before the test waiting for the child does.
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "-o", f"timeout={_child_timeout(items[0].config)}",
             f"--junitxml={report}", *[item.nodeid for item in items]],
            cwd=rootdir, env={**_without_xdist(os.environ), PURE_ENV: "1"},
            capture_output=True, text=True)
        results: dict[str, tuple[str, str]] = {}
        if report.exists():
            for case in ElementTree.parse(report).iter("testcase"):
                key = f"{case.get('classname')}.{case.get('name')}"
                found = [child for child in case if child.tag in ("failure", "error", "skipped")]
                if not found:
                    results[key] = ("passed", "")
                    continue
                text = f"{found[0].get('message') or ''}\n{found[0].text or ''}"
                results[key] = (found[0].tag, text)
    for item in items:
        results.setdefault(_junit_key(item.nodeid), (
            "error", f"no result from the child pytest (exit {done.returncode}):\n"
                     f"{done.stdout[-3000:]}{done.stderr[-3000:]}"))
    return results


def _child_timeout(config: pytest.Config) -> float:
    """Half this run's per-test timeout (pytest-timeout's `--timeout`, else its ini
    value), 0 (none) when it has none."""
    given = config.getoption("timeout", default=None)
    return float(given if given is not None else config.getini("timeout") or 0) / 2


def _without_xdist(env: Mapping[str, str]) -> dict[str, str]:
    """The environment without pytest-xdist's worker variables: the child is no worker."""
    return {k: v for k, v in env.items() if not k.startswith("PYTEST_XDIST_")}


def _pure_results_once(session: pytest.Session) -> dict[str, tuple[str, str]]:
    """The child's results for every marked test, run once per test run: under xdist
    the first worker to ask runs the child, holding a lock the others wait on, and
    writes what it found where they read it."""
    import fcntl
    import json

    marked = [item for item in session.items
              if item.get_closest_marker("pure_python") is not None]
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return _run_pure(marked, session.config.rootpath)
    # Each worker's basetemp is a folder of the run's own (popen-gw0, popen-gw1, ...).
    shared: Path = session.config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    found = shared / "pure-python-results.json"
    with open(shared / "pure-python.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if found.exists():
            return {k: (v[0], v[1]) for k, v in json.loads(found.read_text()).items()}
        results = _run_pure(marked, session.config.rootpath)
        found.write_text(json.dumps(results))
        return results


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    global _pure_results
    if pyfuncitem.get_closest_marker("pure_python") is None:
        return None
    from projections import native

    if not native.in_use():
        return None  # this process runs the source: the test runs here, as any other
    if _pure_results is None:
        _pure_results = _pure_results_once(pyfuncitem.session)
    outcome, text = _pure_results[_junit_key(pyfuncitem.nodeid)]
    if outcome == "skipped":
        pytest.skip(f"in the pure-Python child: {text.strip()}")
    if outcome != "passed":
        pytest.fail(f"in the pure-Python child ({outcome}):\n{text}", pytrace=False)
    return True


@pytest.fixture
def read_only_mount() -> Iterator[Any]:
    """make_read_only(folder): mount the folder read-only onto itself until the test
    ends (an auditor's copy on a read-only medium); skips the test where mounting is not
    allowed (not root, no mount(8), a container without the capability)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only folder needs root and mount(8)")
    mounted: list[Path] = []

    def mount(*args: str) -> bool:
        return subprocess.run(["mount", *args], capture_output=True).returncode == 0

    def make_read_only(folder: Path) -> None:
        if not mount("--bind", str(folder), str(folder)):
            pytest.skip("bind mounts are not allowed here")
        mounted.append(folder)
        if not mount("-o", "remount,ro,bind", str(folder)):
            pytest.skip("read-only remounts are not allowed here")

    yield make_read_only
    for folder in reversed(mounted):
        subprocess.run(["umount", str(folder)], capture_output=True, check=True)
