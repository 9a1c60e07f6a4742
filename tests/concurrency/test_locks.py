"""Who waits for whom, and the one-line errors a user can act on.

- Decisions on one account take turns: of eight simultaneous submits that each need
  all the credits, exactly one is accepted.
- On PostgreSQL, a decision held open on one account does not delay decisions on
  another; a decision that needs the held account waits `lock_timeout`, then says which
  lock it could not have and for how long. `start_next` holds the queue: every other
  write waits for it (a late grant can re-decide which jobs are pending), and a job id
  submitted to two accounts at once is decided once.
- A caller whose lock list came from a stale view (`complete` of a job this process
  has not seen yet) still decides under the account's lock.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from concurrency_kit import check_linearizable

from eventstore import ConnectionProblem, Journal, LockTimeout, NewEvent, SchemaError
from projections import DuplicateJob, GPUCreditTracker, InvalidTransition, Scheduler
from projections.importing import import_file
from projections.replay import fold_canonical, replay


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text, f"not one line: {text!r}"
    return text


@contextmanager
def held_decision(url: str, call: Callable[[Scheduler], object],
                  setup: Callable[[Scheduler], object] | None = None) -> Iterator[Scheduler]:
    """Run `call` on its own Scheduler in a thread and hold it inside its decision
    (its clock blocks), with the decision's locks taken, until the block ends."""
    arm, inside, release = threading.Event(), threading.Event(), threading.Event()

    def clock() -> int:
        if arm.is_set():
            inside.set()
            release.wait(60)
        return 1000

    scheduler = Scheduler(Journal(url, lock_timeout=30), clock=clock)
    if setup is not None:
        setup(scheduler)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call(scheduler)
        except BaseException as exc:
            errors.append(exc)

    arm.set()
    thread = threading.Thread(target=run)
    thread.start()
    assert inside.wait(30), "the held decision never started"
    try:
        yield scheduler
    finally:
        arm.clear()
        release.set()
        thread.join(30)
    assert not errors, errors


