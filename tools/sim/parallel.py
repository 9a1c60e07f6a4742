"""Seeds run in several processes at once: `python -m tools.sim --seeds N --jobs J`.

Why: a run is one thread of Python, so a hunt over many seeds used one core however many
the machine has; J processes use J. A seed's run depends on its seed, its step count and
its options, never on the process that runs it or on what that process ran before, so a
failure found here reproduces with the same `--seed S --steps N` and no `--jobs`.

The processes are forked from the command line's process before any run starts. Seeds
are handed out in order, one at a time, to whichever process is free. A process prints
nothing itself: it sends back what its run would have printed (the seed's line, and a
failure's report with its shrunk reproduction), and the command line prints that as each
seed ends.

Stopping: only the command line's process acts on SIGINT and SIGTERM (its processes
ignore SIGINT, so a Ctrl-C at a terminal, which reaches all of them, is taken once). It
sends each process SIGTERM, which stops its run between two ops and removes its worlds,
as a signal stops a run without `--jobs`; a second signal sends a second SIGTERM, which
stops them at once. A process that ends without a word (killed, out of memory) fails the
seed it was running, and says so; one told to end (no seed left) that has not ended
`JOIN_SECONDS` later is killed.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from tools.sim.run import Stopped, request_stop, stop_at_once, stop_requested

POLL_SECONDS = 0.2
"""How often the command line looks at its processes while no seed ends."""

JOIN_SECONDS = 60.0
"""How long a process stopped between ops may take to remove its worlds and end, and one
told to end (no seed left) may take to end; then it is killed."""


@dataclass(frozen=True)
class SeedDone:
    """One seed's run, as its process sends it back."""

    seed: int
    steps: int
    seconds: float
    cpu_seconds: float
    ok: bool
    text: str  # what the run printed: the seed's line, and a failure's report


def _stopping(signum: int, frame: object) -> None:
    """A job's SIGTERM: the first stops its run before the next op, a second at once. A
    job gets a signal sent to the process group twice, the group's and the command line's
    forward of it: the second is then the same stop (`stop_at_once`)."""
    if stop_requested():
        if stop_at_once():
            raise KeyboardInterrupt
        return
    request_stop()


def _work(conn: Connection, one_seed: Callable[[int], SeedDone],
          others: Sequence[Connection]) -> None:
    """A job's loop: run each seed the command line sends, answer, until it sends None
    (or is gone: then the job ends once its seed does). `others`: the command line's
    ends of the pipes, its own and those of the jobs forked before it, which the fork
    copied here and which must close, so that each job sees the command line go."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the command line's process forwards it
    signal.signal(signal.SIGTERM, _stopping)
    request_stop(False)
    for other in others:
        other.close()
    try:
        while (seed := conn.recv()) is not None:
            if stop_requested():
                conn.send(("stopped", seed))
                return
            try:
                done = one_seed(seed)
            except Stopped:
                conn.send(("stopped", seed))
                return
            except Exception:  # the simulator's own fault: said, and the seed failed
                conn.send(("raised", seed, traceback.format_exc()))
                continue
            conn.send(("done", done))
    except KeyboardInterrupt:
        return  # stopped at once: the command line says so
    except (EOFError, BrokenPipeError):
        return  # the command line is gone: nobody is left to hand out or hear a seed


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit status {exitcode}"


@dataclass
class _Job:
    """A job's process, its end of the pipe, and the seed it was sent (None: idle)."""

    process: BaseProcess
    conn: Connection
    seed: int | None = None
    ended: bool = False
    told_to_end: float | None = None  # when it was sent None (time.monotonic())


