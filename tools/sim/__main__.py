"""`python -m tools.sim`: run seeded simulations, or replay a reproduction file.

Exit status 0 when every run passed, 1 when one failed (its reproduction is written),
2 on bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tools.sim.parallel import SeedDone, run_seeds
from tools.sim.run import (
    EPOCH,
    Failure,
    RunResult,
    Stopped,
    replay_file,
    reproduction_lines,
    request_stop,
    run,
    run_script,
    same_stop_left,
    shrink,
    stop_at_once,
    stop_requested,
    write_ops,
    write_reproduction,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.sim",
        description="Seeded simulation of workers, reporters, finance, importers and "
                    "auditors with faults; checks invariants after every step. A seed "
                    "and a step count reproduce a run exactly.",
        epilog="A failure prints its seed, step, problems and last events, the command "
               "that runs it again, and writes the fewest ops that still fail to --out "
               "with the command that replays them. Exit status: 0 every run passed, 1 "
               "a run failed, 2 bad input. More: docs/simulation.md.")
    parser.add_argument("--seed", type=int, help="first seed, 0 or more "
                        "(default 1)")
    parser.add_argument("--seeds", type=int,
                        help="how many seeds from --seed (default 1)")
    parser.add_argument("--steps", type=int,
                        help="ops per run (default 10000)")
    parser.add_argument("--check-every", type=int, metavar="K",
                        help=f"whole-journal checks every K ops (default {CHECK_EVERY})")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="folder for reproductions of failures (default sim-failures)")
    parser.add_argument("--shrink-seconds", type=float, metavar="S",
                        help="seconds allowed to shrink a failure (default 60; 0: "
                             "write every op up to it)")
    parser.add_argument("--epoch", type=int, metavar="E",
                        help=f"start a new world every E ops (default {EPOCH})")
    parser.add_argument("--one-process", action="store_true", default=None,
                        help="every actor in one process on one projection (faster; no "
                             "clock skew between workers)")
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--sqlite", action="store_true",
                       help="each world's journal in a SQLite file, with writer processes "
                            "killed (SIGKILL) in the middle of ops (slower: for bounded runs)")
    store.add_argument("--postgres", metavar="URL",
                       help="each world's journal in a schema of its own in this PostgreSQL "
                            "database (postgresql+psycopg://...), with writer processes "
                            "killed as with --sqlite; a failing world's schema stays")
    parser.add_argument("--jobs", type=int, metavar="J",
                        help="run J seeds at once, each in a process of its own (default "
                             "1); each seed's run is the one it makes alone")
    parser.add_argument("--keep-going", action="store_true", default=None,
                        help="after a failing seed, write its reproduction and go on with "
                             "the next (a hunt over many seeds); exit 1 if any failed")
    parser.add_argument("--replay", type=Path, metavar="FILE",
                        help="perform a reproduction file line by line instead (events, "
                             "or the ops a failure that needs its faults wrote; with --sqlite "
                             "or --postgres on that database; no option of a run)")
    return parser


CHECK_EVERY = 1000
"""Ops between whole-journal checks unless `--check-every` says otherwise."""

JOBS_PER_CORE = 4
"""The most jobs a run takes per core of the machine (a job waiting on its writer
processes or the disk leaves its core to another)."""

RUN_DEFAULTS: dict[str, Any] = {
    "seed": 1, "seeds": 1, "steps": 10_000, "check_every": CHECK_EVERY,
    "out": Path("sim-failures"), "shrink_seconds": 60.0, "epoch": EPOCH,
    "one_process": False, "jobs": 1, "keep_going": False}
"""The options of a run (none of which a replay takes), and their defaults: the parser
leaves them None, so that one given beside `--replay` is refused, not silently unused."""


def _given_for_a_run(args: argparse.Namespace) -> list[str]:
    """The options of a run given on the command line, as they were given."""
    given = []
    for name in RUN_DEFAULTS:
        value = getattr(args, name)
        option = f"--{name.replace('_', '-')}"
        if value is True:
            given.append(option)
        elif value is not None:
            given.append(f"{option} {value}")
    return given


def _say(text: str) -> None:
    print(text, flush=True)


SHOWN = 10
"""Problems a failure's report shows (one often breaks many)."""


