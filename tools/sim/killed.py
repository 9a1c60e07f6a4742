"""A writer killed with SIGKILL in the middle of an op: a real process, on SQLite or
PostgreSQL.

`kill_a_writer(world, op, proc)` starts `python -m tools.sim.writer URL` on the world's
journal, hands it the op and waits until the writer says it reached the op's `stop`
(`tools.sim.writer`: deciding under the write lock, its events appended but not
committed, or committed with the answer not yet sent), kills it with SIGKILL and looks
at what it left:

- before its commit: nothing of the op is visible (no event, no position taken), and the
  write lock died with the process (the simulator's next write takes it);
- after its commit: exactly the op's events, each once, at the next positions;
- either way every event recorded before is still there as it was, and the whole hash
  chain verifies.

The op is then performed again in the simulator's own process under the same ids, as a
caller whose writer died would retry: it records the op once (a commit the writer made
is found, not repeated, and answered as recorded).

Everything up to the kill is decided by the op, so a seed reproduces which stop each
writer reached and what it had written; only the wall-clock time the writer takes varies.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

from eventstore import RecordedEvent

if TYPE_CHECKING:
    from tools.sim.world import Op, Process, World

STOPS = ("deciding", "appended", "committed")
"""Where a killed writer dies: under the write lock with nothing appended, with its
events appended but not committed, or just after its commit."""

WAIT_SECONDS = 300.0
"""How long a writer may take to start and reach its stop (a loaded CI machine)."""


def kill_a_writer(world: World, op: Op, proc: Process) -> tuple[list[str], list[RecordedEvent]]:
    """Run `op` in a writer process killed at `op["stop"]`; (problems, events it left)."""
    journal = world.journal
    if journal.url is None:
        raise ValueError("a killed writer needs a journal other processes can open (SQLite, "
                         "PostgreSQL)")
    stop = op["stop"]
    what = f"{_name(op)}: a writer killed {_WHEN[stop]}"
    head = journal.head()
    # In a session of its own: a signal to the simulator's process group (a Ctrl-C, a
    # `timeout`, a CI job cancelled) would kill it short of its stop, a failure of the
    # op the seed never made. The simulator stops between ops; the writer dies by its
    # SIGKILL, or ends once its stdin closes should the simulator die first.
    child = subprocess.Popen(
        [sys.executable, "-m", "tools.sim.writer", journal.url],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    assert child.stdin is not None and child.stdout is not None
    said = ""
    try:
        child.stdin.write(json.dumps({"op": op, "skew": proc.skew}) + "\n")
        child.stdin.flush()
        ready, _, _ = select.select([child.stdout], [], [], WAIT_SECONDS)
        said = child.stdout.readline().strip() if ready else ""
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        _, err = child.communicate(timeout=60)
    problems: list[str] = []
    if said != "stopped":
        tail = " | ".join(err.strip().splitlines()[-3:]) or f"exit status {child.returncode}"
        problems.append(f"{what}: the writer never reached its stop ({tail})")
    elif child.returncode != -signal.SIGKILL:
        problems.append(f"{what}: the writer ended with status {child.returncode}, not by "
                        "the kill")
    left = world.learn()[head:]
    if stop != "committed" and left:
        problems.append(f"{what}: {len(left)} of its event(s) are visible "
                        f"({', '.join(rec.id for rec in left[:5])})")
    ids = [rec.id for rec in left]
    if len(set(ids)) != len(ids) or any(i in world.recorded for i in ids):
        problems.append(f"{what}: it recorded again events recorded before: {ids[:5]}")
    bad = journal.verify()
    if bad is not None:
        problems.append(f"{what}: the journal's hash chain is broken at position {bad}")
    problems += [f"{what}: {p}" for p in world.as_learned()]
    return problems, left


_WHEN = {
    "deciding": "while deciding (holding the write lock)",
    "appended": "with its events appended, before its commit",
    "committed": "after its commit, before answering",
}


def _name(op: Op) -> str:
    if op["kind"] == "import":
        return str(op["file"])
    return str(op["line"]["id"])
