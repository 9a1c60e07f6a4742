"""Batches mixing every kind of decision (grants, usage, accounts, submits, starts,
completions with refunds, cancels, batches of events with late events, voids and
reversals, keyed retries and keys reused by another request), each batch decided while
the one before it is still being written, decide exactly as the same commands do one at
a time on the plain path (one append per decision, each committed before the next is
decided): the same answers, the same journal, the same request keys bound."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import Journal, JournalLike, MemoryJournal, canonical_json
from projections import GPUCreditTracker
from projections.replay import fold_canonical
from projections.session import LedgerSession
from tools.service import commands, writes
from tools.service.groupcommit import Command, GroupCommit, _Item, ids_named
from tools.service.ledger import LedgerService

_CLOCK = 15
_ACCOUNTS = ["a", "b"]
_JOBS = ["j0", "j1", "j2"]
# Mostly live decisions (on the service's clock, never before the latest event), some
# late; mostly keys of their own, some shared (a retry, or a key reused).
_TIMES = st.one_of(st.none(), st.none(), st.integers(0, 20))
_KEYS = st.one_of(st.sampled_from(["k0", "k1", "k2", "k3"]), st.none(), st.none())
_ACCOUNT = st.sampled_from(_ACCOUNTS)
_JOB = st.sampled_from(_JOBS)
_AMOUNT = st.integers(1, 12)


def _record(kind: str, draw: Any) -> dict[str, Any]:
    time = draw(st.integers(0, 20))
    if kind == "grant":
        record = {"type": "grant", "account": draw(_ACCOUNT), "amount": draw(_AMOUNT),
                  "time": time}
        if draw(st.booleans()):
            record["expiry"] = time + draw(st.integers(1, 10))
        return record
    if kind == "consume":
        return {"type": "consume", "account": draw(_ACCOUNT), "amount": draw(_AMOUNT),
                "time": time}
    if kind == "adjust":
        return {"type": "adjust", "account": draw(_ACCOUNT),
                "amount": draw(st.sampled_from([-4, 3, 7])), "time": time, "reason": "r"}
    if kind == "void":
        return {"type": "void", "grant": draw(st.sampled_from(["e0", "e1", "k0", "k1"])),
                "time": time}
    if kind == "reverse":
        return {"type": "reverse", "event": draw(st.sampled_from(["e0", "e1", "e2", "k0",
                                                                   "k1", "k2"])),
                "time": time, "reason": "r"}
    if kind == "submit":
        return {"type": "submit", "account": draw(_ACCOUNT), "job": draw(_JOB),
                "cost": draw(_AMOUNT), "priority": draw(st.integers(0, 2)), "time": time}
    if kind == "start":
        return {"type": "start", "job": draw(_JOB), "time": time}
    if kind == "complete":
        return {"type": "complete", "job": draw(_JOB), "success": draw(st.booleans()),
                "time": time, "refund_fraction": draw(st.sampled_from([0.0, 0.5, 1.0]))}
    return {"type": "cancel", "job": draw(_JOB), "time": time}


@st.composite
def _events(draw: Any) -> list[dict[str, Any]]:
    kinds = draw(st.lists(st.sampled_from(
        ["grant", "grant", "consume", "adjust", "void", "reverse", "submit", "start",
         "complete", "cancel"]), min_size=1, max_size=3))
    out = []
    for kind in kinds:
        record = _record(kind, draw)
        named = draw(st.sampled_from([None, None, "e0", "e1", "e2", "k0", "k1"]))
        if named is not None:
            record["id"] = named
        out.append(record)
    return out


@st.composite
def _request(draw: Any) -> tuple[Any, ...]:
    kind = draw(st.sampled_from(["grant", "usage", "open", "submit", "start", "start",
                                 "complete", "cancel", "events"]))
    key = draw(_KEYS)
    if kind == "grant":
        time = draw(_TIMES)
        expiry = None if time is None or draw(st.booleans()) else time + draw(
            st.integers(1, 10))
        return ("grant", key, draw(_ACCOUNT), draw(_AMOUNT), expiry, time)
    if kind == "usage":
        return ("usage", key, draw(_ACCOUNT), draw(_AMOUNT), draw(_TIMES))
    if kind == "open":
        return ("open", key, draw(_ACCOUNT), draw(st.sampled_from([None, 1])), draw(_TIMES))
    if kind == "submit":
        return ("submit", key, draw(_JOB), draw(_ACCOUNT), draw(_AMOUNT),
                draw(st.integers(0, 2)), draw(_TIMES))
    if kind == "start":
        return ("start", key, draw(_TIMES))
    if kind == "complete":
        return ("complete", key, draw(_JOB), draw(st.booleans()),
                draw(st.sampled_from([0.0, 0.5, 1.0])), draw(_TIMES))
    if kind == "cancel":
        return ("cancel", key, draw(_JOB), draw(_TIMES))
    return ("events", key, draw(_events()))


def _command(request: tuple[Any, ...], serial: int) -> Command | None:
    """The command the route makes of `request` (None: the route refuses it before the
    writer). A request without a key gets an id of its own, the same in both runs."""
    kind, key = request[0], request[1]
    own = key if key is not None else f"n{serial}"
    if kind == "grant":
        _, _, account, amount, expiry, time = request
        return commands.Grant(own, account, amount, expiry, None, None, None, time)
    if kind == "usage":
        _, _, account, amount, time = request
        return commands.Usage(own, account, amount, None, None, time)
    if kind == "open":
        _, _, account, max_running, time = request
        return commands.OpenAccount(own, account, max_running, time)
    if kind == "submit":
        _, _, job, account, cost, priority, time = request
        return commands.Submit(own, job, account, cost, priority, None, time)
    if kind == "start":
        return commands.StartNext(key, request[2])
    if kind == "complete":
        _, _, job, success, fraction, time = request
        return commands.Complete(own, job, success, fraction, time)
    if kind == "cancel":
        _, _, job, time = request
        return commands.Cancel(own, job, time)
    events = request[2]
    recorded: list[Any] = []
    entries, keyed, problems = writes._checked(events, key, False, far=[],
                                               recorded=recorded)
    if problems:
        return None
    fingerprint = ""
    if key is not None:
        fingerprint = hashlib.sha256(canonical_json(recorded).encode()).hexdigest()
    return commands.AppendEvents(key, tuple(entries), keyed, fingerprint)


def _outcome(answer: Any) -> Any:
    if isinstance(answer, BaseException):
        return (type(answer).__name__, getattr(answer, "status", None),
                _FRESH.sub("fresh", str(answer)))
    return answer


def _journal(journal: JournalLike) -> list[tuple[Any, ...]]:
    # A keyless start's event has a fresh random id of its own in each run.
    return [(r.position, "fresh" if _FRESH.fullmatch(r.id) else r.id, r.stream, r.type,
             r.time, canonical_json(r.payload)) for r in journal.read(order="position")]


_FRESH = re.compile("[0-9a-f]{32}")


def _binding(journal: JournalLike, key: str) -> Any:
    bound = journal.request(key)
    return None if bound is None else dataclasses.replace(bound, recorded_at=0, position=0)


Foreign = tuple[str, str, int, int]
"""Another writer's event: (grant or consume, account, amount, time)."""


