"""The pipelined group commit: a batch decided while the one before it is being written
answers only after its own commit, never stands on a batch that failed, and leaves
positions gapless and the chain whole."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest

from projections.replay import fold_canonical
from tools.service import commands
from tools.service.batching import Deferred
from tools.service.groupcommit import _Item
from tools.service.ledger import LedgerService


@pytest.fixture
def service(database_url: str) -> Iterator[LedgerService]:
    svc = LedgerService(database_url, clock=lambda: 10)
    svc.start()
    svc.decide_now(commands.Grant("g0", "a", 10, None, None, None, None, 1))
    yield svc
    svc.stop()
    svc.close()


class HeldWrites:
    """Fault injection in the committer: each write waits until let go, then fails or
    goes on as told."""

    def __init__(self, service: LedgerService) -> None:
        self.service = service
        self.written = service.batching.written
        self.started = threading.Semaphore(0)
        self.go: list[tuple[threading.Event, bool]] = []
        self.lock = threading.Lock()
        service.batching.written = self._written  # type: ignore[method-assign]

    def plan(self, *fails: bool) -> list[threading.Event]:
        events = [threading.Event() for _ in fails]
        self.go = list(zip(events, fails, strict=True))
        return events

    def _written(self, deferred: Deferred) -> Any:
        with self.lock:
            go, fail = self.go.pop(0) if self.go else (None, False)
        self.started.release()
        if go is not None:
            assert go.wait(30)
        if fail:
            raise RuntimeError("the commit failed")
        return self.written(deferred)


def _decided_ahead(service: LedgerService, count: int) -> None:
    """Wait until `count` batches were decided while another was being written."""
    for _ in range(3000):
        if service.writer.decided_ahead >= count:
            return
        threading.Event().wait(0.01)
    raise AssertionError("no batch was decided ahead")


def _agrees(service: LedgerService) -> None:
    journal = service.journal
    positions = [r.position for r in journal.read(order="position")]
    assert positions == list(range(1, len(positions) + 1))
    assert journal.verify() is None
    with service.reading() as ledger:
        assert ledger.digest() == fold_canonical(journal).digest()


def _on_a_failing_commit(service: LedgerService, command: Any) -> tuple[
        Future[Any], threading.Event]:
    """`command` decided ahead, on a usage report of 8 of a's 10 credits whose commit
    then fails; its future, and the gate that lets its own write go on."""
    held = HeldWrites(service)
    first_go, second_go = held.plan(True, False)
    first = service.writer.submit(commands.Usage("u1", "a", 8, None, None, 10))
    assert held.started.acquire(timeout=30)
    second = service.writer.submit(command)
    _decided_ahead(service, 1)
    # Decided on top of u1, but not answered: u1 is not committed.
    assert not second.done()
    first_go.set()
    with pytest.raises(RuntimeError, match="the commit failed"):
        first.result(30)
    return second, second_go


def test_a_batch_decided_on_one_whose_commit_failed_is_decided_again(
        service: LedgerService) -> None:
    # On top of u1 it was in debt by 3.
    second, second_go = _on_a_failing_commit(
        service, commands.Usage("u2", "a", 5, None, None, 10))
    second_go.set()
    # Decided again on the journal's state, without u1: no debt.
    answer = second.result(30)
    assert answer["debt"] == 0
    assert service.journal.get("u1") is None
    assert [r.id for r in service.journal.read(order="position")] == ["g0", "u2"]
    _agrees(service)
    with service.reading() as ledger:
        assert ledger.accounts["a"].book.active_total == 5


def test_nothing_decided_on_a_failed_commit_answers_when_the_failure_lasts(
        service: LedgerService) -> None:
    held = HeldWrites(service)
    gates = held.plan(True, True, True)
    first = service.writer.submit(commands.Usage("u1", "a", 8, None, None, 10))
    assert held.started.acquire(timeout=30)
    second = service.writer.submit(commands.Usage("u2", "a", 5, None, None, 10))
    _decided_ahead(service, 1)
    for gate in gates:
        gate.set()
    for pending in (first, second):
        with pytest.raises(RuntimeError, match="the commit failed"):
            pending.result(30)
    assert [r.id for r in service.journal.read(order="position")] == ["g0"]
    _agrees(service)


def test_an_answer_waits_for_its_own_commit(service: LedgerService) -> None:
    held = HeldWrites(service)
    first_go, second_go = held.plan(False, False)
    first = service.writer.submit(commands.Usage("u1", "a", 1, None, None, 10))
    assert held.started.acquire(timeout=30)
    second = service.writer.submit(commands.Usage("u2", "a", 1, None, None, 10))
    _decided_ahead(service, 1)
    first_go.set()
    assert first.result(30)["position"] == 2
    assert held.started.acquire(timeout=30)  # the second batch is being written now
    assert not second.done()
    second_go.set()
    assert second.result(30)["position"] == 3
    _agrees(service)


def test_no_read_sees_a_decision_before_its_commit(
        service: LedgerService, monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.service import ledger as service_ledger
    from tools.service.ledger import BUSY

    monkeypatch.setattr(service_ledger, "READ_FRESHNESS", 3600.0)
    held = HeldWrites(service)
    (gate,) = held.plan(False)
    pending = service.writer.submit(commands.Usage("u1", "a", 4, None, None, 10))
    assert held.started.acquire(timeout=30)
    # Decided and applied to the projection, not committed: no read answers from it.
    assert service.read_at_once(lambda _, ledger: ledger.accounts["a"].balance) is BUSY
    seen: list[int] = []

    def read() -> None:
        with service.reading() as ledger:
            seen.append(ledger.accounts["a"].balance)

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(0.2)
    assert seen == []  # it waits for the commit
    gate.set()
    reader.join(30)
    assert pending.result(30)["position"] == 2
    assert seen == [6]


def test_a_retry_while_its_first_attempt_is_written_appends_once(
        service: LedgerService) -> None:
    held = HeldWrites(service)
    (first_go,) = held.plan(False)
    command = commands.Usage("u1", "a", 3, None, None, 10)
    first = service.writer.submit(command)
    assert held.started.acquire(timeout=30)
    again = service.writer.submit(command)
    first_go.set()
    assert first.result(30) == again.result(30)
    assert [r.id for r in service.journal.read(order="position")] == ["g0", "u1"]
    _agrees(service)


def test_a_retry_after_a_failed_commit_appends_once(service: LedgerService) -> None:
    held = HeldWrites(service)
    (gate,) = held.plan(True)
    gate.set()
    command = commands.Usage("u1", "a", 3, None, None, 10)
    with pytest.raises(RuntimeError):
        service.decide_now(command)
    first = service.decide_now(command)
    assert service.decide_now(command) == first
    assert [r.id for r in service.journal.read(order="position")] == ["g0", "u1"]
    _agrees(service)


def test_many_clients_pipelined_keep_positions_gapless_and_the_chain_whole(
        service: LedgerService) -> None:
    rng = random.Random(7)
    accounts = [f"acct-{i}" for i in range(5)]
    for account in accounts:
        service.decide_now(commands.Grant(f"open-{account}", account, 50, None, None, None,
                                          None, 1))
    plans = [[(rng.choice(accounts), rng.randint(1, 9)) for _ in range(25)]
             for _ in range(9)]
    written = service.batching.written
    give_up = time.monotonic() + 30  # then no write waits any more (and the test fails)
    writing = threading.Event()

    def slow_written(deferred: Deferred) -> Any:
        # Each write takes a moment, as a commit across a network does: callers queue
        # behind it and their batch is decided ahead, however fast the disk (without
        # this, a quick SQLite commit could leave nothing to decide ahead). Until the
        # writer has decided one batch ahead, a write also waits for that: the last
        # client only begins once a write is under way, so its requests come while one
        # is being written, however the others' threads were scheduled (on a loaded
        # machine they may all be in the first batch, waiting for its answers).
        writing.set()
        while service.writer.decided_ahead == 0 and time.monotonic() < give_up:
            threading.Event().wait(0.001)
        threading.Event().wait(0.005)
        return written(deferred)

    service.batching.written = slow_written  # type: ignore[method-assign]
    answers: list[list[Any]] = [[] for _ in plans]

    def client(n: int) -> None:
        if n == len(plans) - 1:
            writing.wait(60)
        pending: list[Future[Any]] = []
        for i, (account, amount) in enumerate(plans[n]):
            pending.append(service.writer.submit(
                commands.Usage(f"c{n}-{i}", account, amount, None, None, 10)))
            if i % 3 == 2:  # a few in flight at once, as several connections would
                answers[n].extend(p.result(60) for p in pending)
                pending = []
        answers[n].extend(p.result(60) for p in pending)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(len(plans))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert service.writer.decided_ahead > 0
    journal = service.journal
    by_id = {r.id: r for r in journal.read(order="position")}
    for n, got in enumerate(answers):
        for i, answer in enumerate(got):
            assert by_id[f"c{n}-{i}"].position == answer["position"]
    # Each answer's debt as a model charging in journal order has it.
    left = dict.fromkeys(accounts, 50)
    debts: dict[str, int] = {}
    for rec in journal.read(order="position"):
        if rec.id.startswith("c"):
            n, i = (int(x) for x in rec.id[1:].split("-"))
            account, amount = plans[n][i]
            left[account] -= amount
            debts[rec.id] = max(0, -left[account])  # the debt outstanding after it
    for n, got in enumerate(answers):
        for i, answer in enumerate(got):
            assert answer["debt"] == debts[f"c{n}-{i}"]
    _agrees(service)


def _events(*records: dict[str, Any]) -> commands.AppendEvents:
    return commands.AppendEvents.of_records(None, list(records))


def test_a_batch_of_events_decided_ahead_is_decided_again_when_the_one_before_fails(
        service: LedgerService) -> None:
    batch, second_go = _on_a_failing_commit(service, _events(
        {"type": "consume", "account": "a", "amount": 5, "time": 10, "id": "e1"},
        {"type": "grant", "account": "b", "amount": 7, "time": 10, "id": "e2"}))
    second_go.set()
    assert batch.result(30) == {"appended": 2, "already_present": 0, "positions": [2, 3]}
    assert [r.id for r in service.journal.read(order="position")] == ["g0", "e1", "e2"]
    _agrees(service)
    with service.reading() as ledger:
        assert ledger.accounts["a"].book.active_total == 5


def test_a_refused_batch_of_events_is_an_answer_not_a_failed_transaction(
        service: LedgerService) -> None:
    """A batch of events with a bad one is refused (422) like any refused decision: the
    projection is not rebuilt for it, as it was for a transaction that failed."""
    resets: list[int] = []
    reset = service.writer._reset
    service.writer._reset = lambda: (resets.append(1), reset())[1]  # type: ignore[method-assign]
    at = service.journal.head()
    bad = _events({"type": "reverse", "event": "nowhere", "time": 7, "reason": "x"})
    good = commands.Grant("g1", "a", 5, None, None, None, None, 2)
    answers = [service.writer.submit(c) for c in (bad, good)]
    refused = answers[0].exception(30)
    assert isinstance(refused, commands.EventsRejected) and refused.status == 422
    assert answers[1].result(30)["id"] == "g1"
    assert resets == []
    assert service.journal.head() == at + 1
    _agrees(service)


def test_a_batch_of_events_decided_ahead_and_its_retry(service: LedgerService) -> None:
    records = [{"type": "grant", "account": "b", "amount": 7, "time": 10, "id": "e1"},
               {"type": "consume", "account": "a", "amount": 2, "time": 10, "id": "e2"}]
    held = HeldWrites(service)
    (gate,) = held.plan(False)
    first = service.writer.submit(_events(*records))
    assert held.started.acquire(timeout=30)
    again = service.writer.submit(_events(*records))  # while the first is written
    gate.set()
    assert first.result(30)["positions"] == [2, 3]
    assert again.result(30) == {"appended": 0, "already_present": 2, "positions": [2, 3]}
    assert service.decide_now(_events(*records))["already_present"] == 2
    assert [r.id for r in service.journal.read(order="position")] == ["g0", "e1", "e2"]
    _agrees(service)


def test_a_batch_decided_ahead_of_another_writers_append_is_decided_again_after_it(
        service: LedgerService) -> None:
    from eventstore import Journal, NewEvent

    held = HeldWrites(service)
    (gate,) = held.plan(False)
    pending = service.writer.submit(commands.Usage("u1", "a", 8, None, None, 10))
    assert held.started.acquire(timeout=30)
    # Decided on 10 credits; before it is written, another writer takes 5 of them.
    with Journal(service.journal.url) as other:
        other.append([NewEvent("elsewhere", "a", "consume", 9,
                               {"account": "a", "amount": 5})])
    gate.set()
    answer = pending.result(30)
    assert answer["debt"] == 3  # decided again, on what the other writer left
    assert [r.id for r in service.journal.read(order="position")] == ["g0", "elsewhere",
                                                                       "u1"]
    _agrees(service)


def test_a_turn_ends_with_every_answer_in_when_the_committer_delivers_late(
        database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch decided ahead is written by the committer's thread, and its answers are
    # delivered by the write's callback, which runs after anyone waiting on the write
    # has been woken: the turn ended while the last batch's answers were still on their
    # way (found by the simulator on PostgreSQL, an AssertionError with no message).
    from tools.service import groupcommit

    deliver = groupcommit._deliver

    def late(items: Any, outcomes: Any) -> None:
        if threading.current_thread().name == "group-commit-write":
            time.sleep(0.2)
        deliver(items, outcomes)

    monkeypatch.setattr(groupcommit, "_deliver", late)
    service = open_service_on(database_url)
    try:
        turn: list[Any] = [commands.Grant("g1", "a", 10, None, None, None, None, 1),
                           commands.Usage("u1", "a", 3, None, None, 2),
                           commands.Usage("u2", "a", 4, None, None, 3)]
        futures, groups = service.writer.commit_in_turn(turn)
        assert [f.done() for f in futures] == [True, True, True]
        assert groups == [[0], [1], [2]]
        assert service.writer.phases().write > 0  # written by the committer
        assert [f.result()["debt"] for f in futures[1:]] == [0, 0]
    finally:
        service.writer.stop()
        service.close()


def open_service_on(url: str) -> LedgerService:
    """A service whose writer is not started (as the simulator runs one), one command
    per batch so that each is decided ahead of the last one's write."""
    service = LedgerService(url, clock=lambda: 10, max_batch=1)
    service.reset()
    service.ready.set()
    return service


