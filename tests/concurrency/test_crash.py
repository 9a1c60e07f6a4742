"""A worker killed with SIGKILL in the middle of a decision, while others keep working.

Nothing it had decided is recorded, the other workers finish, and the account it held
is free again within seconds: PostgreSQL releases a transaction's advisory locks when its
backend exits (it notices the dead client's closed socket at once); SQLite's write lock
is a file lock the kernel drops with the process, and frames in the WAL without a
commit record are ignored by every reader and overwritten by the next writer.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from concurrency_kit import (
    ACCOUNTS,
    check_linearizable,
    hang_after_append_worker,
    hang_in_build_worker,
    open_accounts,
    stress_worker,
)

from eventstore import Journal
from projections import Scheduler
from projections.replay import replay

pytestmark = pytest.mark.slow

SPAWN = mp.get_context("spawn")
OTHERS = 3
OTHER_OPS = 60


def _kill(proc: mp.process.BaseProcess) -> None:
    assert proc.pid is not None and proc.exitcode is None, "the victim ended on its own"
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL


def _hang_in_build(url: str, ready: mp.synchronize.Event) -> mp.process.BaseProcess:
    return SPAWN.Process(target=hang_in_build_worker, args=(url, ACCOUNTS[0], ready))


def _hang_after_append(url: str, ready: mp.synchronize.Event) -> mp.process.BaseProcess:
    return SPAWN.Process(target=hang_after_append_worker, args=(url, ACCOUNTS[0], ready))


@pytest.mark.parametrize("victim", [_hang_in_build, _hang_after_append],
                         ids=["killed-while-deciding", "killed-after-its-append"])
def test_killed_worker_leaves_nothing_and_no_lock(
    database_url: str, tmp_path: Path,
    victim: Callable[[str, mp.synchronize.Event], mp.process.BaseProcess],
) -> None:
    open_accounts(database_url)
    ready = SPAWN.Event()
    proc = victim(database_url, ready)
    proc.start()
    assert ready.wait(60), "the victim never reached the middle of its decision"

    # Other workers start while the victim holds its lock, and decide on every account.
    go = SPAWN.Event()
    done = SPAWN.Barrier(OTHERS + 1)  # the others and this process: views compared after
    outs = [tmp_path / f"other-{w}.json" for w in range(OTHERS)]
    others = [
        SPAWN.Process(target=stress_worker,
                      args=(database_url, w, OTHER_OPS, 7 + w, str(outs[w]), go, done))
        for w in range(OTHERS)
    ]
    for p in others:
        p.start()
    go.set()
    time.sleep(1.0)
    _kill(proc)

    # The account is not left locked: a decision on it goes through within seconds.
    with Journal(database_url, lock_timeout=30) as journal:
        scheduler = Scheduler(journal)
        began = time.monotonic()
        scheduler.submit("after-the-kill", ACCOUNTS[0], 1, 0)
        assert time.monotonic() - began < 5.0, "the killed worker's lock outlived it"
    done.wait(600)

    for p in others:
        p.join(600)
        assert p.exitcode == 0, "a worker did not survive another's death"
    reports = [json.loads(o.read_text()) for o in outs]

    with Journal(database_url) as journal:
        ids = {e.id for e in journal.read(order="position")}
        assert "victim-consume" not in ids
        assert not any(e.payload.get("job") == "victim-job"
                       for e in journal.read(order="position"))
        assert [e.position for e in journal.read(order="position")] == list(
            range(1, journal.head() + 1))
        assert journal.verify() is None
        assert check_linearizable(journal, [r["told"] for r in reports]) == []
        digest = replay(journal).digest
        for r in reports:
            assert set(r["digests"]) == {digest}, f"worker {r['worker']} sees otherwise"