def _foreign(journal: JournalLike, event: Foreign) -> None:
    """Another writer (the library) records `event` on the journal."""
    kind, account, amount, time = event
    tracker = GPUCreditTracker(journal, account=account)
    if kind == "grant":
        tracker.grant(amount, time, time + 8)
    else:
        tracker.consume(amount, time)


def _one_at_a_time(journal: JournalLike, batch: Sequence[Command],
                   foreign: dict[int, Foreign] | None = None) -> list[Any]:
    service = LedgerService(journal, clock=lambda: _CLOCK, defer_appends=False,
                            checkpoint_every=None)
    service.reset()
    service.ready.set()
    try:
        out = []
        for index, command in enumerate(batch):
            if foreign and index in foreign:
                _foreign(journal, foreign[index])
            head = journal.head()
            bound = None if command.key is None else _binding(journal, command.key)
            (future,), _ = service.writer.commit_in_turn([command])
            refused = future.exception()
            if refused is not None:  # a refusal recorded nothing, bound nothing
                assert journal.head() == head, refused
                assert command.key is None or _binding(journal, command.key) == bound
            out.append(_outcome(refused or future.result()))
        return out
    finally:
        service.writer.stop()


def _held_writes(service: LedgerService, foreign: list[Foreign],
                 first_of: Callable[[Any], int], landed: dict[int, Foreign]) -> None:
    """Each batch's write waits until the writer waits for it, so every batch is decided
    while the one before it is still being written. Before a write of events, another
    writer may record one of `foreign` (`landed`: before which command, by `first_of`
    the first command of the batch being written)."""
    gate = threading.Event()
    written = service.batching.written
    writer: GroupCommit = service.writer
    handed: list[Any] = []  # the first item of each batch handed to the committer
    write = writer._write

    def handing(items: list[Any], prepared: Any) -> None:
        handed.append(items[0])
        write(items, prepared)

    writer._write = handing  # type: ignore[method-assign]

    def held(deferred: Any) -> Any:
        assert gate.wait(30)
        gate.clear()
        first = handed.pop(0)
        if (deferred.events or deferred.requests) and foreign:
            event = foreign.pop(0)
            landed[first_of(first)] = event
            _foreign(service.journal, event)
        return written(deferred)

    service.batching.written = held  # type: ignore[method-assign]
    wait_ahead, settle_ahead = writer._wait_ahead, writer._settle_ahead

    def waiting(wait: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            if writer._ahead is not None:  # (else the next write would pass unheld)
                gate.set()
            return wait()
        return run

    writer._wait_ahead = waiting(wait_ahead)  # type: ignore[method-assign]
    writer._settle_ahead = waiting(settle_ahead)  # type: ignore[method-assign]


def _batched(journal: JournalLike, groups: Sequence[Sequence[Command]],
             foreign: Sequence[Foreign] = (), landed: dict[int, Foreign] | None = None,
             checkpoints: Collection[int] = ()) -> list[Any]:
    """The groups decided and committed by the writer, each while the one before it is
    written; after the groups numbered in `checkpoints`, the service saves one (later
    late events must drop it, and a rebuild resumes from it)."""
    service = LedgerService(journal, clock=lambda: _CLOCK, checkpoint_every=None)
    service.reset()
    service.ready.set()
    writer = service.writer
    items = [[_Item(command) for command in group] for group in groups]
    index = {id(item): i for i, item in enumerate(i for group in items for i in group)}
    _held_writes(service, list(foreign), lambda item: index[id(item)],
                 {} if landed is None else landed)
    try:
        for number, group in enumerate(items):
            service._defer_after = 0.0
            writer._commit(group)
            if number in checkpoints:
                while writer._ahead is not None:
                    writer._settle_ahead()
                service._checkpoint("between two batches")
        while writer._ahead is not None:
            writer._settle_ahead()
        out = []
        for group in items:
            for item in group:
                assert item.future is not None and item.future.done()
                out.append(_outcome(item.future.exception() or item.future.result()))
        folded = fold_canonical(journal).digest()
        with service.reading() as ledger:
            assert ledger.digest() == folded
        assert LedgerSession(journal).ledger.digest() == folded  # from its checkpoint
        return out
    finally:
        writer.stop()


def _groups(batch: list[Command], cuts: list[int]) -> list[list[Command]]:
    """`batch` cut into consecutive groups, never two commands naming one key or record
    id in a group (the writer never batches them together)."""
    groups: list[list[Command]] = [[]]
    keys: set[str] = set()
    for index, command in enumerate(batch):
        ids = ids_named(command)
        if groups[-1] and (index in cuts or any(i in keys for i in ids)):
            groups.append([])
            keys = set()
        groups[-1].append(command)
        keys.update(ids)
    return groups


Script = tuple[list[Any], list[int], list[Foreign], list[tuple[int, int]], set[int]]
"""Requests, where batches are cut, other writers' events, requests sent again, and
the batches after which a checkpoint is saved."""

_SCRIPT = st.tuples(st.lists(_request(), min_size=1, max_size=14),
                    st.lists(st.integers(0, 13), max_size=8),
                    st.lists(st.tuples(st.sampled_from(["grant", "consume"]), _ACCOUNT,
                                       _AMOUNT, st.integers(0, 20)), max_size=2),
                    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=4),
                    st.sets(st.integers(0, 8), max_size=3))