def run_seeds(seeds: Sequence[int], jobs: int, one_seed: Callable[[int], SeedDone], *,
              stop_at_failure: bool) -> Iterator[SeedDone]:
    """`one_seed(seed)` for each of `seeds` in `jobs` forked processes; each seed as it
    ends (in the order they end). `stop_at_failure`: the first failing seed stops the
    others between two ops; the seeds not run are not given.

    Seeds are sent to each job by this process, one at a time, so it always knows which
    seed a job holds: a job that ends without answering fails that seed.

    Raises `Stopped` once every job has ended when a signal stopped the run
    (`request_stop` in this process), and `ValueError` for fewer than one job."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    context = mp.get_context("fork")  # a planted bug or a test's patch is inherited
    waiting = list(reversed(seeds))  # popped from the end: in order
    running: list[_Job] = []
    for n in range(min(jobs, len(seeds))):
        mine, theirs = context.Pipe()
        process = context.Process(target=_work,
                                  args=(theirs, one_seed, [*(j.conn for j in running), mine]),
                                  name=f"tools.sim job {n + 1}")
        process.start()
        theirs.close()
        running.append(_Job(process, mine))
    signals = 0  # SIGTERMs sent to the jobs
    failed = False

    def forward() -> None:
        nonlocal signals
        signals += 1
        for job in running:
            if not job.ended and job.process.pid is not None:
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    os.kill(job.process.pid, signal.SIGTERM)

    def send_next(job: _Job) -> None:
        # Not once a signal came, also before it is forwarded: a signal to the process
        # group reaches the jobs as well, and one that stopped may be sent a seed it
        # will never run (its end then failed the seed).
        stopping = signals > 0 or stop_requested()
        job.seed = waiting.pop() if waiting and not stopping else None
        if job.seed is None:
            job.told_to_end = time.monotonic()
        with contextlib.suppress(OSError):  # it ended: its sentinel says so
            job.conn.send(job.seed)

    def kill_lingering() -> None:
        # A job holds no seed once told to end, so nothing is lost by killing one that
        # has not ended JOIN_SECONDS later: a forked copy of a process whose other
        # threads held a lock at the fork can hang on its way out, and the run would
        # wait for it for ever.
        for job in running:
            if (not job.ended and job.told_to_end is not None
                    and time.monotonic() - job.told_to_end > JOIN_SECONDS):
                with contextlib.suppress(ProcessLookupError):
                    job.process.kill()

    def judged(done: SeedDone) -> SeedDone:
        nonlocal failed
        if not done.ok:
            failed = True
            if stop_at_failure and signals == 0:
                forward()  # before any job is sent another seed
        return done

    try:
        for job in running:
            send_next(job)
        while not all(job.ended for job in running):
            if stop_requested() and signals == 0:
                forward()
            kill_lingering()
            live = [job for job in running if not job.ended]
            ready = set(wait([*(j.conn for j in live), *(j.process.sentinel for j in live)],
                             timeout=POLL_SECONDS))
            for job in live:
                if job.conn in ready or job.process.sentinel in ready:
                    for message in _messages(job):
                        done = _outcome(job, message)
                        if done is not None:
                            yield judged(done)
                    if job.process.sentinel in ready:
                        job.process.join()
                        job.ended = True
                        if job.seed is not None:  # sent, never answered
                            seed, job.seed = job.seed, None
                            yield judged(SeedDone(
                                seed, 0, 0.0, 0.0, False,
                                f"seed {seed}: FAILED: its process ended "
                                f"({_how_it_ended(job.process.exitcode)}) in the middle of "
                                "the run\n"))
                    elif job.seed is None:
                        send_next(job)  # the next seed, or None once stopping: it ends
    except BaseException:
        # Interrupted here (a second signal, this process's own fault, the caller gone):
        # the first SIGTERM stops the jobs between ops; after a second signal, a second
        # SIGTERM stops them at once.
        while signals < (2 if stop_requested() else 1):
            forward()
        raise
    finally:
        deadline = time.monotonic() + JOIN_SECONDS
        for job in running:
            job.process.join(max(0.0, deadline - time.monotonic()))
            if job.process.exitcode is None:
                job.process.kill()
                job.process.join()
            job.conn.close()
    if stop_requested():
        raise Stopped("stopped before the next op")


def _messages(job: _Job) -> Iterator[tuple[Any, ...]]:
    """What a job has sent and this process not yet read (nothing more once it ended)."""
    while True:
        try:
            if not job.conn.poll():
                return
            yield job.conn.recv()
        except (EOFError, OSError):
            return  # it ended; a message cut short by its death is no answer


def _outcome(job: _Job, message: tuple[Any, ...]) -> SeedDone | None:
    """A job's answer for its seed, which leaves it idle: what to say of the seed (None:
    stopped between ops, its worlds removed, nothing to say)."""
    job.seed = None
    if message[0] == "done":
        done: SeedDone = message[1]
        return done
    if message[0] == "raised":
        return SeedDone(message[1], 0, 0.0, 0.0, False,
                        f"seed {message[1]}: FAILED: the simulator raised\n{message[2]}")
    return None
