"""PostgreSQL-only behaviour: advisory locks per key, lock timeouts and connections that
die (and SQLite's one writer)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import strategies as st
from journal_testkit import empty_the_journal, ev
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from eventstore import (
    ConnectionProblem,
    IdempotencyConflict,
    Journal,
    JournalError,
    LockOrderConflict,
    LockTimeout,
    ReadOnlyJournal,
    VersionConflict,
)
from eventstore.testing import write_at_revision


@pytest.mark.postgres
def test_different_keys_do_not_wait_for_each_other(pg_fresh_url: str) -> None:
    a, b = Journal(pg_fresh_url, lock_timeout=0.5), Journal(pg_fresh_url, lock_timeout=0.5)
    try:
        with a.transaction(["account:a"]) as tx_a:
            tx_a.read()
            # Another decision about another key proceeds, appends and commits.
            with b.transaction(["account:b"]) as tx_b:
                tx_b.append([ev("b1", stream="b")])
            # The same key waits, then gives up with a clear error.
            with pytest.raises(LockTimeout, match="lock_timeout"), b.transaction(["account:a"]):
                pass
            tx_a.append([ev("a1", stream="a")])
        assert [e.id for e in a.read(order="position")] == ["b1", "a1"]
        assert a.verify() is None
    finally:
        a.close()
        b.close()


@pytest.mark.postgres
def test_same_key_serialises_decisions(pg_fresh_url: str) -> None:
    """Two read-decide-append on one key: the second sees the first's append."""
    journals = [Journal(pg_fresh_url) for _ in range(2)]
    decided: list[int] = []

    def decide(j: Journal, name: str) -> None:
        with j.transaction(["account:x"]) as tx:
            n = sum(1 for _ in tx.read(stream="x"))
            time.sleep(0.2)  # widen the window a race would need
            tx.append([ev(name, stream="x")], expected_versions={"x": n})
            decided.append(n)

    threads = [threading.Thread(target=decide, args=(j, f"e{i}")) for i, j in enumerate(journals)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(decided) == [0, 1]
    for j in journals:
        j.close()


@pytest.mark.postgres
def test_a_key_some_share_is_taken_first_also_by_one_taking_it_whole_with_others(
        pg_fresh_url: str) -> None:
    """A queue that decisions share and one takes whole, beside another key (a start of
    the next job batched with a usage report): waiting for the queue, the whole taker
    must hold nothing a sharer may ask for next, whatever the keys' numbers. Else the
    two wait for each other until the database breaks the deadlock by failing one."""
    from eventstore.backend import lock_key

    schema = re.search(r"search_path%3D(\w+)", pg_fresh_url)
    assert schema is not None
    queue = "*queue"
    # A key numbered before the queue's: taken in the order of numbers, it came first.
    other = next(name for name in (f"account:{i}" for i in range(100))
                 if lock_key(f"{schema[1]}:{name}") < lock_key(f"{schema[1]}:{queue}"))
    sharer, whole = (Journal(pg_fresh_url, lock_timeout=5), Journal(pg_fresh_url,
                                                                     lock_timeout=5))
    failed: list[BaseException] = []

    def take_it_whole() -> None:
        try:
            with whole.transaction([queue, other]) as tx:
                tx.append([ev("whole", stream="x")])
        except BaseException as exc:
            failed.append(exc)

    try:
        with sharer.transaction([f"shared:{queue}"]) as tx:
            waiter = threading.Thread(target=take_it_whole)
            waiter.start()
            time.sleep(0.3)  # the whole taker is waiting for the queue
            with sharer.transaction([other]):  # joins: takes the key
                tx.append([ev("shared", stream="x")])
        waiter.join(10)
        assert failed == []
        assert [e.id for e in sharer.read(order="position")] == ["shared", "whole"]
    finally:
        sharer.close()
        whole.close()


@pytest.mark.postgres
def test_head_lock_wait_is_bounded(pg_fresh_url: str) -> None:
    a, b = Journal(pg_fresh_url), Journal(pg_fresh_url, lock_timeout=0.3)
    try:
        with a.transaction() as tx:
            tx.append([ev("a")])  # holds the head row until commit
            started = time.monotonic()
            with pytest.raises(LockTimeout):
                b.append([ev("b")])
            assert time.monotonic() - started < 5
        assert b.append([ev("b")])[0].position == 2
    finally:
        a.close()
        b.close()


def test_sqlite_writer_waits_then_times_out(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'one-writer.db'}"
    a, b = Journal(url), Journal(url, lock_timeout=0.3)
    try:
        with a.transaction() as tx:
            tx.append([ev("a")])
            assert b.head() == 0  # WAL: readers never wait for the writer
            with pytest.raises(LockTimeout, match="lock_timeout"):
                b.append([ev("b")])
        assert b.append([ev("b")])[0].position == 2
        assert b.verify() is None
    finally:
        a.close()
        b.close()


# -- connections that die ---------------------------------------------------------------


def _dsn(url: str) -> str:
    """A psycopg connection string for the journal's URL (no driver, no options)."""
    return make_url(url).set(drivername="postgresql", query={}).render_as_string(
        hide_password=False
    )


def _terminate(url: str, pid: int) -> None:
    import psycopg

    with psycopg.connect(_dsn(url), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        # Wait until the backend is really gone, so the next call meets a dead socket.
        for _ in range(100):
            alive = admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
            if alive.fetchone() is None:
                return
            time.sleep(0.05)


@contextmanager
def _quiet_journal(url: str, capfd: pytest.CaptureFixture[str]) -> Iterator[Journal]:
    """A journal holding one event; after the block (the journal closed), nothing may
    have reached stderr."""
    with Journal(url) as j:
        j.append([ev("a")])
        yield j
    assert capfd.readouterr().err == ""


@pytest.mark.postgres
def test_an_idle_pooled_connection_killed_between_calls_is_replaced(
    pg_fresh_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with _quiet_journal(pg_fresh_url, capfd) as j:
        with j._engine.connect() as conn:  # the one pooled connection the journal uses
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        _terminate(pg_fresh_url, pid)
        assert j.append([ev("b")])[0].position == 2  # nothing was sent: it just works
        assert j.head() == 2 and j.verify() is None


@pytest.mark.postgres
def test_a_pooled_connection_is_checked_without_a_round_trip_unless_long_idle(
    pg_fresh_url: str,
) -> None:
    import psycopg

    from eventstore.backends.postgres import PING_AFTER_IDLE, _alive

    with psycopg.connect(_dsn(pg_fresh_url)) as conn:
        assert _alive(conn, time.monotonic()) is True
        # Idle for longer than PING_AFTER_IDLE: a real ping, which a live server answers.
        assert _alive(conn, time.monotonic() - PING_AFTER_IDLE - 1) is True
        pid = conn.info.backend_pid
        _terminate(pg_fresh_url, pid)
        # The server said goodbye on the socket: dead, found without sending anything.
        assert _alive(conn, time.monotonic()) is False


@pytest.mark.postgres
def test_a_backend_killed_while_connecting_is_one_clear_error(
    pg_fresh_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with _quiet_journal(pg_fresh_url, capfd) as j:
        j._engine.dispose()  # the next call opens a new connection

        def kill_self(dbapi_conn: Any, _record: object) -> None:
            dbapi_conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

        event.listen(j._engine, "connect", kill_self, insert=True)
        with pytest.raises(ConnectionProblem) as caught:
            j.append([ev("b")])
        message = str(caught.value)
        assert "\n" not in message and "PostgreSQL" in message
        event.remove(j._engine, "connect", kill_self)
        assert j.append([ev("b")])[0].position == 2


@pytest.mark.postgres
@pytest.mark.parametrize("query, idle", [("", 30), ("keepalives_idle=7", 7)])
def test_a_connection_finds_a_vanished_server_within_a_minute_unless_the_url_says_otherwise(
        pg_fresh_url: str, query: str, idle: int) -> None:
    """The journal's connections carry TCP keepalives and a user timeout: a server gone
    silent ends a statement in flight in about a minute, not the kernel's 15. What the
    URL sets itself is kept."""
    import socket

    url = f"{pg_fresh_url}{'&' if '?' in pg_fresh_url else '?'}{query}" if query else pg_fresh_url
    j = Journal(url)
    try:
        with j._engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            # A duplicate of the connection's descriptor: closing it leaves the connection's.
            sock = socket.socket(fileno=os.dup(raw.pgconn.socket))
            try:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == idle
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 10
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
                assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 60_000
            finally:
                sock.close()
    finally:
        j.close()


def test_an_unreachable_server_is_one_clear_error() -> None:
    with pytest.raises(ConnectionProblem) as caught:
        Journal("postgresql+psycopg://nobody:secret@127.0.0.1:1/none")
    message = str(caught.value)
    assert "\n" not in message and "secret" not in message and "127.0.0.1:1" in message


@pytest.mark.postgres
def test_a_text_array_literal_is_read_back_as_the_strings_it_was_made_of(
        pg_url: str) -> None:
    """The ids and streams an append asks about go to PostgreSQL as one quoted literal;
    any text without NUL (quotes, backslashes, braces, commas, spaces, NULL) must arrive
    as it was."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from eventstore.backends.postgres import text_array

    journal = Journal(pg_url)
    names = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), max_size=12)
    tricky = st.sampled_from(['"', "\\", "{", "}", ",", " ", "NULL", "\\\"", "a b", "", "'"])

    @settings(max_examples=75, deadline=None)
    @given(st.lists(names | tricky, max_size=8))
    def round_trips(values: list[str]) -> None:
        with journal.transaction() as tx:
            conn = tx.conn  # type: ignore[attr-defined]
            got = conn.exec_driver_sql("SELECT %(a)s::text[]", {"a": text_array(values)})
            assert got.scalar_one() == values

    try:
        round_trips()
    finally:
        journal.close()


@pytest.mark.postgres
def test_the_appends_id_lookups_probe_the_index_at_any_size(pg_fresh_url: str) -> None:
    """The key probe, the look-up of existing ids and the head-with-keys query each look
    every id up in the unique index: with `event_id = ANY(ids)` the planner chose a scan
    of the whole table, so every append cost more as the journal grew."""
    import psycopg

    from eventstore.backends import postgres as pg

    with Journal(pg_fresh_url) as journal:
        for b in range(20):
            journal.append([ev(f"b{b}-{i}", stream=f"s{i}") for i in range(100)])
        ids = pg.text_array([f"new-{i}" for i in range(100)])
        streams = pg.text_array([f"s{i}" for i in range(100)])
        dsn = make_url(pg_fresh_url).set(drivername="postgresql")
        with psycopg.connect(dsn.render_as_string(hide_password=False),
                             autocommit=True) as conn:
            conn.execute("ANALYZE events")
            for sql, args in [(pg._PROBE, (ids, streams, ids)), (pg._EXISTING, (ids,)),
                              (pg._HEAD_AND_EXISTING, (ids,))]:
                plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + sql, args))
                assert "Seq Scan" not in plan, (sql, plan)
                assert "uq_events_event_id" in plan, plan


@pytest.mark.postgres
def test_a_key_asked_for_after_an_append_is_refused_not_waited_for(pg_fresh_url: str) -> None:
    """After its first append a transaction holds the head, which every writer takes after
    its keys: waiting then for a key another writer holds, while that writer waits for
    the head, is a deadlock. The key is refused at once instead, and nothing is lost."""
    a, b = Journal(pg_fresh_url, lock_timeout=5), Journal(pg_fresh_url, lock_timeout=5)
    b_holds_its_key, b_done = threading.Event(), threading.Event()
    b_result: list[Any] = []

    def other_writer() -> None:
        with b.transaction(["account:b"]) as tx:
            b_holds_its_key.set()
            b_result.append(tx.append([ev("b1", stream="b")]))  # waits for a's head
        b_done.set()

    try:
        thread = threading.Thread(target=other_writer)
        with (pytest.raises(LockOrderConflict, match=r"account:b.*holds the journal's head"),
              a.transaction(["account:a"]) as tx):
                tx.append([ev("a1", stream="a")])
                thread.start()
                assert b_holds_its_key.wait(5)
                time.sleep(0.2)  # b is queued for the head by now
                started = time.monotonic()
                try:
                    with a.transaction(["account:b"]):
                        pass
                finally:
                    assert time.monotonic() - started < 2  # refused, not waited for
        thread.join(10)
        assert b_done.is_set() and b_result[0][0].position == 1
        assert [e.id for e in a.read(order="position")] == ["b1"]  # a's append rolled back
        # Before any append a key is waited for, as ever; after one, a free key is taken.
        with a.transaction(["account:a"]) as tx:
            tx.append([ev("a2", stream="a")])
            with a.transaction(["account:b"]) as inner:
                inner.append([ev("b2", stream="b")])
            # Held now by a: another writer cannot have it.
            with (pytest.raises(LockTimeout), Journal(pg_fresh_url, lock_timeout=0.2) as c,
                  c.transaction(["account:b"])):
                pass
        assert [e.id for e in a.read(order="position")] == ["b1", "a2", "b2"]
        assert a.verify() is None
    finally:
        a.close()
        b.close()


# -- the append's statements, prepared once per connection ---------------------------------


def _prepared_names(j: Journal) -> set[str]:
    with j._engine.connect() as conn:  # the one pooled connection the journal uses
        return set(conn.execute(text("SELECT name FROM pg_prepared_statements")).scalars())


@pytest.mark.postgres
def test_append_at_prepares_its_statements_once_and_runs_them_batch_after_batch(
        pg_fresh_url: str) -> None:
    with Journal(pg_fresh_url) as j:
        j.append([ev("a")])
        assert not {n for n in _prepared_names(j) if n.startswith("gpu_credits_")}
        for n in range(2, 5):
            assert j.append_at([ev(f"e{n}", stream=f"s{n % 2}")], at=n,
                               locks=[f"s{n % 2}", "shared:q"])[0].position == n
        assert {n for n in _prepared_names(j) if n.startswith("gpu_credits_")} == {
            "gpu_credits_locks_head", "gpu_credits_probe", "gpu_credits_insert",
            "gpu_credits_move_head"}
        # A refused append rolls back; the statements stay prepared and serve the next.
        with pytest.raises(VersionConflict):
            j.append_at([ev("late")], at=3, locks=["s0"])
        recorded = j.append_at([ev("f1"), ev("f2", stream="t")], at=5, locks=["s1", "t"])
        assert [r.position for r in recorded] == [5, 6]
        assert [(b.first, b.last) for b in j.batches()][-1] == (5, 6)
        assert j.verify() is None


@pytest.mark.postgres
def test_a_connection_opened_after_one_was_killed_prepares_them_again(
        pg_fresh_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    with _quiet_journal(pg_fresh_url, capfd) as j:
        assert j.append_at([ev("b")], at=2, locks=["k"])[0].position == 2
        with j._engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        _terminate(pg_fresh_url, pid)
        assert j.append_at([ev("c")], at=3, locks=["k"])[0].position == 3
        assert j.head() == 3 and j.verify() is None


@pytest.mark.postgres
def test_statements_deallocated_under_it_are_prepared_again(pg_fresh_url: str) -> None:
    """psycopg sends DEALLOCATE ALL after a rollback once it has prepared statements of
    its own: the next append finds its statements gone, prepares them again and goes on."""
    with Journal(pg_fresh_url) as j:
        assert j.append_at([ev("a")], at=1, locks=["k"])[0].position == 1
        with j._engine.connect() as conn:
            conn.execute(text("DEALLOCATE ALL"))
            conn.commit()
        assert j.append_at([ev("b"), ev("c")], at=2, locks=["k"])[1].position == 3
        assert "gpu_credits_probe" in _prepared_names(j)
        assert j.head() == 3 and j.verify() is None


# -- append_at leaves recorded ids to the insert ------------------------------------------

# (ids of the batch, its content variant, whether it has a private part, where it is
# placed: at the head, or one position behind it)
_APPENDS = st.lists(st.tuples(
    st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=3),
    st.integers(0, 1), st.booleans(), st.sampled_from(["head", "head", "stale"])),
    min_size=1, max_size=8)


def _outcomes(j: Journal, appends: list[tuple[list[str], int, bool, str]]) -> list[Any]:
    from eventstore import NewEvent

    empty_the_journal(j)
    out: list[Any] = []
    for ids, variant, private, where in appends:
        events = [NewEvent(i, f"s-{i}", "t", 1, {"v": variant},
                           {"memo": f"m{variant}"} if private else None) for i in ids]
        at = j.head() + (1 if where == "head" else 0)
        try:
            recorded = j.append_at(events, at=at, locks=sorted({e.stream for e in events}))
            out.append([(r.position, r.id, r.version) for r in recorded])
        except (VersionConflict, IdempotencyConflict, ValueError) as exc:
            # A seal named in a message is salted at random: each run has its own.
            out.append((type(exc).__name__, re.sub("[0-9a-f]{64}", "SEAL", str(exc))))
    out.append([(r.position, r.id) for r in j.read(order="position")])
    assert j.verify() is None
    return out


@pytest.mark.postgres
def test_append_at_without_the_id_probe_answers_as_with_it(pg_url: str) -> None:
    """PostgreSQL's append_at leaves recorded ids to the insert's unique index: whatever
    the batches (new ids, recorded ids with the same or other content, private parts,
    repeats, stale positions), it records and refuses exactly what the probing append
    does, with the same errors."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=20, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(_APPENDS)
    def check(appends: list[tuple[list[str], int, bool, str]]) -> None:
        with Journal(pg_url) as probing, Journal(pg_url) as leaving:
            probing._backend.refuses_recorded_ids = False  # type: ignore[misc]
            assert leaving._backend.refuses_recorded_ids
            assert _outcomes(leaving, appends) == _outcomes(probing, appends)

    check()


# -- a thread that keeps its connection ----------------------------------------------------


def _kept_pid(j: Journal) -> int:
    from eventstore.backend import dbapi

    kept = j._local.kept
    assert kept is not None
    pid: int = dbapi(kept).info.backend_pid
    return pid


@pytest.mark.postgres
def test_keeping_a_connection_answers_as_checking_one_out_each_time(pg_url: str) -> None:
    """Whatever the batches (refused ones included, which give the kept connection back
    to the pool), a thread keeping its connection records and refuses what one checking
    a connection out for each transaction does, with the same errors."""
    from hypothesis import HealthCheck, given, settings

    @settings(max_examples=30, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(_APPENDS)
    def check(appends: list[tuple[list[str], int, bool, str]]) -> None:
        with Journal(pg_url) as fresh, Journal(pg_url) as keeping:
            expected = _outcomes(fresh, appends)
            with keeping.keeping_connection():
                got = _outcomes(keeping, appends)
                ids = ["a", "b", "x"]
                assert keeping.head_and_get_many(ids) == fresh.head_and_get_many(ids)
            assert got == expected
            assert keeping._engine.pool.checkedout() == 0  # type: ignore[attr-defined]

    check()


@pytest.mark.postgres
def test_a_kept_connection_serves_every_transaction_until_the_block_ends(
        pg_fresh_url: str) -> None:
    with Journal(pg_fresh_url) as j:
        pool: Any = j._engine.pool
        with j.keeping_connection():
            assert j.append_at([ev("a")], at=1, locks=["k"])[0].position == 1
            pid = _kept_pid(j)
            assert j.head_and_get_many(["a"])[0] == 1
            assert j.append_at([ev("b")], at=2, locks=["k"])[0].position == 2
            assert _kept_pid(j) == pid and pool.checkedout() == 1
            # A refused append gives the connection back: the next one checks one out.
            with pytest.raises(VersionConflict):
                j.append_at([ev("c")], at=2, locks=["k"])
            assert j._local.kept is None and pool.checkedout() == 0
            assert j.append_at([ev("c")], at=3, locks=["k"])[0].position == 3
            assert pool.checkedout() == 1
        assert j._local.kept is None and pool.checkedout() == 0
        assert j.head() == 3 and j.verify() is None


@pytest.mark.postgres
def test_a_kept_connection_killed_between_calls_is_replaced(
        pg_fresh_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    """As the pool replaces a pooled connection the server ended: nothing is sent on it."""
    with _quiet_journal(pg_fresh_url, capfd) as j, j.keeping_connection():
        assert j.append_at([ev("b")], at=2, locks=["k"])[0].position == 2
        pid = _kept_pid(j)
        _terminate(pg_fresh_url, pid)
        assert j.head_and_get_many(["b"])[0] == 2
        assert _kept_pid(j) != pid
        assert j.append_at([ev("c")], at=3, locks=["k"])[0].position == 3
        assert j.head() == 3 and j.verify() is None


@pytest.mark.postgres
def test_a_kept_connection_left_inside_a_transaction_is_not_reused(
        pg_fresh_url: str) -> None:
    """A session the driver still has in a transaction (BEGIN sent past SQLAlchemy, as
    the journal's own transactions send it) goes back to the pool, which ends it, and
    the next transaction gets another: nothing of that transaction's is carried on."""
    with Journal(pg_fresh_url) as j, j.keeping_connection():
        assert j.append_at([ev("a")], at=1, locks=["k"])[0].position == 1
        kept = j._local.kept
        raw = kept.connection.dbapi_connection
        raw.autocommit = True
        raw.execute("BEGIN")
        raw.execute("SELECT 1")
        assert raw.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert j.append_at([ev("b")], at=2, locks=["k"])[0].position == 2
        assert j._local.kept is not kept
        assert j.head() == 2 and j.verify() is None


@pytest.mark.postgres
def test_keeping_a_connection_is_per_thread(pg_fresh_url: str) -> None:
    """Another thread's transactions still check connections out of the pool, and a
    nested block keeps the outer block's connection."""
    with Journal(pg_fresh_url) as j, j.keeping_connection():
        j.append([ev("a")])
        pid = _kept_pid(j)
        seen: list[Any] = []
        worker = threading.Thread(target=lambda: seen.append(
            (j.head(), getattr(j._local, "kept", None))))
        worker.start()
        worker.join()
        assert seen == [(1, None)]
        with j.keeping_connection():
            j.append([ev("b")])
        assert _kept_pid(j) == pid


@pytest.mark.postgres
def test_the_writers_statements_run_batch_after_batch_on_cursors_kept_per_connection(
        pg_fresh_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    """The look-up and the append's two round trips reuse their cursors on a connection;
    a connection that replaced a killed one gets its own."""
    from eventstore.backends.postgres import _CURSORS_KEY

    with _quiet_journal(pg_fresh_url, capfd) as j, j.keeping_connection():
        def cursors() -> dict[str, Any]:
            return dict(j._local.kept.info[_CURSORS_KEY])

        assert j.head_and_get_many(["a"])[0] == 1
        assert j.append_at([ev("b")], at=2, locks=["k"])[0].position == 2
        first = cursors()
        assert set(first) == {"head_and_existing", "locks_head_probe", "write"}
        assert j.head_and_get_many(["b", "c"]) == (2, {"b": j.get("b")})
        assert j.append_at([ev("c"), ev("d")], at=3, locks=["k"])[1].position == 4
        assert cursors() == first
        _terminate(pg_fresh_url, _kept_pid(j))
        assert j.append_at([ev("e")], at=5, locks=["k"])[0].position == 5
        assert all(cursors()[name] is not cur for name, cur in first.items()
                   if name in cursors())
        assert j.head() == 5 and j.verify() is None


@pytest.mark.postgres
def test_a_connection_asked_for_while_the_kept_one_is_in_use_comes_from_the_pool(
        pg_fresh_url: str) -> None:
    """A transaction begun inside another on the same thread (nothing of the journal's
    does so today: its reads fetch each batch before yielding it) never shares the kept
    connection, whose transaction is still open; interleaved reads and appends answer as
    without keeping."""
    with Journal(pg_fresh_url) as j, j.keeping_connection():
        j.append([ev("a"), ev("b", stream="t")])
        with j._pooled() as outer, j._pooled() as inner:
            assert inner is not outer and outer is j._local.kept
        seen = []
        for record in j.read(order="position"):
            seen.append((record.id, j.head_and_get_many([record.id])[0],
                         j.append_at([ev(f"{record.id}2")], at=j.head() + 1,
                                     locks=["k"])[0].position))
        assert seen == [("a", 2, 3), ("b", 3, 4)]
        assert j._engine.pool.checkedout() == 1  # type: ignore[attr-defined]
        assert j.verify() is None


def test_an_emptied_journal_keeps_nothing_a_later_example_trips_over(
        database_url: str) -> None:
    """Examples sharing a schema empty it between them: a private part or a batch left
    at a position the next example appends anew made its `verify` fail, depending on
    which test ran before."""
    from eventstore import NewEvent

    with Journal(database_url) as j:
        j.append([NewEvent(i, "s", "t", 1, {"v": 0}, {"memo": "m"}) for i in ("p1", "p2")])
        empty_the_journal(j)
        for i in ("a", "b", "c"):
            j.append([ev(i)])
        assert [r.id for r in j.read(order="position")] == ["a", "b", "c"]
        assert j.verify() is None


@pytest.mark.postgres
def test_a_full_disk_on_the_server_is_said_so_and_stores_nothing(pg_fresh_url: str) -> None:
    """PostgreSQL's disk_full (53100), raised by the server itself, through the journal's
    own write path: named as a full disk with what to do, nothing of the batch stored."""
    journal = Journal(pg_fresh_url)
    try:
        journal.append([ev("e1"), ev("e2")])
        with journal._engine.begin() as conn:
            conn.execute(text(
                "CREATE FUNCTION no_space() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "RAISE EXCEPTION 'could not extend file \"base/1/2\": No space left on "
                "device' USING ERRCODE = 'disk_full'; END $$"))
            conn.execute(text("CREATE TRIGGER full_disk BEFORE INSERT ON events "
                              "FOR EACH ROW EXECUTE FUNCTION no_space()"))
        with pytest.raises(JournalError) as caught:
            journal.append([ev("e3"), ev("e4")])
        message = str(caught.value)
        assert "the disk holding the server's data is full" in message
        assert "could not extend file" in message
        assert "nothing of the failed transaction was stored" in message
        assert "retry with the same event ids" in message
        assert journal.head() == 2
        with journal._engine.begin() as conn:
            conn.execute(text("DROP TRIGGER full_disk ON events"))
        journal.append([ev("e3"), ev("e4")])  # space freed: the same batch, whole
        assert journal.head() == 4 and journal.verify() is None
    finally:
        journal.close()


@contextmanager
def _reader_role(url: str, *, select: bool = True) -> Iterator[str]:
    """`url` as a role of its own that may use the schema (and read its tables when
    `select`) but create and write nothing: a read-only database user."""
    schema = re.search(r"search_path%3D([A-Za-z0-9_]+)", url)
    assert schema is not None
    name, role = schema.group(1), f"{schema.group(1)}_reader"
    with psycopg.connect(_dsn(url), autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" NOLOGIN')
        conn.execute(f'GRANT USAGE ON SCHEMA "{name}" TO "{role}"')
        if select:
            conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{name}" TO "{role}"')
    try:
        yield f"{url}%20-crole%3D{role}"
    finally:
        with psycopg.connect(_dsn(url), autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


@pytest.mark.postgres
def test_a_database_user_who_may_only_read_is_told_so_in_one_line(
        pg_fresh_url: str, capfd: pytest.CaptureFixture[str]) -> None:
    with Journal(pg_fresh_url) as owner:
        owner.append([ev("a", 1)])
    with _reader_role(pg_fresh_url) as url, Journal(url, create=False) as journal:
        assert journal.head() == 1
        with pytest.raises(ReadOnlyJournal) as caught:
            journal.append([ev("b", 2)])
        message = str(caught.value)
        assert "permission denied for table" in message and "nothing was written" in message
        assert "[SQL:" not in message and "\n" not in message
        # A JournalError like any refused write: a replay then prints its digest and
        # warns that it saved no checkpoint (a cache), as on a file it may not write.
        with pytest.raises(ReadOnlyJournal):
            journal.save_snapshot("ledger", 1, 1, "d", b"state")
    assert "pipeline aborted" not in capfd.readouterr().err


@pytest.mark.postgres
def test_an_old_schema_a_database_user_may_not_upgrade_is_named_with_what_to_do(
        pg_fresh_url: str) -> None:
    write_at_revision(pg_fresh_url, "0004", [ev("a", 1)])
    with _reader_role(pg_fresh_url) as url, pytest.raises(JournalError) as caught:
        Journal(url)
    message = str(caught.value)
    assert "'0004'" in message and "permission denied" in message
    assert "gpu-credits db upgrade" in message and "--sql" in message
    assert "[SQL:" not in message and "\n" not in message
