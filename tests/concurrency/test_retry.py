"""Retries without duplicates: a decision retried with the same event id happens once.

Two ways a connection is lost after the append was sent:
- the backend dies before COMMIT (`pg_terminate_backend`): nothing was recorded, and
  the retry records the decision once;
- the COMMIT reached the server and committed, but the answer was lost (a proxy drops
  it and cuts the connection): the client cannot tell, and the retry must give back
  the original outcome without appending again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from eventstore import ConnectionProblem, IdempotencyConflict, Journal, NewEvent
from eventstore.testing import open_journal
from projections import GPUCreditTracker, Scheduler, UnknownAccount
from projections.session import decision
from tests.service.db_proxy import DatabaseProxy, proxied


def _admin_dsn(url: str) -> str:
    u = make_url(url).set(drivername="postgresql")
    return u.render_as_string(hide_password=False)


def _terminate(url: str, pid: int) -> None:
    """pg_terminate_backend one backend, from another connection.

    Only the backend named by its pid: the database is shared with other tests (and other
    people's processes), which must not lose their connections.
    """
    with psycopg.connect(_admin_dsn(url), autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


def _backend_pid(journal: Journal) -> int:
    """The backend of this thread's open transaction on `journal`."""
    tx = journal._current()
    assert tx is not None, "no transaction open in this thread"
    pid = tx.conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
    assert isinstance(pid, int)
    return pid


@pytest.fixture
def cutter(pg_fresh_url: str) -> Iterator[tuple[DatabaseProxy, str]]:
    """A proxy in front of the test's PostgreSQL schema, and the URL through it."""
    with proxied(pg_fresh_url) as (proxy, url):
        yield proxy, url


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, f"not one line: {text!r}"
    return text


# -- the journal -----------------------------------------------------------------------


@pytest.mark.postgres
def test_backend_killed_after_the_append_was_sent_then_retry_appends_once(
    pg_fresh_url: str,
) -> None:
    event = NewEvent("req-1", "acct", "consume", 5, {"account": "acct", "amount": 3})
    with Journal(pg_fresh_url) as journal:
        with pytest.raises(ConnectionProblem) as err, journal.transaction(["acct"]) as tx:
            tx.append([event])
            _terminate(pg_fresh_url, _backend_pid(journal))
            time.sleep(0.2)
        assert "lost" in _one_line(err.value)
        assert journal.get("req-1") is None  # the transaction died with its backend
        (first,) = journal.append([event])  # the retry, on a fresh connection
        (again,) = journal.append([event])  # and one more, for good measure
        assert first == again and journal.head() == 1
        assert journal.verify() is None


@pytest.mark.postgres
def test_commit_answer_lost_then_retry_returns_the_original_record(
    cutter: tuple[DatabaseProxy, str],
) -> None:
    proxy, url = cutter
    event = NewEvent("req-2", "acct", "consume", 5, {"account": "acct", "amount": 3})
    with Journal(url) as journal:
        proxy.lose_commit_after = ()  # the next COMMIT's answer
        with pytest.raises(ConnectionProblem) as err:
            journal.append([event])
        _one_line(err.value)
        assert proxy.cuts == 1
        recorded = journal.get("req-2")
        assert recorded is not None, "the COMMIT did reach the server"
        assert journal.append([event]) == [recorded] and journal.head() == 1


# -- the facades -------------------------------------------------------------------------


@pytest.mark.postgres
def test_facade_retries_after_a_lost_commit_answer_get_the_original_outcome(
    cutter: tuple[DatabaseProxy, str],
) -> None:
    proxy, url = cutter
    scheduler = Scheduler(url, clock=lambda: 1000)
    tracker = GPUCreditTracker(url, account="team")
    scheduler.open_account("team", 30, max_running=1)

    def lose_the_answer(facade: object, event_id: str, call: Callable[..., Any],
                        *args: object, live: bool = False) -> Any:
        # First attempt: committed, answer lost. Retry: the original answer.
        proxy.lose_commit_after = ()  # the next COMMIT's answer
        with pytest.raises(ConnectionProblem), decision(facade, event_id=event_id, live=live):
            call(*args)
        assert proxy.cuts and proxy.lose_commit_after is None
        proxy.cuts = 0
        with decision(facade, event_id=event_id, live=live):
            return call(*args)

    assert lose_the_answer(scheduler, "s1", scheduler.submit, "j1", "team", 20, 1) is True
    # j2 does not fit any more; the retry of s1 still says True (its original outcome).
    assert lose_the_answer(scheduler, "s2", scheduler.submit, "j2", "team", 20, 1) is False
    assert lose_the_answer(scheduler, "s1", scheduler.submit, "j1", "team", 20, 1) is True
    started = lose_the_answer(scheduler, "go1", scheduler.start_next)
    assert started is not None and started.id == "j1"
    assert lose_the_answer(scheduler, "done1", scheduler.complete, "j1", True) is None
    assert lose_the_answer(tracker, "use1", tracker.consume, 15, 1000, live=True) == 5

    with Journal(pg_fresh_url_of(url)) as journal:
        ids = [e.id for e in journal.read(order="position")]
        assert ids.count("s1") == ids.count("go1") == ids.count("done1") == 1
        assert ids.count("use1") == 1
        assert journal.verify() is None
    assert tracker.get_balance(1000) == -5


def pg_fresh_url_of(url: str) -> str:
    """The same database as `url`, without the proxy (the base test server)."""
    import os

    base = make_url(os.environ["GPU_CREDITS_TEST_PG"])
    return make_url(url).set(host=base.host, port=base.port).render_as_string(
        hide_password=False)


@pytest.mark.postgres
def test_facade_decision_whose_backend_dies_is_recorded_once_on_retry(
    pg_fresh_url: str,
) -> None:
    hold = threading.Event()
    release = threading.Event()
    holding = threading.Event()
    pids: list[int] = []

    def clock() -> int:
        if hold.is_set():
            # Inside the decision's transaction, in the deciding thread.
            pids.append(_backend_pid(journal))
            holding.set()
            release.wait(30)
        return 1000

    journal = Journal(pg_fresh_url)
    scheduler = Scheduler(journal, clock=clock)
    scheduler.open_account("team", 30)
    errors: list[BaseException] = []

    def submit() -> None:
        try:
            with decision(scheduler, event_id="s1"):
                scheduler.submit("j1", "team", 20, 1)
        except BaseException as exc:
            errors.append(exc)

    hold.set()
    worker = threading.Thread(target=submit)
    worker.start()
    assert holding.wait(30)
    # The decision holds its account lock inside its transaction: kill its backend.
    _terminate(pg_fresh_url, pids[0])
    hold.clear()
    release.set()
    worker.join(30)
    assert len(errors) == 1 and isinstance(errors[0], ConnectionProblem), errors
    with decision(scheduler, event_id="s1"):
        assert scheduler.submit("j1", "team", 20, 1) is True
    with decision(scheduler, event_id="s1"):
        assert scheduler.submit("j1", "team", 20, 1) is True
    with Journal(pg_fresh_url) as journal:
        assert [e.id for e in journal.read(order="position")].count("s1") == 1


# -- the same contract on every backend ------------------------------------------------


def test_retry_semantics(journal_url: str) -> None:
    journal = open_journal(journal_url)
    scheduler = Scheduler(journal, clock=lambda: 100)
    with decision(scheduler, event_id="open"):
        scheduler.open_account("a", 50, max_running=1)
    with decision(scheduler, event_id="open"):  # two events: "open" and "open/2"
        scheduler.open_account("a", 50, max_running=1)
    with decision(scheduler, event_id="s1"):
        assert scheduler.submit("j1", "a", 30, 1) is True
    with decision(scheduler, event_id="s2"):
        assert scheduler.submit("j2", "a", 30, 1) is False
    with decision(scheduler, event_id="s1"):  # affordable when it was first decided
        assert scheduler.submit("j1", "a", 30, 1) is True
    for _ in range(2):
        with decision(scheduler, event_id="go"):
            job = scheduler.start_next()
        assert job is not None and job.id == "j1"
    for _ in range(2):  # a completed job completes again without error: the same call
        with decision(scheduler, event_id="end"):
            scheduler.complete("j1", False, refund_fraction=0.5)
    # Another command under a used id is refused, and appends nothing.
    with pytest.raises(IdempotencyConflict), decision(scheduler, event_id="s1"):
        scheduler.submit("j3", "a", 1, 1)
    # A refused call records nothing under its id; the id stays free.
    with pytest.raises(UnknownAccount), decision(scheduler, event_id="s4"):
        scheduler.submit("j4", "nobody", 1, 1)
    assert journal.get("s4") is None
    ids = [e.id for e in journal.read(order="position")]
    assert ids == ["open", "open/2", "s1", "s2", "go", "end"]
    # A tracker call: the live rule puts it at the latest time, and its retry agrees.
    tracker = GPUCreditTracker(journal, account="a")
    for _ in range(2):
        with decision(tracker, event_id="use", live=True):
            assert tracker.consume(30, 5) == 0  # 35 left after the job's charge of 15
    recorded = journal.get("use")
    assert recorded is not None and recorded.time == 100
    assert journal.head() == 7
    journal.close()
