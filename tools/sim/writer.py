"""A writer in a process of its own, to be killed: `python -m tools.sim.writer URL`.

The simulator's killed-writer fault (`tools.sim.killed`) starts this process on the
world's journal (SQLite or PostgreSQL) and sends it one op as a JSON line on stdin:
``{"op": {...}, "skew": S}`` (an op as in `tools.sim.world`, with its `stop`). The writer
performs the op through the same facades as the simulator's own processes, on its own
connection and its own projection, as far as the stop:

- ``deciding``: inside a write transaction (on SQLite, `BEGIN IMMEDIATE`: the file's one
  write lock; on PostgreSQL, the transaction's advisory locks), before anything is
  appended;
- ``appended``: the op's events appended inside that transaction, not committed;
- ``committed``: the op committed (its own transaction), its answer not sent.

There it prints ``stopped`` and waits for the SIGKILL (or for stdin to close, should the
simulator die first). A command the ledger refuses appends nothing and stops all the
same: the kill then finds nothing to leave behind.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any

from eventstore import Journal
from projections import LedgerError
from tools.sim.world import Op, World

WRITER_LOCK = "sim:killed-writer"
"""The lock key of the writer's own transaction (SQLite takes its one write lock,
PostgreSQL this key's advisory lock)."""


def _attempt(call: Callable[[], Any]) -> None:
    # Refused: nothing appended, and the kill finds nothing either way.
    with contextlib.suppress(LedgerError):
        call()


def _stop_and_wait() -> None:
    print("stopped", flush=True)
    sys.stdin.readline()  # returns only when the simulator is gone (or sends more)


def perform_until_stop(world: World, op: Op, skew: int) -> None:
    """Perform `op` on `world` as far as `op["stop"]`, then wait there to be killed."""
    proc = world.process(op["actor"])
    proc.skew = skew
    if op["kind"] != "import":
        proc.clock_value = op["line"]["time"] + skew
    call = world.command(op, proc)
    stop = op["stop"]
    if stop == "committed":
        _attempt(call)
        _stop_and_wait()
        return
    # The facades' decisions join a transaction this thread already holds: what they
    # append stays uncommitted until the block ends, which it never does.
    with world.journal.transaction([WRITER_LOCK]):
        if stop == "appended":
            _attempt(call)
        _stop_and_wait()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tools.sim.writer URL  (then one op as a JSON line on stdin)",
              file=sys.stderr)
        return 2
    world = World(Journal(args[0], lock_timeout=60))
    command = json.loads(sys.stdin.readline())
    perform_until_stop(world, command["op"], int(command.get("skew", 0)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