def _check(make: Callable[[], JournalLike], script: Script) -> None:
    requests, cuts, foreign, repeats, checkpoints = script
    for at, which in repeats:  # a request sent again as it was: a retry, or a copy
        requests.insert(at % (len(requests) + 1), requests[which % len(requests)])
    batch = [c for c in (_command(r, i) for i, r in enumerate(requests)) if c is not None]
    opened = [commands.Grant("g-a", "a", 10, None, None, None, None, 0),
              commands.Grant("g-b", "b", 4, 12, None, None, None, 1)]
    batch = opened + batch
    sequential, batched = make(), make()
    try:
        # Another writer's events land before the batch whose write they move; the
        # one-at-a-time run records them before that batch's first command.
        landed: dict[int, Foreign] = {}
        together = _batched(batched, _groups(batch, [2, *(c + 2 for c in cuts)]),
                            foreign if batched.url is not None else (), landed,
                            checkpoints)
        alone = _one_at_a_time(sequential, batch, landed)
        assert together == alone
        assert _journal(batched) == _journal(sequential)
        keys = {c.key for c in batch if c.key is not None}
        for key in sorted(keys):
            assert _binding(batched, key) == _binding(sequential, key), key
    finally:
        for journal in (sequential, batched):
            journal.close()


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_SCRIPT)
def test_mixed_batches_decide_as_one_at_a_time_on_sqlite(
        tmp_path_factory: pytest.TempPathFactory, script: Script
        ) -> None:
    def make() -> JournalLike:
        return Journal(f"sqlite:///{tmp_path_factory.mktemp('mixed') / 'journal.db'}")
    _check(make, script)


@settings(max_examples=75, deadline=None)
@given(_SCRIPT)
def test_mixed_batches_decide_as_one_at_a_time_in_memory(
        script: Script) -> None:
    _check(MemoryJournal, script)