@pytest.mark.parametrize("late", [
    commands.StartNext("e1", None),  # would find nothing to start
    commands.Cancel("e1", "j1", None),  # of a job cancelled before
])
def test_a_key_the_batch_being_written_records_is_no_free_key_for_the_next(
        service: LedgerService, late: Any) -> None:
    """A request that records nothing, under a key that a record of the batch being
    written takes as its id, is another request (409), as it is once that batch is
    written: not a 204 bound to a key that names an event, which its own retry then
    finds a conflict."""
    service.decide_now(commands.Submit("s1", "j1", "a", 1, 0, None, 10))
    service.decide_now(commands.Cancel("c1", "j1", 10))
    held = HeldWrites(service)
    (gate,) = held.plan(False)
    first = service.writer.submit(_events(
        {"type": "grant", "account": "b", "amount": 7, "time": 10, "id": "e1"}))
    assert held.started.acquire(timeout=30)
    second = service.writer.submit(late)
    time.sleep(0.3)  # the writer takes it while the first is written
    gate.set()
    assert first.result(30)["positions"] == [4]
    refused = second.exception(30)
    assert refused is not None and getattr(refused, "status", 409) == 409, refused
    assert service.journal.request("e1") is None
    with pytest.raises(Exception) as again:
        service.decide_now(late)
    assert str(again.value) == str(refused)
    _agrees(service)


