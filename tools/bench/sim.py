"""`python -m tools.bench.sim`: how many simulated steps per second `tools.sim` runs.

Runs `python -m tools.sim --seed S --steps N` (the in-memory journal) in each mode, each
run in a fresh process, `--runs` times, and prints a Markdown table of the medians:
steps per wall-clock second, and per CPU second of the run's process (on a shared
machine the fairer figure). Beside each mode, the same ops with the simulator's own
checks switched off (after every op and every K ops, the audits, the final `verify`):
what is left is the ledger's own work, and the difference is what the checks cost.

    python -m tools.bench.sim                  # seed 1, 20,000 steps, 2 runs each
    python -m tools.bench.sim --runs 3 --steps 50000
    python -m tools.bench.sim --baseline /tmp/base   # and a checkout of another commit

`--baseline DIR` runs the same rows from another checkout (`git archive COMMIT | tar -x
-C DIR`), each of its runs beside one of this tree's, alternately, so both see the same
load; the last column is this tree's median rate per CPU second over the baseline's.

The target (docs/benchmarks.md, "Simulator"): >= 10,000 steps per second.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

TARGET = 10_000
"""Simulated steps per second the simulator is meant to reach on the memory journal."""

MODES = (("five actors in three processes", False), ("one process", True))


@dataclass(frozen=True)
class Run:
    """One run: steps performed, wall-clock and CPU seconds, events recorded."""

    steps: int
    seconds: float
    cpu_seconds: float
    events: int
    ok: bool


def _without_checks() -> None:
    """Switch the simulator's own checks off in this process (the ops stay the same)."""
    import tools.sim.run  # noqa: F401  (the module, not the function `tools.sim.run`)
    from tools.sim.world import World

    module = sys.modules["tools.sim.run"]

    class _Passed:
        ok = True

    module.full_check = lambda world: []  # type: ignore[attr-defined]
    module.audit = lambda world, op: []  # type: ignore[attr-defined]
    module.verify = lambda journal: _Passed()  # type: ignore[attr-defined]
    World._touched = lambda self, op, proc, answer: []  # type: ignore[method-assign]
    if hasattr(World, "_sound"):  # the same for the service's batches
        World._sound = lambda self, *args: []  # type: ignore[method-assign,attr-defined,unused-ignore]
        World._rolled_back = lambda self, *args: []  # type: ignore[method-assign,attr-defined,unused-ignore]
    World.as_learned = lambda self: []  # type: ignore[method-assign]


def measure(seed: int, steps: int, one_process: bool, checks: bool) -> Run:
    """One run of the simulator in this process."""
    if not checks:
        _without_checks()
    from tools.sim import run

    result = run(seed, steps, one_process=one_process)
    return Run(result.steps, result.seconds, result.cpu_seconds, result.events, result.ok)


def measure_fresh(seed: int, steps: int, one_process: bool, checks: bool) -> Run:
    """One run in a process of its own (nothing warmed up, nothing patched left over)."""
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(measure, seed, steps, one_process, checks).result()


def measure_in(tree: Path, seed: int, steps: int, one_process: bool, checks: bool) -> Run:
    """One run in a fresh process importing the code of another checkout, `tree`."""
    script = ("import json, sys; from tools.bench.sim import measure; "
              f"r = measure({seed}, {steps}, {one_process}, {checks}); "
              "print(json.dumps([r.steps, r.seconds, r.cpu_seconds, r.events, r.ok]))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, cwd=tree,
                         env={**os.environ, "PYTHONPATH": str(tree.resolve())})
    steps_done, seconds, cpu_seconds, events, ok = json.loads(out.stdout.splitlines()[-1])
    return Run(steps_done, seconds, cpu_seconds, events, ok)


def _commit(where: Path | None = None) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True,
                             cwd=where or Path(__file__).resolve().parent)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _rate(steps: int, seconds: float) -> float:
    return steps / max(seconds, 1e-9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.sim", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="the seed every run takes "
                        "(default 1)")
    parser.add_argument("--steps", type=int, default=20_000, help="ops per run (default "
                        "20000)")
    parser.add_argument("--runs", type=int, default=2, help="runs per row (the median is "
                        "reported; default 2)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="a checkout of another commit to run beside this one")
    args = parser.parse_args(argv)
    base: Path | None = args.baseline
    if base is not None and not (base / "tools" / "sim").is_dir():
        parser.error(f"--baseline {base}: not a checkout with tools/sim in it")
    if args.steps < 1 or args.runs < 1:
        parser.error("--steps and --runs must be at least 1")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"`python -m tools.sim --seed {args.seed} --steps {args.steps}` on the memory "
          f"journal, {args.runs} runs per row, each in a fresh process; commit {_commit()}, "
          f"CPython {platform.python_version()}, {os.cpu_count()} cores, load average "
          f"{load:.1f} when it began.", flush=True)
    if base is not None:
        print(f"Baseline: {base} (commit {_commit(base)}), its runs alternating with this "
              "tree's.")
    print()
    extra = " baseline per CPU second (median) | this tree / baseline |" if base else ""
    print("| mode | checks | steps/s (median) | steps per CPU second (median) | per CPU "
          "second, each run | events |" + extra)
    print("|---|---|---|---|---|---|" + ("---|---|" if base else ""))
    best = 0.0
    for name, one_process in MODES:
        for checks in (True, False):
            runs, before = [], []
            for _ in range(args.runs):
                if base is not None:
                    before.append(measure_in(base, args.seed, args.steps, one_process, checks))
                runs.append(measure_fresh(args.seed, args.steps, one_process, checks))
            if not all(r.ok for r in runs + before):
                print(f"a run failed in mode {name!r}: run `python -m tools.sim --seed "
                      f"{args.seed} --steps {args.steps}` for its report", file=sys.stderr)
                return 1
            wall = statistics.median(_rate(r.steps, r.seconds) for r in runs)
            cpu = statistics.median(_rate(r.steps, r.cpu_seconds) for r in runs)
            each = ", ".join(f"{_rate(r.steps, r.cpu_seconds):,.0f}" for r in runs)
            if checks:
                best = max(best, wall, cpu)
            row = (f"| {name} | {'all' if checks else 'off (the ledger alone)'} | {wall:,.0f} "
                   f"| {cpu:,.0f} | {each} | {runs[0].events:,} |")
            if before:
                was = statistics.median(_rate(r.steps, r.cpu_seconds) for r in before)
                row += f" {was:,.0f} | {cpu / was:.2f}x |"
            print(row, flush=True)
    print()
    verdict = "met" if best >= TARGET else "MISSED"
    print(f"Target: >= {TARGET:,} steps/s with every check: {verdict} (best median "
          f"{best:,.0f}).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