def _say_problems(problems: list[str]) -> None:
    for problem in problems[:SHOWN]:
        _say(f"  {problem}")
    if len(problems) > SHOWN:
        _say(f"  ... and {len(problems) - SHOWN} more")


def _store(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """Where the journals go, as keyword arguments of `run` and its kin, and as the
    options that say so on a command line."""
    if args.postgres is not None:
        return {"postgres": args.postgres}, f" --postgres {shlex.quote(args.postgres)}"
    if args.sqlite:
        return {"sqlite": True}, " --sqlite"
    return {}, ""


def _bad_number(args: argparse.Namespace) -> str | None:
    """What is wrong with the numbers given, the first thing, or None."""
    if args.seed < 0:
        # random.Random seeds with the absolute value: -1 would run seed 1 again.
        return (f"--seed must be at least 0, got {args.seed} (a negative seed runs the "
                f"same ops as seed {-args.seed})")
    if args.steps < 1:
        return f"--steps must be at least 1, got {args.steps} (no op, nothing checked)"
    for option in ("seeds", "check_every", "epoch", "jobs"):
        value = getattr(args, option)
        if value < 1:
            return f"--{option.replace('_', '-')} must be at least 1, got {value}"
    cores = os.cpu_count() or 1
    if args.jobs > JOBS_PER_CORE * cores:
        # Each job is a forked process: a slip (--jobs for --seeds) forked thousands.
        return (f"--jobs must be at most {JOBS_PER_CORE * cores} ({JOBS_PER_CORE} per core, "
                f"{cores} here), got {args.jobs}: more only wait for each other")
    if not (math.isfinite(args.shrink_seconds) and args.shrink_seconds >= 0):
        return (f"--shrink-seconds must be a number of seconds, 0 or more, got "
                f"{args.shrink_seconds}")
    return None


def _out_problem(out: Path) -> str | None:
    """Why a failure's reproduction could not be written in the folder `out`, or None.
    Asked before the run: found after it, the run and its shrink were for nothing. The
    folder itself is made only when a failure is written."""
    if out.exists() and not out.is_dir():
        return f"--out names a folder for reproductions, and {str(out)!r} is not one"
    existing = out.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return f"--out {str(out)!r}: cannot write in {str(existing)!r}"
    return None


def _postgres_problem(url: str) -> str | None:
    """Why `--postgres URL` cannot hold the run's journals, or None."""
    from tools.bench.storage import pg_version

    if not url.startswith("postgresql"):
        return (f"--postgres takes a PostgreSQL URL (postgresql+psycopg://USER@HOST:PORT/"
                f"DATABASE), got {url!r}")
    if "options=" in url:
        return (f"--postgres takes the database's URL without options (each world sets "
                f"its own search_path), got {url!r}")
    if pg_version(url) is None:
        return f"PostgreSQL at {url!r} does not answer (waited 5 s)"
    return None


def _report_failure(result: RunResult, failure: Failure, out: Path,
                    shrink_seconds: float, epoch: int, store: dict[str, Any],
                    flag: str, asked: int | None = None,
                    check_every: int = CHECK_EVERY) -> None:
    """Say where the run failed and how to run it again, shrink its ops, write them and
    say how to replay them. `asked`: the steps the run was asked for; `check_every`: its
    whole-journal checks' interval, which decides the step a failure is found at."""
    _say(f"FAILED: seed {result.seed}, step {failure.step}"
         + (f" of {asked}" if asked is not None else ""))
    _say_problems(failure.problems)
    _say("last events (arrival order):")
    for event in failure.last_events:
        _say(f"  {json.dumps(event, sort_keys=True)}")
    _say(f"reproduce the run: python -m tools.sim --seed {result.seed} --steps {failure.step}"
         + (f" --epoch {epoch}" if epoch != EPOCH else "")
         + (f" --check-every {check_every}" if check_every != CHECK_EVERY else "")
         + (" --one-process" if any(op["actor"] == "all" for op in failure.ops) else "")
         + flag)
    if failure.database is not None:
        _say(f"the failing world's journal: {failure.database}")
    if shrink_seconds > 0:
        _say(f"shrinking its {len(failure.ops)} ops (at most {shrink_seconds:g} s; a signal "
             "writes what it has so far)")
    began = time.monotonic()
    smallest = shrink(failure.ops, budget_seconds=shrink_seconds, **store)
    if stop_requested():
        # Stopped while shrinking (a signal; with --jobs, another seed's failure): the
        # ops so far still fail, and this failure is said and written all the same.
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"seed-{result.seed}-step-{failure.step}.jsonl"
        ops_path = path.with_suffix(".ops.jsonl")
        write_reproduction(path, reproduction_lines(smallest))
        write_ops(ops_path, smallest)
        _say(f"stopped while shrinking, at {len(smallest)} of {len(failure.ops)} ops: wrote "
             f"{path}, and the ops with their faults to {ops_path} (neither replayed yet)")
        _say(f"replay it: python -m tools.sim --replay {path}{flag}  (or {ops_path})")
        return
    # The shrink ends when nothing more can go, or when its time is up: then what is
    # written depends on the machine's speed, and a longer budget may take out more.
    cut_short = time.monotonic() - began >= shrink_seconds and len(smallest) > 1
    again = run_script(smallest, **store)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"seed-{result.seed}-step-{failure.step}.jsonl"
    write_reproduction(path, reproduction_lines(smallest))
    _say(f"shrunk to {len(smallest)} of {len(failure.ops)} ops"
         + ("" if not cut_short else " (not shrunk: --shrink-seconds 0)"
            if shrink_seconds == 0 else f" (stopped by --shrink-seconds {shrink_seconds:g}: "
            "a longer one may take out more)")
         + (f": {again.problems[0]}" if again is not None else " (no longer failing!)"))
    replayed = replay_file(path, **store)
    _say(f"wrote {path} ({sum(1 for _ in path.open())} lines)")
    if replayed is not None or again is None:
        _say(f"replay it: python -m tools.sim --replay {path}{flag}"
             + ("" if replayed is not None else "  (it no longer fails: replay the seed)"))
        return
    # The events alone pass: the failure needs the run's faults. The ops, with theirs.
    ops_path = out / f"seed-{result.seed}-step-{failure.step}.ops.jsonl"
    write_ops(ops_path, smallest)
    _say(f"the events alone pass (the failure needs the run's faults); wrote the ops with "
         f"their faults to {ops_path} ({len(smallest)} lines)")
    _say(f"replay it: python -m tools.sim --replay {ops_path}{flag}"
         + ("" if replay_file(ops_path, **store) is not None else
            "  (it no longer fails: replay the seed)"))


def _rate(steps: int, seconds: float, cpu: float) -> str:
    return (f"{steps / max(seconds, 1e-9):,.0f} steps/s, "
            f"{steps / max(cpu, 1e-9):,.0f} per CPU second")


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _stopping_between_ops(received: list[int]) -> Iterator[None]:
    """SIGTERM (`kill`) or Ctrl-C stops the run before its next op, so that no
    transaction, writer process or batch is cut in half and the run removes its worlds'
    files or schemas as it ends (`received` gets the signal). A second one stops at once
    (KeyboardInterrupt), which may leave them; one within `SAME_STOP_SECONDS` of the first
    is the first delivered twice (`stop_at_once`)."""
    def stopping(signum: int, frame: object) -> None:
        if received:
            if stop_at_once():
                raise KeyboardInterrupt
            return  # the first signal again (to the group, and forwarded by make)
        received.append(signum)
        request_stop()
        print(f"tools.sim: {signal.Signals(signum).name}: stopping before the next op "
              "(once more to stop at once)", file=sys.stderr, flush=True)

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set a handler
        return
    request_stop(False)
    before = {signum: signal.signal(signum, stopping) for signum in _SIGNALS}
    try:
        yield
    finally:
        if received:
            # A copy of the signal may still be on its way (make forwards the group's to
            # its child, late on a busy machine): it is the same stop, and must find this
            # handler, not the default one that would kill the process as it ends.
            time.sleep(same_stop_left())
        for signum, handler in before.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        request_stop(False)


def main(argv: list[str] | None = None) -> int:
    received: list[int] = []
    with _stopping_between_ops(received):
        try:
            return _main(argv)
        except Stopped as stopped:
            print(f"tools.sim: {stopped}; the run's worlds were removed", file=sys.stderr)
            return 128 + received[0] if received else 1


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    given = _given_for_a_run(args)
    if args.replay is not None and given:
        print(f"tools.sim: error: {' '.join(given)}: "
              f"{'an option' if len(given) == 1 else 'options'} of a run of seeds, which "
              "--replay FILE does not take (it performs the file alone)", file=sys.stderr)
        return 2
    for name, default in RUN_DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
    store, flag = _store(args)
    problem = _bad_number(args)
    if problem is None and args.replay is None:
        problem = _out_problem(args.out)
    if problem is None and args.postgres is not None:
        problem = _postgres_problem(args.postgres)
    if problem is not None:
        print(f"tools.sim: error: {problem}", file=sys.stderr)
        return 2
    if args.replay is not None:
        try:
            failure = replay_file(args.replay, **store)
        except OSError as exc:
            print(f"tools.sim: error: cannot read {args.replay}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 2
        except ValueError as exc:  # an edited or cut file (UnicodeDecodeError included)
            print(f"tools.sim: error: {args.replay}: {exc}", file=sys.stderr)
            return 2
        if failure is None:
            _say(f"{args.replay}: every line performed, every check passed")
            return 0
        _say(f"FAILED at line {failure.step} of {args.replay}:")
        _say_problems(failure.problems)
        return 1
    seeds = range(args.seed, args.seed + args.seeds)

    def one_seed(seed: int, live: bool = False) -> SeedDone:
        """A seed's run, and what it printed (its line; a failure's report), or with
        `live` printed it as it went (a shrink takes a while)."""
        result = run(seed, args.steps, check_every=args.check_every,
                     one_process=args.one_process, epoch=args.epoch, **store)
        faults = ", ".join(f"{n} {k}" for k, n in sorted(result.faults.items()))
        said = io.StringIO()
        with contextlib.nullcontext() if live else contextlib.redirect_stdout(said):
            _say(f"seed {seed}: {result.steps} steps, {result.events} events in "
                 f"{result.seconds:.2f} s ("
                 f"{_rate(result.steps, result.seconds, result.cpu_seconds)}); faults: "
                 f"{faults or 'none'}; {'ok' if result.ok else 'FAILED'}")
            if result.failure is not None:
                _report_failure(result, result.failure, args.out, args.shrink_seconds,
                                args.epoch, store, flag, asked=args.steps,
                                check_every=args.check_every)
        return SeedDone(seed, result.steps, result.seconds, result.cpu_seconds, result.ok,
                        said.getvalue())

    began = time.perf_counter()
    done: Iterable[SeedDone]
    jobs = min(args.jobs, args.seeds)
    if jobs > 1:
        done = run_seeds(seeds, jobs, one_seed, stop_at_failure=not args.keep_going)
    else:
        done = (one_seed(seed, live=True) for seed in seeds)
    total_steps = 0
    total_cpu = 0.0
    failed: list[int] = []
    for seed_done in done:
        sys.stdout.write(seed_done.text)
        sys.stdout.flush()
        total_steps += seed_done.steps
        total_cpu += seed_done.cpu_seconds
        if not seed_done.ok:
            failed.append(seed_done.seed)
            if not args.keep_going and jobs == 1:
                return 1  # (with jobs, the others stop between ops; what ends is said)
    wall = time.perf_counter() - began
    where = f" in {jobs} processes" if jobs > 1 else ""
    if failed:
        if not args.keep_going:
            return 1
        _say(f"{len(failed)} of {args.seeds} seeds failed: "
             f"{', '.join(str(seed) for seed in sorted(failed))} ({total_steps} steps in "
             f"{wall:.2f} s{where})")
        return 1
    if args.seeds > 1:
        _say(f"all {args.seeds} seeds passed: {total_steps} steps in {wall:.2f} s{where} "
             f"({_rate(total_steps, wall, total_cpu)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