def test_deferred_events_the_journal_refuses_are_not_a_later_decisions_refusal(
        database_url: str) -> None:
    """A batch of events whose record takes the id of a grant decided before it in the
    batch (deferred, both, as the batch is decided ahead) is refused when the two are
    written. When a later decision of the batch (a retry, which reads the journal) is
    what writes them, that refusal is not its own: the batch is decided again, and
    answers as the same commands one at a time do (the grant recorded, the batch of
    events 409, the retry its first answer), with nothing answered that was not
    written."""
    service = LedgerService(database_url, clock=lambda: 10)
    service.reset()
    service.ready.set()
    try:
        retried = commands.Usage("u0", "a", 1, None, None, 5)
        futures, _ = service.writer.commit_in_turn(
            [commands.Grant("g0", "a", 10, None, None, None, None, 1), retried])
        first = futures[1].result()
        batch = [commands.Grant("x", "a", 5, None, None, None, None, 6),
                 _events({"type": "grant", "account": "a", "amount": 6, "time": 6,
                          "id": "x"}),
                 retried]
        # One batch, as the writer no longer forms it (a record taking a key of the batch
        # waits for the next): the journal's refusal stays the batch's, not the retry's.
        items = [_Item(command) for command in batch]
        service.writer._commit(items)
        while service.writer._ahead is not None:
            service.writer._settle_ahead()
        futures = [item.future for item in items]
        assert all(f is not None for f in futures)
        assert futures[0].result()["position"] == 3
        conflict = futures[1].exception()
        assert conflict is not None and "'x'" in str(conflict)
        assert futures[2].result() == first
        assert [r.id for r in service.journal.read(order="position")] == ["g0", "u0", "x"]
        _agrees(service)
    finally:
        service.writer.stop()
        service.close()
