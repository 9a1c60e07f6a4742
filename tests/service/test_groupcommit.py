"""The group-commit writer: a batch that fails commits nothing of itself, leaves the
projection equal to the journal, and does not take its neighbours down with it."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import SQLAlchemyError

from eventstore import IdempotencyConflict, VersionConflict
from projections.errors import UnknownAccount
from projections.ledger import Ledger
from projections.replay import fold_canonical
from tools.service import commands
from tools.service.groupcommit import GroupCommit, _Item
from tools.service.ledger import LedgerService
from tools.service.problems import ServiceProblem, from_exception


@dataclass(frozen=True)
class AppendsThenFails:
    """A command with a bug: it appends, then raises something that is not a refusal."""

    key: str | None
    account: str

    def locks(self, ledger: Ledger) -> list[str]:
        return [self.account]

    def run(self, service: LedgerService) -> Any:
        commands.Grant(self.key, self.account, 5, None, None, None, None, 10).run(service)
        raise RuntimeError("a bug after the append")


@pytest.fixture(params=[True, False], ids=["one-append", "append-per-decision"])
def service(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    svc = LedgerService(f"sqlite:///{tmp_path / 'gc.db'}", clock=lambda: 10,
                        defer_appends=request.param)
    svc.start()
    svc.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
    yield svc
    svc.stop()
    svc.close()


def test_a_failed_batch_commits_nothing_and_the_projection_returns(service: Any) -> None:
    good = _Item(commands.Usage("u1", "a", 7, None, None, 10))
    bad = _Item(AppendsThenFails("boom", "a"))
    other = _Item(commands.Usage("u2", "a", 3, None, None, 10))
    service.writer._commit([good, bad, other])
    # The batch failed; each decision was then decided alone: the good ones committed.
    assert good.future.result()["debt"] == 0
    assert other.future.result()["id"] == "u2"
    with pytest.raises(RuntimeError):
        bad.future.result()
    journal = service.journal
    assert journal.get("boom") is None
    assert [r.id for r in journal.read(order="position")] == ["g0", "u1", "u2"]
    with service.reading() as ledger:
        assert ledger.digest() == fold_canonical(journal).digest()


def test_a_refused_command_does_not_fail_its_batch(service: Any) -> None:
    ok = _Item(commands.Usage("u1", "a", 7, None, None, 10))
    refused = _Item(commands.Usage("u2", "nobody", 7, None, None, 10))
    conflict = _Item(commands.Grant("g0", "a", 99, None, None, None, None, 1))
    service.writer._commit([ok, refused, conflict])
    assert ok.future.result()["id"] == "u1"
    with pytest.raises(KeyError):
        refused.future.result()
    with pytest.raises(ValueError, match="already recorded"):
        conflict.future.result()
    assert service.writer.batches >= 2
    with service.reading() as ledger:
        assert ledger.digest() == fold_canonical(service.journal).digest()


def test_a_graceful_stop_leaves_a_checkpoint_for_the_next_start(tmp_path: Path) -> None:
    from eventstore import Journal
    from projections.checkpoint import CHECKPOINT

    url = f"sqlite:///{tmp_path / 'cp.db'}"
    svc = LedgerService(url, clock=lambda: 10)
    svc.start()
    svc.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
    svc.decide_now(commands.Usage("u1", "a", 7, None, None, 10))
    svc.stop()
    svc.close()
    with Journal(url) as journal:
        assert [i.position for i in journal.snapshots(CHECKPOINT)] == [2]
    again = LedgerService(url, clock=lambda: 10)
    again.start()
    with again.reading() as ledger:
        assert ledger.accounts["a"].balance == 93
    again.stop()
    again.close()


def test_restarts_do_not_pile_up_checkpoints(tmp_path: Path) -> None:
    """Each graceful stop saves a checkpoint: one restarted after every few decisions
    (a daily deploy) kept every one, a whole copy of the state each, and `verify`
    re-derived them all. One saved closer to the one before it than a replay spaces its
    own replaces the previous newest; the oldest stays, and so does the newest."""
    from eventstore import Journal
    from projections.checkpoint import CHECKPOINT

    url = f"sqlite:///{tmp_path / 'restarts.db'}"
    for k in range(5):
        svc = LedgerService(url, clock=lambda: 10)
        svc.start()
        svc.decide_now(commands.Grant(f"g{k}", "a", 100, None, None, None, None, 1))
        svc.stop()
        svc.close()
    with Journal(url) as journal:
        assert [i.position for i in journal.snapshots(CHECKPOINT)] == [1, 5]
    again = LedgerService(url, clock=lambda: 10)
    again.start()
    with again.reading() as ledger:
        assert ledger.accounts["a"].balance == 500
    assert again.session.projector._ingested == 0  # from the newest
    again.writer.stop()
    again.close()


def _granted_then_used(svc: LedgerService) -> LedgerService:
    """`svc` started, then a grant of 100 to a and ten usage reports of 1 decided (11
    events), and the checkpoint queued last written."""
    svc.start()
    svc.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
    for i in range(10):
        svc.decide_now(commands.Usage(f"u{i}", "a", 1, None, None, 10))
    svc.writer.call(lambda: None).result()
    return svc


def test_a_running_service_leaves_checkpoints_so_a_crash_folds_only_what_came_after(
        tmp_path: Path) -> None:
    from eventstore import Journal
    from projections.checkpoint import CHECKPOINT

    url = f"sqlite:///{tmp_path / 'running.db'}"
    svc = _granted_then_used(LedgerService(url, clock=lambda: 10, checkpoint_every=3))
    with Journal(url) as journal:
        saved = [i.position for i in journal.snapshots(CHECKPOINT)]
    # Never stopped: a crash. Each checkpoint came once 3 more events were committed.
    assert saved and saved == sorted(saved)
    assert all(b - a >= 3 for a, b in zip([0, *saved], saved, strict=False))
    assert saved[-1] >= 11 - 3
    again = LedgerService(url, clock=lambda: 10, checkpoint_every=3)
    again.start()
    with again.reading() as ledger:
        assert ledger.accounts["a"].balance == 90
        assert ledger.digest() == fold_canonical(again.journal).digest()
    assert again.session.projector._ingested == 11 - saved[-1]  # only the tail folded
    for s in (again, svc):
        s.writer.stop()
        s.close()


def test_a_service_on_a_journal_in_memory_rebuilds_from_its_own_checkpoint() -> None:
    """The simulator's worlds share a journal in memory between their processes: its
    service saves checkpoints there too, and a rebuild (after a failed commit, a restart)
    opens from the newest and folds only the events after it."""
    from eventstore import MemoryJournal
    from projections.checkpoint import CHECKPOINT

    journal = MemoryJournal()
    svc = _granted_then_used(LedgerService(journal, clock=lambda: 10, checkpoint_every=3))
    saved = [i.position for i in journal.snapshots(CHECKPOINT)]
    assert saved and saved[-1] >= 11 - 3
    svc.writer.stop()
    svc.reset()
    with svc.reading() as ledger:
        assert ledger.accounts["a"].balance == 90
        assert ledger.digest() == fold_canonical(journal).digest()
    assert svc.session.projector._ingested == 11 - saved[-1]  # only the tail folded


def test_a_service_told_never_checkpoints_only_at_shutdown(tmp_path: Path) -> None:
    from eventstore import Journal
    from projections.checkpoint import CHECKPOINT

    url = f"sqlite:///{tmp_path / 'never.db'}"
    svc = LedgerService(url, clock=lambda: 10, checkpoint_every=None)
    svc.start()
    svc.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
    for i in range(6):
        svc.decide_now(commands.Usage(f"u{i}", "a", 1, None, None, 10))
    svc.writer.call(lambda: None).result()
    with Journal(url) as journal:
        assert journal.snapshots(CHECKPOINT) == []
    svc.stop()
    svc.close()
    with Journal(url) as journal:
        assert [i.position for i in journal.snapshots(CHECKPOINT)] == [7]


def test_a_rebuilt_projection_frees_the_one_it_replaced(tmp_path: Path) -> None:
    import gc
    import weakref

    svc = LedgerService(f"sqlite:///{tmp_path / 'rebuilt.db'}", clock=lambda: 10,
                        owns_process=True)
    svc.start()  # freezes what lives as long as the process out of the collector's passes
    try:
        assert gc.get_freeze_count() > 0
        svc.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
        replaced = weakref.ref(svc.session)
        svc.reset()  # as after a batch that did not commit
        gc.collect()
        assert replaced() is None
        with svc.reading() as ledger:
            assert ledger.accounts["a"].balance == 100
    finally:
        svc.stop()
        svc.close()
        gc.unfreeze()  # what it froze is this test process's, not a service's


def test_a_service_sharing_its_process_freezes_nothing(tmp_path: Path) -> None:
    # Frozen, what a test or an embedding application left behind would never be
    # collected, and the start's full pass walks all of it (in a test process late in
    # the suite, a second and more at each service's start and rebuild).
    import gc
    import weakref

    before = gc.get_freeze_count()
    svc = LedgerService(f"sqlite:///{tmp_path / 'shared.db'}", clock=lambda: 10)
    svc.start()
    try:
        assert gc.get_freeze_count() == before
        svc.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
        replaced = weakref.ref(svc.session)
        svc.reset()
        gc.collect()
        assert replaced() is None
    finally:
        svc.stop()
        svc.close()


def test_a_rebuild_thaws_only_what_its_own_service_froze(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # A service whose writer never started (the simulator's, a test's) did not freeze its
    # projection: its rebuild must not thaw and collect what another froze, a full pass
    # over everything in the process at every rebuild (seconds, once the process is large).
    import gc

    from tools.sim.service import commit_in_turn, open_service

    svc = open_service(f"sqlite:///{tmp_path / 'unstarted.db'}", lambda: 10)
    gc.freeze()  # as another service in the process did at its start
    thawed: list[bool] = []
    monkeypatch.setattr(gc, "unfreeze", lambda: thawed.append(True))
    try:
        commit_in_turn(svc, [commands.Grant("g0", "a", 100, None, None, None, None, 1)])
        svc.reset()  # as after a batch that did not commit
        assert thawed == []
        with svc.reading() as ledger:
            assert ledger.accounts["a"].balance == 100
    finally:
        monkeypatch.undo()
        gc.unfreeze()
        svc.close()


@pytest.mark.parametrize("every", [0, -5, 2.5, True, "10"])
def test_checkpoint_every_is_a_positive_integer_or_none(every: Any) -> None:
    with pytest.raises(ValueError, match="checkpoint_every must be a positive integer"):
        LedgerService(None, checkpoint_every=every)


class _Clock:
    """A fake clock for the writer's wait: each sleep advances it, and may bring
    arrivals (the queue's size after the n-th sleep)."""

    def __init__(self, writer: Any, arrivals: list[int]) -> None:
        self.now, self.sleeps = 0.0, 0
        self.writer, self.arrivals = writer, arrivals

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        target = self.arrivals[min(self.sleeps, len(self.arrivals)) - 1]
        while self.writer._queue.qsize() < target:
            self.writer._queue.put(object())


@pytest.mark.parametrize(("last_size", "last_seconds", "queued", "before", "arrivals",
                          "sleeps"), [
    (1, 0.010, 0, 0, [5], 0),  # the last batch was alone: an idle service never waits
    (1, 0.010, 3, 4, [5], 0),
    (8, 0.010, 0, 0, [3, 6, 9], 3),  # waits until the last batch's 8 are back (1 + 8 - 1)
    (8, 0.010, 3, 0, [5, 7], 2),
    # They queued after its answers went out: all 8 of them are back, no wait (counted
    # as another group's, they made 15 that never came, and the writer waited 4 ms).
    (8, 0.010, 7, 0, [7], 0),
    (8, 0.010, 7, 8, [8, 12, 15], 3),  # queued before: another group's 8, 16 in all
    (8, 0.010, 7, 8, [15], 1),
    (8, 0.010, 7, 3, [10], 1),  # 3 queued before the answers, then 5 of the last 8
    (8, 0.010, 0, 0, [0], 14),  # nobody comes: until the cap, MAX_LINGER (4 ms in steps)
    (8, 0.002, 0, 0, [0], 4),  # or half of what the last batch took, if less
    (8, 0.010, 20, 21, [24, 28], 2),  # however many queued meanwhile
])
def test_the_writer_waits_for_the_clients_of_its_last_batch(
        monkeypatch: pytest.MonkeyPatch, last_size: int, last_seconds: float, queued: int,
        before: int, arrivals: list[int], sleeps: int) -> None:
    """`queued` wait besides the first, of which `before` (the first included) were
    queued before the last batch's answers went out."""
    from tools.service import groupcommit

    writer = groupcommit.GroupCommit(lambda commands: [], lambda: None)
    writer._last_size, writer._last_seconds = last_size, last_seconds
    first = _Item(Named(None), seq=10)
    writer._answered = first.seq + before
    for _ in range(queued):
        writer._queue.put(object())
    clock = _Clock(writer, arrivals)
    monkeypatch.setattr(groupcommit.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(groupcommit.time, "sleep", clock.sleep)
    writer._linger(first)  # type: ignore[arg-type]
    assert clock.sleeps == sleeps


class _RecordingQueue(queue.SimpleQueue[Any]):
    """The writer's queue, keeping a list of everything put on it."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.items.append(item)
        super().put(item, block, timeout)


def test_answers_going_out_number_what_queues_after_them() -> None:
    """The writer tells the callers of its last batch coming back from those who queued
    before its answers went out by their numbers."""
    from tools.service import groupcommit

    writer = groupcommit.GroupCommit(lambda commands, wait: [c.key for c in commands],
                                     lambda: None)
    writer._queue = _RecordingQueue()
    writer.start()
    try:
        assert writer.submit(Named("a")).result(10) == "a"  # type: ignore[arg-type]
        answered = writer._answered
        assert writer.submit(Named("b")).result(10) == "b"  # type: ignore[arg-type]
    finally:
        writer.stop()
    first, second = [i for i in writer._queue.items if isinstance(i, _Item)]
    assert first.seq < answered < second.seq


@dataclass(frozen=True)
class Named:
    key: str | None


def test_the_writer_counts_where_its_time_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each batch's decision is counted on the writer, its pipelined write on the
    committer, a failed decision too; a batch counts once committed."""
    from tools.service import groupcommit

    now = [0.0]
    monkeypatch.setattr(groupcommit.time, "perf_counter", lambda: now[0])

    def write() -> None:
        now[0] += 0.5

    def run_batch(batch: Any, wait: Any) -> Any:
        now[0] += 0.25
        if batch[0].key == "bad":
            raise RuntimeError("the database went away")
        return groupcommit.Prepared([c.key for c in batch], write)

    writer = groupcommit.GroupCommit(run_batch, lambda: None)
    try:
        assert writer.phases() == groupcommit.Phases(0, 0, 0.0, 0.0, 0.0)
        items = [_Item(Named("a")), _Item(Named("b"))]
        writer._commit(items)  # type: ignore[arg-type]
        assert [i.future.result(10) for i in items if i.future] == ["a", "b"]
        assert writer.phases() == groupcommit.Phases(1, 2, 0.0, 0.25, 0.5)
        bad = _Item(Named("bad"))
        writer._commit([bad])  # type: ignore[list-item]
        with pytest.raises(RuntimeError):
            bad.future.result(10)  # type: ignore[union-attr]
        assert writer.phases() == groupcommit.Phases(1, 2, 0.0, 0.5, 0.5)
    finally:
        writer.stop()


@pytest.mark.parametrize("refusals", [1, 2, 5])
def test_a_batch_refused_a_key_after_appending_is_decided_again_whole(refusals: int) -> None:
    from eventstore import LockOrderConflict
    from tools.service import groupcommit

    sizes: list[int] = []
    resets: list[int] = []

    def run_batch(batch: Any, wait: Any) -> list[Any]:
        sizes.append(len(batch))
        if len(sizes) <= refusals:
            raise LockOrderConflict("the key was held elsewhere after the append")
        return [f"ok {c.key}" for c in batch]

    writer = groupcommit.GroupCommit(run_batch, lambda: resets.append(1))
    items = [_Item(Named("k1")), _Item(Named("k2"))]
    writer._commit(items)  # type: ignore[arg-type]
    assert [i.future.result() for i in items] == ["ok k1", "ok k2"]
    assert sizes == [2] * (refusals + 1)  # the whole batch again, after a rebuild each time
    assert len(resets) == refusals


def test_a_batch_refused_its_keys_again_and_again_answers_with_the_refusal() -> None:
    from eventstore import LockOrderConflict
    from tools.service import groupcommit

    attempts: list[int] = []

    def run_batch(batch: Any, wait: Any) -> list[Any]:
        attempts.append(len(batch))
        raise LockOrderConflict("the key was held elsewhere after the append")

    writer = groupcommit.GroupCommit(run_batch, lambda: None)
    items = [_Item(Named("k1")), _Item(Named("k2"))]
    writer._commit(items)  # type: ignore[arg-type]
    for item in items:
        with pytest.raises(LockOrderConflict):
            item.future.result()
    assert attempts == [2] * (groupcommit.MAX_LOCK_CONFLICTS + 1)


def test_the_writer_and_the_committer_hold_the_context_while_they_run() -> None:
    """Both threads enter `context()` once each and leave it when the writer stops; a
    committed write answers without waking the writer, a failed one wakes it (to rebuild
    the projection and answer)."""
    import threading
    from contextlib import contextmanager

    from tools.service import groupcommit

    held: list[tuple[str, str]] = []

    @contextmanager
    def context() -> Any:
        held.append(("in", threading.current_thread().name))
        yield
        held.append(("out", threading.current_thread().name))

    failures = ["once"]
    resets: list[int] = []

    def write() -> None:
        if failures and failures.pop() == "once":
            raise RuntimeError("the commit failed")

    def run_batch(batch: Any, wait: Any) -> groupcommit.Prepared:
        return groupcommit.Prepared([c.key for c in batch], write)

    writer = groupcommit.GroupCommit(run_batch, lambda: resets.append(1), context=context)
    writer._queue = _RecordingQueue()
    writer.start()
    try:
        # The first write fails: its one command answers with the failure.
        with pytest.raises(RuntimeError, match="the commit failed"):
            writer.submit(Named("a")).result(10)  # type: ignore[arg-type]
        assert writer.submit(Named("b")).result(10) == "b"  # type: ignore[arg-type]
        assert writer.submit(Named("c")).result(10) == "c"  # type: ignore[arg-type]
    finally:
        writer.stop()
    assert resets == [1]
    assert sum(1 for i in writer._queue.items if i is groupcommit._WOKEN) == 1
    assert sorted(held) == [("in", "group-commit"), ("in", "group-commit-write"),
                            ("out", "group-commit"), ("out", "group-commit-write")]


def test_a_reader_waiting_for_a_rebuild_does_not_rebuild_again(
        service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from tools.service import ledger as ledger_module

    built: list[object] = []
    building, finish = threading.Event(), threading.Event()
    waiting_for_it = threading.Event()
    plain = ledger_module.LedgerSession

    def session(*args: Any, **kwargs: Any) -> Any:
        built.append(object())
        if len(built) == 1:
            building.set()
            finish.wait()
        return plain(*args, **kwargs)

    class Signalling:
        """The load lock, saying when a second thread waits for it."""

        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __enter__(self) -> None:
            if self.lock.locked():
                waiting_for_it.set()
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    monkeypatch.setattr(ledger_module, "LedgerSession", session)
    service._load_lock = Signalling()
    rebuilder = threading.Thread(target=service.reset)  # as after a failed batch
    rebuilder.start()
    building.wait()
    reader = threading.Thread(target=lambda: service.session)  # a read meanwhile
    reader.start()
    waiting_for_it.wait()
    finish.set()
    rebuilder.join()
    reader.join()
    assert len(built) == 1
    with service.reading() as ledger:
        assert ledger.digest() == fold_canonical(service.journal).digest()


def test_decisions_after_a_batch_of_events_with_a_reversal_commit_without_a_rebuild(
        service: Any) -> None:
    # The batch of events goes first in the group and appends at once (a reversal needs
    # the journal); the decisions after it are deferred, and must follow its event.
    service.decide_now(commands.Usage("u0", "a", 1, None, None, 5))
    projection = service.session
    items = [_Item(commands.AppendEvents.of_records("fix", [
                 {"type": "reverse", "event": "u0", "time": 10, "reason": "twice",
                  "id": "r1"}])),
             _Item(commands.Usage("u1", "a", 7, None, None, None)),
             _Item(commands.Usage("u2", "a", 3, None, None, None))]
    service.writer._commit(items)
    assert [item.future.result()["position"] for item in items[1:]] == [4, 5]
    assert service.session is projection  # no rebuild from the newest checkpoint
    with service.reading() as ledger:
        assert ledger.digest() == fold_canonical(service.journal).digest()


@dataclass(frozen=True)
class Raises:
    """A command that raises `error` before it appends anything."""

    key: str | None
    error: BaseException

    def locks(self, ledger: Ledger) -> list[str]:
        return ["a"]

    def run(self, service: LedgerService) -> Any:
        raise self.error


def _between_two_usages(service: Any, error: BaseException) -> int:
    """Commit a command raising `error` between two good usage reports, in one call of the
    writer: the transactions it took. The command's answer is the error, the usage
    reports' their own ids, whatever became of the batch."""
    good = _Item(commands.Usage("u1", "a", 7, None, None, 10))
    raising = _Item(Raises(None, error))
    other = _Item(commands.Usage("u2", "a", 3, None, None, 10))
    before = service.writer.batches
    service.writer._commit([good, raising, other])
    while service.writer._ahead is not None:
        service.writer._settle_ahead()
    assert raising.future.exception() is error
    assert [good.future.result()["id"], other.future.result()["id"]] == ["u1", "u2"]
    batches: int = service.writer.batches - before
    return batches


@pytest.mark.parametrize("error", [
    IdempotencyConflict("key 'k' holds another event"),
    ServiceProblem(422, "bad events", slug="invalid-events"),
    ServiceProblem(499, "a 4xx"),
    UnknownAccount("unknown account 'z'"),
    KeyError("z"),
], ids=["idempotency", "422", "499", "ledger", "key"])
def test_a_refusal_is_its_commands_answer_and_the_batch_commits(
        service: Any, error: BaseException) -> None:
    """A command that refuses (a 4xx, a ledger error, a key in use) leaves the transaction
    intact: the batch commits once with its other decisions, the refusal as its answer."""
    assert _between_two_usages(service, error) == 1


@pytest.mark.parametrize("error", [
    ServiceProblem(500, "the database is away"),
    ServiceProblem(503, "unavailable"),
    VersionConflict("the stream moved"),
    SQLAlchemyError("a constraint failed"),
    RuntimeError("a bug"),
], ids=["500", "503", "journal", "sql", "bug"])
def test_a_failure_fails_the_batch_and_each_decision_is_decided_alone(
        service: Any, error: BaseException) -> None:
    """A command failing with a 5xx or a journal error (not a refusal) fails its batch's
    transaction: nothing of the batch commits together; each decision is then decided
    alone, the good ones committed one by one."""
    assert _between_two_usages(service, error) == 2  # each good decision alone


def test_a_batch_holds_at_most_max_batch_decisions_and_one_per_key(tmp_path: Path) -> None:
    """The writer puts at most `max_batch` decisions in one transaction, and a decision
    whose key a decision of the batch already has waits for the next batch (the retry
    must find its first attempt recorded), the others keeping their order."""
    svc = LedgerService(f"sqlite:///{tmp_path / 'mb.db'}", clock=lambda: 10, max_batch=2)
    svc.reset()
    svc.ready.set()
    try:
        grant = commands.Grant("g0", "a", 100, None, None, None, None, 1)
        uses = [commands.Usage(f"u{i}", "a", 1, None, None, 10) for i in range(5)]
        _, groups = svc.writer.commit_in_turn([grant, *uses])
        assert groups == [[0, 1], [2, 3], [4, 5]]
        svc.writer.max_batch = 512
        same = [commands.Usage(key, "a", 1, None, None, 10) for key in ("k", "k", "m")]
        futures, groups = svc.writer.commit_in_turn(same)
        assert groups == [[0, 2], [1]]
        assert [f.result()["id"] for f in futures] == ["k", "k", "m"]
    finally:
        svc.writer.stop()
        svc.close()


def test_a_key_that_a_record_of_the_batch_takes_as_its_id_waits_for_the_next_batch(
        tmp_path: Path) -> None:
    """A single write under a key that a record queued before it in the batch takes as
    its id is decided once that record is written, as one at a time: the key names an
    event, whatever binding it also has. In one batch its look-up missed the record: a
    key bound to a start that found nothing answered 409 for that start instead."""
    svc = LedgerService(f"sqlite:///{tmp_path / 'ids.db'}", clock=lambda: 10)
    svc.reset()
    svc.ready.set()
    try:
        nothing = commands.StartNext("k0", 10)
        svc.writer.commit_in_turn([nothing])
        grant = commands.Grant("g0", "a", 100, None, None, None, None, 1)
        record = commands.AppendEvents.of_records(
            None, [{"type": "consume", "account": "a", "amount": 1, "time": 10, "id": "k0"}])
        keyed = commands.Grant("k0", "a", 1, None, None, None, None, 10)
        futures, groups = svc.writer.commit_in_turn([grant, record, keyed])
        assert groups == [[0, 1], [2]]
        with pytest.raises(IdempotencyConflict, match="'k0' is already recorded"):
            futures[2].result()
    finally:
        svc.writer.stop()
        svc.close()


@dataclass(frozen=True)
class Keyed:
    """A command the fake batch runner below answers with its own key."""

    key: str | None

    def locks(self, ledger: Ledger) -> list[str]:
        return []

    def run(self, service: Any) -> Any:  # pragma: no cover - the fake runner answers
        return self.key


def _held_writer() -> tuple[GroupCommit, list[list[str | None]], threading.Event]:
    """A writer whose batch runner records each batch and holds the first one until the
    event is set (meanwhile callers queue)."""
    batches: list[list[str | None]] = []
    release = threading.Event()

    def run_batch(cmds: Any, wait: Any) -> list[Any]:
        if not batches:
            release.wait(10)
        batches.append([c.key for c in cmds])
        return [c.key for c in cmds]

    writer = GroupCommit(run_batch, lambda: None)
    writer.start()
    return writer, batches, release


def test_a_call_queued_among_decisions_runs_after_their_batch() -> None:
    """`call(fn)` runs between two batches: queued among decisions, it runs once the batch
    that takes them (one batch: the call does not split it) committed."""
    writer, batches, release = _held_writer()
    try:
        first = writer.submit(Keyed("first"))
        while not writer._queue.empty():
            time.sleep(0.001)  # the writer holds the first batch
        a = writer.submit(Keyed("a"))
        called = writer.call(lambda: [list(b) for b in batches])
        b = writer.submit(Keyed("b"))
        release.set()
        assert [f.result(5) for f in (first, a, b)] == ["first", "a", "b"]
        assert called.result(5) == [["first"], ["a", "b"]]
    finally:
        release.set()
        writer.stop(5)


def test_a_stop_queued_behind_decisions_answers_them_first() -> None:
    """`stop()` decides what was queued before it, then ends the writer."""
    writer, batches, release = _held_writer()
    first = writer.submit(Keyed("first"))
    while not writer._queue.empty():
        time.sleep(0.001)
    a = writer.submit(Keyed("a"))
    thread = writer._thread
    stopping = threading.Thread(target=writer.stop, args=(5,))
    stopping.start()
    while writer._thread is not None:
        time.sleep(0.001)
    release.set()
    stopping.join(10)
    assert [first.result(5), a.result(5)] == ["first", "a"]
    assert batches == [["first"], ["a"]]
    assert thread is not None and not thread.is_alive()


def test_a_writer_stopped_by_a_bug_answers_every_waiting_and_later_decision_503() -> None:
    """A bug outside the handling of refusals and failed commits ends the writer's thread:
    nobody is left waiting for ever. The batch it held, what was queued and what comes
    after are each answered 503 naming the error, and the error is kept."""
    writer, batches, release = _held_writer()

    def a_bug(items: Any, results: Any) -> None:
        raise RuntimeError("a bug in delivering the answers")

    writer._committed = a_bug  # type: ignore[method-assign]
    first = writer.submit(Keyed("first"))
    while not writer._queue.empty():
        time.sleep(0.001)  # the writer holds the first batch
    queued = [writer.submit(Keyed("a")), writer.submit(Keyed("b"))]
    called = writer.call(lambda: "never run")
    release.set()
    try:
        for future in (first, *queued, called):
            problem = future.exception(10)
            assert isinstance(problem, ServiceProblem) and problem.status == 503, problem
            assert "RuntimeError" in problem.detail and "restart" in problem.detail
        assert isinstance(writer.failure, RuntimeError)
        later = writer.submit(Keyed("later")).exception(1)
        assert isinstance(later, ServiceProblem) and "RuntimeError" in later.detail
        assert batches == [["first"]]
    finally:
        writer.stop(5)


def test_a_service_whose_writer_stopped_on_a_bug_says_failed_and_answers_503(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    from eventstore import MemoryJournal
    from tools.service import create_app

    def a_bug(self: GroupCommit, items: Any, results: Any) -> None:
        raise RuntimeError("a bug in delivering the answers")

    with TestClient(create_app(MemoryJournal(), clock=lambda: 10, mount_web=False)) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.post("/v1/accounts", json={"account": "a"}).status_code == 201
        monkeypatch.setattr(GroupCommit, "_committed", a_bug)
        answer = http.post("/v1/accounts/a/grants", json={"amount": 5})
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        for path in ("/healthz", "/readyz"):
            health = http.get(path)
            assert (health.status_code, health.json()) == (503, {"status": "failed"})
        again = http.post("/v1/accounts/a/usage", json={"amount": 1})
        assert again.status_code == 503 and "RuntimeError" in again.json()["detail"]


def test_a_read_waiting_for_a_batch_the_stopped_writer_decided_is_answered_503(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A batch decided ahead of its transaction, whose writer then stopped on a bug before
    handing it to the committer, will never commit: a read waiting for it is answered
    503 rather than kept waiting."""
    def a_bug(self: GroupCommit, items: Any, prepared: Any) -> None:
        raise RuntimeError("a bug in handing the batch over")

    with _granted_service(tmp_path) as svc:
        monkeypatch.setattr(GroupCommit, "_write", a_bug)
        decided = svc.writer.submit(commands.Usage("u1", "a", 7, None, None, 10))
        problem = decided.exception(10)
        assert isinstance(problem, ServiceProblem) and problem.status == 503, problem
        assert svc._uncommitted == 1  # decided ahead, never written
        with pytest.raises(ServiceProblem, match="RuntimeError"), svc.reading():
            pass
    # Nor does the projection holding it try to leave a checkpoint at shutdown (refused
    # only because the journal has no event at its position); the next start knows only
    # what the journal holds.
    assert not [r for r in caplog.records if "checkpoint" in r.getMessage()]
    again = LedgerService(f"sqlite:///{tmp_path / 'gc.db'}", clock=lambda: 10)
    again.start()
    try:
        assert again.journal.get("u1") is None
        with again.reading() as ledger:
            assert ledger.digest() == fold_canonical(again.journal).digest()
    finally:
        again.stop()
        again.close()


def test_a_writer_stopped_while_a_batch_is_written_answers_what_that_left_unanswered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer stops on a bug while the committer is writing the batch before: that
    batch commits, and if answering it fails too, its callers are still answered (500,
    saying it committed) rather than left waiting."""
    writing = threading.Event()
    release = threading.Event()
    write_ahead = LedgerService._write_ahead

    def slow_write(self: LedgerService, deferred: Any) -> None:
        writing.set()
        release.wait(30)
        write_ahead(self, deferred)

    next_batch = GroupCommit._next_batch
    calls = [0]

    def second_batch_fails(self: GroupCommit, first: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            threading.Timer(0.5, release.set).start()  # the write ahead goes on
            raise RuntimeError("a bug in forming a batch")
        return next_batch(self, first)

    def answering_fails(self: GroupCommit, items: Any, results: Any) -> None:
        raise RuntimeError("a bug in answering")

    with _granted_service(tmp_path) as svc:
        try:
            monkeypatch.setattr(LedgerService, "_write_ahead", slow_write)
            monkeypatch.setattr(GroupCommit, "_next_batch", second_batch_fails)
            monkeypatch.setattr(GroupCommit, "_committed", answering_fails)
            first = svc.writer.submit(commands.Usage("u1", "a", 7, None, None, 10))
            assert writing.wait(10)  # decided, handed to the committer, held there
            second = svc.writer.submit(commands.Usage("u2", "a", 3, None, None, 10))
            # The batch ahead committed: its callers are told so; the one the stopped
            # writer held was never written.
            for future, status in ((first, 500), (second, 503)):
                problem = future.exception(20)
                assert isinstance(problem, ServiceProblem) and problem.status == status, (
                    problem)
            assert svc.journal.get("u1") is not None and svc.journal.get("u2") is None
        finally:
            release.set()  # before the stop, which finishes the write


@contextmanager
def _granted_service(tmp_path: Path) -> Iterator[LedgerService]:
    """A started service on a SQLite file in `tmp_path`, account `a` granted 100;
    stopped and closed after the block."""
    svc = LedgerService(f"sqlite:///{tmp_path / 'gc.db'}", clock=lambda: 10)
    svc.start()
    try:
        svc.decide_now(commands.Grant("g0", "a", 100, None, None, None, None, 1))
        yield svc
    finally:
        svc.stop()
        svc.close()


def test_a_waiter_going_away_does_not_cancel_a_look_others_share(tmp_path: Path) -> None:
    """Reads that find the projection stale share one look at the journal; a reader
    whose request is cancelled (its client went away) must not cancel it for the rest."""
    import asyncio

    with _granted_service(tmp_path) as svc:
        gate = threading.Event()
        svc.writer.call(gate.wait)  # the writer busy: the look below stays queued
        shared = svc.writer.call(lambda: "looked")

        async def both() -> str:
            gone = asyncio.ensure_future(asyncio.wrap_future(shared))
            staying = asyncio.ensure_future(asyncio.wrap_future(shared))
            await asyncio.sleep(0)
            gone.cancel()
            await asyncio.sleep(0.05)
            gate.set()
            return await asyncio.wait_for(staying, 10)

        assert asyncio.run(both()) == "looked"
        assert shared.result(timeout=10) == "looked"
        # The writer answered the look and goes on deciding.
        assert svc.writer.failure is None
        assert svc.decide_now(commands.Usage("u1", "a", 7, None, None, 10))["debt"] == 0


def test_a_committed_batch_whose_answering_fails_is_answered_500_and_the_writer_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committer answers the batch it wrote; should that raise (a bug, on a thread
    where nothing else catches it), the batch's callers are told it committed instead of
    waiting for ever, a retry under the key answers it, and later decisions go on."""
    committed = GroupCommit._committed
    failures = [1]

    def answering_fails_once(self: GroupCommit, items: Any, results: Any) -> None:
        if failures and threading.current_thread().name == "group-commit-write":
            failures.pop()
            raise RuntimeError("a bug in answering")
        committed(self, items, results)

    with _granted_service(tmp_path) as svc:
        monkeypatch.setattr(GroupCommit, "_committed", answering_fails_once)
        usage = commands.Usage("u1", "a", 7, None, None, 10)
        problem = svc.writer.submit(usage).exception(20)
        assert not failures, "the batch was not answered by the committer"
        assert isinstance(problem, ServiceProblem) and problem.status == 500, problem
        assert "committed" in problem.detail and "RuntimeError" in problem.detail
        answer = from_exception(problem)  # what the HTTP caller reads: the detail, told
        assert answer.status_code == 500 and b"was committed" in answer.body
        assert svc.journal.get("u1") is not None
        assert svc.writer.failure is None
        assert svc.decide_now(usage)["debt"] == 0  # the retry: the original answer
        assert svc.decide_now(commands.Usage("u2", "a", 3, None, None, 10))["debt"] == 0
        assert len([e for e in svc.journal.read() if e.id in ("u1", "u2")]) == 2


def test_a_read_waiting_for_a_batch_that_fails_to_commit_never_sees_its_decisions(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read waits while a batch decided ahead is being written; if that write fails,
    the read answers from the journal's state (the rebuilt projection), never from the
    projection that held the batch's decisions."""
    from sqlalchemy.exc import OperationalError

    writing = threading.Event()
    release = threading.Event()

    def failing_write(self: LedgerService, deferred: Any) -> None:
        writing.set()
        release.wait(30)
        raise OperationalError("INSERT", {}, Exception("the disk went away"))

    with _granted_service(tmp_path) as svc:
        journal_state = fold_canonical(svc.journal).digest()
        monkeypatch.setattr(LedgerService, "_write_ahead", failing_write)
        decided = svc.writer.submit(commands.Usage("u1", "a", 7, None, None, 10))
        assert writing.wait(10)  # decided on the projection, its write held
        seen: list[str] = []

        def read() -> None:
            with svc.reading() as ledger:
                seen.append(ledger.digest())

        reader = threading.Thread(target=read)
        reader.start()
        deadline = time.monotonic() + 10
        while svc._readers == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert svc._readers == 1  # waiting for the batch's commit
        monkeypatch.undo()  # the decision's retry alone writes normally
        release.set()
        reader.join(20)
        assert not reader.is_alive()
        assert isinstance(decided.exception(20), OperationalError)
        assert svc.journal.get("u1") is None
        assert seen == [journal_state]  # not the projection holding u1
        with svc.reading() as ledger:
            assert ledger.digest() == fold_canonical(svc.journal).digest()
