"""The HTTP service's group commit, simulated in process on the world's journal.

The service (`tools.service`) decides the commands of many callers on one live
projection and commits them together: `GroupCommit` forms a batch of what queued (at
most `max_batch`, never two commands with one idempotency key), `LedgerService.
_run_batch` decides the batch in one journal transaction and commits it; a batch whose
transaction fails answers no command of it with success, has the projection rebuilt
from the journal, and, unless the database is unreachable, is run again one command at a
time. The simulator uses exactly that code, not a copy of it: a `LedgerService` on the
world's journal, and its `GroupCommit`, whose two steps (form the next batch, commit it)
`commit_in_turn` takes itself, in order, in the simulator's own thread. The writer's
thread is never started: it lingers on wall-clock time, which would make the batches a
run forms depend on the machine's load instead of on the seed.

The faults (drawn per batch op, `tools.sim.actors`):

- ``commit-fails``: the first batch's commit fails with an error of the database (not a
  lost connection): nothing of it is recorded, the projection is rebuilt, and each of
  its commands is decided again on its own;
- ``commit-lost``: the first batch's commit fails because the database is unreachable:
  every command of the group gets the error, nothing of it is recorded, the projection
  is rebuilt; then every caller retries with the same id;
- ``answers-lost``: every batch commits, and the process dies before answering: every
  caller retries with the same id, and gets what the first attempt decided.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from eventstore import ConnectionProblem, JournalLike
from tools.service import commands
from tools.service.groupcommit import Command
from tools.service.ledger import LedgerService

FAULTS = ("commit-fails", "commit-lost", "answers-lost")

_LOG = logging.getLogger("gpu_credits.service")

MAX_BATCH = 4
"""Commands per batch: small, so a simulated group is often split over several."""


class CommitFailed(RuntimeError):
    """The batch's commit failed (the database refused it; the connection is fine)."""


CHECKPOINT_EVERY = 200
"""Events after the newest checkpoint before the service saves another: often, so that
restarts and rebuilds after a failed commit open from one (and a late event then refolds
across it), as a long-running service's do."""


def open_service(journal: JournalLike, clock: Callable[[], int]) -> LedgerService:
    """A service process on `journal`, its projection loaded, its writer not started."""
    service = LedgerService(journal, clock=clock, max_batch=MAX_BATCH,
                            checkpoint_every=CHECKPOINT_EVERY)
    service.reset()  # loads the projection (what `start` does, without the thread)
    service.ready.set()
    return service


def command_of(line: dict[str, Any]) -> Command:
    """The service command a line asks for (job decisions live, on the service's clock;
    usage and grants at the time they happened)."""
    kind, key = line["type"], line["id"]
    if kind == "submit":
        return commands.Submit(key, line["job"], line["account"], line["cost"],
                               line["priority"], line.get("pool"), None)
    if kind == "start":
        return commands.StartNext(key, None)
    if kind == "complete":
        return commands.Complete(key, line["job"], line["success"],
                                 line.get("refund_fraction", 1.0), None)
    if kind == "cancel":
        return commands.Cancel(key, line["job"], None)
    if kind == "consume":
        return commands.Usage(key, line["account"], line["amount"], line.get("pool"), None,
                              line["time"])
    if kind == "grant":
        return commands.Grant(key, line["account"], line["amount"], line["expiry"],
                              line.get("pool"), line.get("priority"), None, line["time"])
    raise ValueError(f"the simulated service cannot perform a {kind!r} line")


@dataclass
class Strike:
    """Which group a planned commit failure struck, as `failing_commit` saw it."""

    groups: int = 0  # groups formed so far
    group: int | None = None  # the one whose commit failed (None: none opened one to fail)


def commit_in_turn(service: LedgerService, batch: Sequence[Command],
                   strike: Strike | None = None) -> tuple[list[Any], list[list[int]]]:
    """Queue `batch` for the service's writer and commit it as the writer's loop would,
    batch after batch, until every command is answered: (each command's answer, or the
    exception it got; the groups committed together, as indexes into `batch`). `strike`:
    the `failing_commit` in force, told as each group is formed."""
    quiet = _LOG.disabled
    # A failed batch is logged as a warning for the operator; here it is a planned
    # fault, and the simulator reports what it finds itself.
    _LOG.disabled = True
    ask_afresh = _undeferred(service)

    def before_batch() -> None:
        service.checkpoint_if_due()
        ask_afresh()
        if strike is not None:
            strike.groups += 1

    try:
        futures, groups = service.writer.commit_in_turn(batch, before_batch=before_batch)
    finally:
        _LOG.disabled = quiet
    out: list[Any] = []
    for future in futures:
        assert future.done()
        failed = future.exception()
        out.append(failed if failed is not None else future.result())
    return out, groups


def _undeferred(service: LedgerService) -> Callable[[], None]:
    def ask_afresh() -> None:
        # The service writes one decision at a time for a while after it saw another
        # writer's events (measured on the wall clock); the simulator asks afresh each
        # batch, so what a batch does depends on the journal alone.
        service._defer_after = 0.0
    return ask_afresh


@contextmanager
def failing_commit(journal: JournalLike, error: BaseException) -> Iterator[Strike]:
    """The next batch's transaction fails as it commits: everything in it was decided
    and appended, then `error` is raised inside the transaction, so the journal rolls it
    back. Only the outermost transaction fails (a decision's own joins it), and only
    once: what runs after the failure commits.

    A batch decided ahead of its transaction is written by a SQL journal's `append_at`,
    which opens and commits a transaction of its own: the next such write fails the
    same way, with nothing written (as after the rollback).

    Which group that was is noted in the `Strike` given (with `commit_in_turn`, which
    counts the groups): a group that opens no transaction (on a SQL journal, one decided
    ahead that records nothing) is not struck, and on the memory journal every group
    opens one, whether it records anything or not."""
    transaction = journal.transaction
    depth = 0
    armed = True
    append_at = getattr(journal, "append_at", None)
    strike = Strike()

    def struck() -> BaseException:
        nonlocal armed
        armed = False
        strike.group = strike.groups - 1
        return error

    def failing_append_at(*args: Any, **kwargs: Any) -> Any:
        if depth == 0 and armed:
            raise struck()
        assert append_at is not None
        return append_at(*args, **kwargs)

    @contextmanager
    def failing(locks: Any = ()) -> Iterator[Any]:
        nonlocal depth, armed
        depth += 1
        try:
            with transaction(locks) as tx:
                yield tx
                if depth == 1 and armed:
                    raise struck()
        finally:
            depth -= 1

    patched = {"transaction": failing}
    if append_at is not None:
        patched["append_at"] = failing_append_at
    # The instance's own, if it has them (another wrapper's).
    before = {name: journal.__dict__.get(name) for name in patched}
    for name, fn in patched.items():
        setattr(journal, name, fn)
    try:
        yield strike
    finally:
        for name, kept in before.items():
            if kept is None:
                delattr(journal, name)
            else:
                setattr(journal, name, kept)


def failure_of(fault: str) -> BaseException:
    """The error a batch's commit fails with, for a commit fault."""
    if fault == "commit-lost":
        return ConnectionProblem("the connection to the database was lost at the commit")
    return CommitFailed("the database refused the commit")