def test_one_account_decisions_take_turns(database_url: str) -> None:
    Scheduler(database_url).open_account("team", 10)
    schedulers = [Scheduler(Journal(database_url, lock_timeout=30)) for _ in range(8)]
    barrier = threading.Barrier(len(schedulers))
    answers: list[bool] = []

    def submit(i: int) -> None:
        barrier.wait()
        answers.append(schedulers[i].submit(f"job-{i}", "team", 10, 0))

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(len(schedulers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(answers) == [False] * 7 + [True]
    with Journal(database_url) as journal:
        report = replay(journal)
        assert report.ledger.accounts["team"].reserved == 10
        assert report.revisions == [] and report.anomalies == []


@pytest.mark.postgres
def test_accounts_do_not_wait_for_each_other(pg_fresh_url: str) -> None:
    # Advisory lock keys are database-wide (not per schema): names of our own keep
    # tests of other schemas on the same server out of our way.
    a, b = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    setup = Scheduler(pg_fresh_url)
    for name in (a, b):
        setup.open_account(name, 100)
    other = Scheduler(Journal(pg_fresh_url, lock_timeout=0.5), clock=lambda: 1000)
    with held_decision(pg_fresh_url, lambda s: s.submit("held", a, 5, 0)):
        # Decided and committed while the decision on `a` is still open.
        assert other.submit("free", b, 5, 0) is True
        with pytest.raises(LockTimeout) as err:
            other.submit("blocked", a, 5, 0)
        message = _one_line(err.value)
        assert f"the lock on key {a!r}" in message and "0.5 s" in message
        # start_next takes the whole queue, which a's open decision holds shared.
        with pytest.raises(LockTimeout, match="scheduler-queue"):
            other.start_next()
    # Released: the held decision committed, and a's decisions go through again.
    assert other.submit("after", a, 5, 0) is True
    assert other.ledger().jobs["held"].state == "pending"


@pytest.mark.postgres
def test_an_account_named_like_a_shared_lock_key_takes_turns_on_its_own_lock(
        pg_fresh_url: str) -> None:
    # The journal reads a lock key `shared:NAME` as NAME's lock in shared mode. An
    # account named `shared:...` must still hold a lock of its own, exclusively.
    other_name = f"team-{uuid.uuid4().hex[:8]}"
    name = f"shared:{other_name}"
    setup = Scheduler(pg_fresh_url)
    setup.open_account(name, 100)
    setup.open_account(other_name, 100)
    other = Scheduler(Journal(pg_fresh_url, lock_timeout=0.5), clock=lambda: 1000)
    with held_decision(pg_fresh_url, lambda s: s.submit("held", name, 5, 0)):
        # Not the lock of the account its name ends with: that one is free.
        assert other.submit("free", other_name, 5, 0) is True
        with pytest.raises(LockTimeout):
            other.submit("held", name, 5, 0)
    with Journal(pg_fresh_url) as journal:
        submits = [e for e in journal.read(order="position")
                   if e.type == "submit" and e.payload["job"] == "held"]
        assert len(submits) == 1, "a duplicate job id was recorded"


@pytest.mark.postgres
def test_an_account_named_like_the_queue_s_key_is_locked_after_the_queue(
        pg_fresh_url: str) -> None:
    """The journal takes keys named `*...` (the queue's) before every other. An account
    so named must still come after the queue: a start_next holding the queue whole then
    takes the account of the job it picks, while a decision on that account holds the
    queue shared before the account, never the account while it waits for the queue."""
    import re

    from eventstore.backend import lock_key
    from projections.session import QUEUE
    from projections.session import lock_key as session_key

    schema = re.search(r"search_path%3D(\w+)", pg_fresh_url)
    assert schema is not None
    # A name numbered before the queue: ordered among `*...` keys, it came first.
    name = next(n for n in (f"*team-{i}" for i in range(100))
                if lock_key(f"{schema[1]}:{n}") < lock_key(f"{schema[1]}:{QUEUE}"))
    Scheduler(pg_fresh_url).open_account(name, 100)
    worker = Scheduler(Journal(pg_fresh_url, lock_timeout=5), clock=lambda: 1000)
    failed: list[BaseException] = []

    def submit() -> None:
        try:
            worker.submit("j1", name, 5, 0)
        except BaseException as exc:
            failed.append(exc)

    with Journal(pg_fresh_url, lock_timeout=5) as picker:
        with picker.transaction([QUEUE]):  # a start_next, picking
            thread = threading.Thread(target=submit)
            thread.start()
            time.sleep(0.3)  # the submit waits for the queue
            with picker.transaction([session_key(name)]):  # the picked job's account
                pass
        thread.join(10)
    assert failed == []
    assert worker.job_state("j1") == "pending"


@pytest.mark.postgres
@pytest.mark.parametrize("defer", [True, False], ids=["one-append", "append-per-decision"])
def test_the_service_locks_an_account_named_like_a_shared_key_on_its_own(
        pg_fresh_url: str, defer: bool) -> None:
    from tools.service import commands
    from tools.service.ledger import LedgerService

    other_name = f"team-{uuid.uuid4().hex[:8]}"
    name = f"shared:{other_name}"
    setup = Scheduler(pg_fresh_url)
    setup.open_account(name, 100)
    setup.open_account(other_name, 100)
    service = LedgerService(Journal(pg_fresh_url, lock_timeout=0.5), clock=lambda: 1000,
                            defer_appends=defer)
    service.start()
    try:
        # The account the name ends with is held: the service's decision on the other
        # account needs no lock of it.
        with held_decision(pg_fresh_url, lambda s: s.submit("x", other_name, 5, 0)):
            answer = service.decide_now(
                commands.Submit("k1", "free", name, 5, 0, None, None))
            assert answer["accepted"] is True
        # Its own account held, the service waits for it.
        with (held_decision(pg_fresh_url, lambda s: s.submit("held", name, 5, 0)),
              pytest.raises(LockTimeout)):
            service.decide_now(commands.Submit("k2", "waits", name, 5, 0, None, None))
    finally:
        service.stop()
        service.close()


def test_sqlite_lock_timeout_is_one_clear_line(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/one-writer.db"
    Scheduler(url).open_account("a", 100)
    other = Scheduler(Journal(url, lock_timeout=0.3))
    with held_decision(url, lambda s: s.submit("held", "a", 5, 0)):
        with pytest.raises(LockTimeout) as err:
            other.submit("blocked", "a", 5, 0)
        message = _one_line(err.value)
        assert "0.3 s" in message and "SQLite" in message


@pytest.mark.postgres
def test_stale_lock_list_still_decides_under_the_account_lock(pg_fresh_url: str) -> None:
    # `stale` opened before the job existed: Scheduler.complete computes its locks from
    # that view (no lock at all), so the session must take the account's lock itself.
    stale = Scheduler(pg_fresh_url, clock=lambda: 1000)
    fresh = Scheduler(pg_fresh_url, clock=lambda: 1000)
    fresh.open_account("team", 100)
    fresh.submit("job", "team", 10, 0)
    assert fresh.start_next() is not None

    def setup(s: Scheduler) -> None:
        s.ledger()  # catch up: it knows the job is running

    errors: list[BaseException] = []
    with held_decision(pg_fresh_url, lambda s: s.complete("job", True), setup):
        # The held decision saw the job running and is about to complete it.
        def complete_too() -> None:
            try:
                stale.complete("job", True)
            except InvalidTransition as exc:
                errors.append(exc)

        racer = threading.Thread(target=complete_too)
        racer.start()
        racer.join(1.0)
        assert racer.is_alive(), "the stale caller did not wait for the account's lock"
    racer.join(30)
    assert len(errors) == 1, "the job was completed twice"
    with Journal(pg_fresh_url) as journal:
        completes = [e for e in journal.read(order="position") if e.type == "complete"]
        assert len(completes) == 1
        assert replay(journal).anomalies == []


def test_cannot_connect_is_one_line_naming_host_and_port() -> None:
    with pytest.raises(ConnectionProblem) as err:
        Scheduler("postgresql+psycopg://gpu@127.0.0.1:1/ledger")
    message = _one_line(err.value)
    assert "127.0.0.1:1" in message and "'ledger'" in message


def test_missing_database_folder_is_one_line(tmp_path: object) -> None:
    with pytest.raises(ConnectionProblem) as err:
        Scheduler(f"sqlite:///{tmp_path}/no/such/folder/ledger.db")
    assert "folder" in _one_line(err.value)


@pytest.mark.postgres
def test_schema_not_upgraded_says_what_to_run(pg_fresh_url: str) -> None:
    with pytest.raises(SchemaError) as err:
        Scheduler(Journal(pg_fresh_url, upgrade=False))
    assert "gpu-credits db upgrade" in _one_line(err.value)


@pytest.mark.postgres
def test_recorded_at_never_goes_back_when_appends_queue(pg_fresh_url: str) -> None:
    """A writer whose clock lags, queued behind another on the head row, still records
    no earlier than the event before it (position_at() relies on it)."""
    ahead, behind = Journal(pg_fresh_url), Journal(pg_fresh_url)
    behind._clock = lambda: 1  # a machine whose clock is far behind
    done = threading.Event()

    def queued_append() -> None:
        behind.append([NewEvent("late-clock", "s", "t", 0, {})])
        done.set()

    with ahead.transaction() as tx:
        tx.append([NewEvent("first", "s", "t", 0, {})])
        waiter = threading.Thread(target=queued_append)
        waiter.start()
        time.sleep(0.3)  # the waiter is now queued on the head row
        assert not done.is_set()
    waiter.join(30)
    first, second = list(ahead.read(order="position"))
    assert second.recorded_at >= first.recorded_at
    ahead.close()
    behind.close()


@pytest.mark.postgres
def test_start_next_sees_an_account_opened_while_it_decides(pg_fresh_url: str) -> None:
    # start_next holds the queue's lock whole; every other decision holds it shared, so
    # an account opened meanwhile, and a job submitted on it, wait for the start.
    low = f"low-{uuid.uuid4().hex[:8]}"
    new = f"new-{uuid.uuid4().hex[:8]}"
    other = Scheduler(pg_fresh_url, clock=lambda: 1000)
    other.open_account(low, 100)
    other.submit("low-job", low, 1, 0)
    impatient = Scheduler(Journal(pg_fresh_url, lock_timeout=0.5), clock=lambda: 1000)
    with held_decision(pg_fresh_url, lambda s: s.start_next(), setup=lambda s: s.ledger()), \
            pytest.raises(LockTimeout, match="scheduler-queue"):
        impatient.open_account(new, 100)
    other.open_account(new, 100)
    assert other.submit("urgent-job", new, 1, 9) is True
    assert other.ledger().jobs["low-job"].state == "running"
    with Journal(pg_fresh_url) as journal:
        assert check_linearizable(journal) == []


def _late_grant(url: str, account: str) -> None:
    GPUCreditTracker(Journal(url, lock_timeout=30), account=account).grant(10, 50, 10**6)


def _late_grant_imported(url: str, account: str) -> None:
    line = {"type": "grant", "account": account, "amount": 10, "time": 50, "expiry": 10**6}
    with Journal(url, lock_timeout=30) as journal:
        import_file(journal, json.dumps(line).encode(), "late.jsonl")


@pytest.mark.postgres
@pytest.mark.parametrize("late_grant", [_late_grant, _late_grant_imported],
                         ids=["tracker", "import"])
def test_start_next_picks_on_a_journal_nobody_appends_to(
        pg_fresh_url: str, late_grant: Callable[[str, str], None]) -> None:
    # A late grant to another account makes a rejected, more urgent submit affordable:
    # it re-decides the queue. Recorded while start_next decides, before its start, it
    # would leave a start of a less urgent job than one pending just before it.
    poor, rich = f"poor-{uuid.uuid4().hex[:8]}", f"rich-{uuid.uuid4().hex[:8]}"
    other = Scheduler(pg_fresh_url, clock=lambda: 100)
    other.open_account(poor, 0)
    other.open_account(rich, 10)
    assert other.submit("urgent", poor, 5, 9) is False
    assert other.submit("routine", rich, 5, 1) is True
    with held_decision(pg_fresh_url, lambda s: s.start_next(), setup=lambda s: s.ledger()):
        writer = threading.Thread(target=late_grant, args=(pg_fresh_url, poor))
        writer.start()
        writer.join(1.0)
        assert writer.is_alive(), "the late grant did not wait for start_next"
    writer.join(30)
    with Journal(pg_fresh_url) as journal:
        records = list(journal.read(order="position"))
        (start,) = [r for r in records if r.type == "start"]
        (grant,) = [r for r in records if r.type == "grant" and r.time == 50]
        assert start.position < grant.position
        before = fold_canonical(journal, to_position=start.position - 1)
        pending = {j.id: j.priority for j in before.jobs.values() if j.state == "pending"}
        assert start.payload["job"] == max(pending, key=pending.__getitem__), pending
    assert other.ledger().jobs["urgent"].state == "pending"  # the grant re-decided it


@pytest.mark.postgres
def test_one_job_id_submitted_to_two_accounts_at_once(pg_fresh_url: str) -> None:
    # Each submit holds its own account: without the job id's key neither would see the
    # other's, and both would append (the second an anomaly, its caller told False).
    first, second = f"first-{uuid.uuid4().hex[:8]}", f"second-{uuid.uuid4().hex[:8]}"
    other = Scheduler(Journal(pg_fresh_url, lock_timeout=30), clock=lambda: 1000)
    other.open_account(first, 10)
    other.open_account(second, 10)
    errors: list[BaseException] = []

    def racing() -> None:
        try:
            other.submit("job-1", second, 7, 1)
        except BaseException as exc:
            errors.append(exc)

    with held_decision(pg_fresh_url, lambda s: s.submit("job-1", first, 5, 1),
                       setup=lambda s: s.ledger()):
        racer = threading.Thread(target=racing)
        racer.start()
        racer.join(1.0)
        assert racer.is_alive(), "the second submit of job-1 did not wait for the first"
    racer.join(30)
    assert [type(e) for e in errors] == [DuplicateJob]
    assert "job 'job-1' was submitted before" in str(errors[0])
    with Journal(pg_fresh_url) as journal:
        submits = [r.stream for r in journal.read(order="position") if r.type == "submit"]
        assert submits == [first]
        assert check_linearizable(journal) == []


@pytest.mark.postgres
def test_start_next_returns_the_job_it_recorded(pg_fresh_url: str) -> None:
    busy, calm = f"busy-{uuid.uuid4().hex[:8]}", f"calm-{uuid.uuid4().hex[:8]}"
    other = Scheduler(pg_fresh_url, clock=lambda: 1000)
    GPUCreditTracker(pg_fresh_url, account=busy).grant(100, 1000, 10**6)  # no cap yet
    other.open_account(calm, 100)
    other.submit("running", busy, 1, 9)
    assert other.start_next() is not None
    other.submit("urgent", busy, 1, 5)
    other.submit("routine", calm, 1, 1)
    picker = Scheduler(pg_fresh_url, clock=lambda: 1000)
    picker.ledger()
    got: list[object] = []
    # open_account(busy, max_running=1) holds busy's lock, undecided: start_next picks
    # "urgent" only once it has the queue, then finds busy at its cap: starts "routine".
    with held_decision(pg_fresh_url, lambda s: s.open_account(busy, max_running=1)):
        racer = threading.Thread(target=lambda: got.append(picker.start_next()))
        racer.start()
        racer.join(1.0)
        assert racer.is_alive(), "start_next did not wait for the decision in flight"
    racer.join(30)
    with Journal(pg_fresh_url) as journal:
        started = [e.payload["job"] for e in journal.read(order="position")
                   if e.type == "start"]
        assert check_linearizable(journal) == []
    assert started == ["running", "routine"]
    (job,) = got
    assert getattr(job, "id", None) == "routine"


def test_a_decision_does_not_stand_on_what_an_import_recorded_meanwhile(
        pg_fresh_url: str) -> None:
    """An import holds the queue (shared) and the journal's head, not the keys of the
    accounts it writes: its events can land between a decision's read of its account and
    its append. Such a decision is made again on them: a completion of a job the import
    completed meanwhile is refused, and records nothing, as it would have been after
    the import."""
    from projections.events import JobCompleted
    from projections.personal import journal_event
    from projections.session import QUEUE_SHARED

    scheduler = Scheduler(pg_fresh_url, clock=lambda: 10)
    scheduler.open_account("a", 100, at=1)
    assert scheduler.submit("j", "a", 10, 1, at=2)
    assert scheduler.start_next(at=3) is not None
    importer = Journal(pg_fresh_url)
    holding = threading.Event()

    def an_import() -> None:
        with importer.transaction([QUEUE_SHARED]) as tx:
            tx.hold_head()
            tx.append([journal_event("imported", "a", 4, JobCompleted("j", True, 1.0))])
            holding.set()
            time.sleep(0.5)  # the decision reads, decides and queues for the head

    thread = threading.Thread(target=an_import)
    thread.start()
    try:
        assert holding.wait(10)
        with pytest.raises(InvalidTransition, match="succeeded"):
            scheduler.complete("j", False, at=5)
    finally:
        thread.join(10)
        importer.close()
    assert [r.id for r in scheduler.journal.read(order="position")][-1] == "imported"
    assert scheduler.job_state("j") == "succeeded"
