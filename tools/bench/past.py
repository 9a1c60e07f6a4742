"""Questions about the past: `GPUCreditTracker.get_balance` at random earlier times on a
tracker in memory that took N calls in time order, in CPU time per question, this tree
beside another (a worktree of an earlier commit) in alternating fresh processes; medians
of the rounds:

    python -m tools.bench.past --other /tmp/base --calls 100000 --questions 2000

Each process prints a hash of its answers, which must be the same on both trees.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_CASE = """
import hashlib, json, random, sys, time
from projections import GPUCreditTracker
from tools.bench.workload import BALANCE, GRANT, tracker_calls
calls, questions = int(sys.argv[1]), int(sys.argv[2])
tracker = GPUCreditTracker()
last = 0
for kind, amount, ts, expiry in tracker_calls(calls):
    if kind == GRANT:
        tracker.grant(amount, ts, expiry)
    elif kind != BALANCE:
        tracker.consume(amount, ts)
    last = ts
rng = random.Random(7)
times = [rng.randint(0, last) for _ in range(questions)]
begin = time.process_time()
answers = [tracker.get_balance(t) for t in times]
cpu = time.process_time() - begin
found = hashlib.sha256(repr(answers).encode()).hexdigest()[:16]
print(json.dumps({"cpu": cpu, "found": found}))
"""


def _run(tree: Path, calls: int, questions: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _CASE, str(calls), str(questions)],
                         cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    answer: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return answer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.past")
    parser.add_argument("--other", help="the tree to compare with (none: this tree alone)")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--questions", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parents[2]
    trees = {"this tree": here}
    if args.other:
        trees["other"] = Path(args.other).resolve()
    per: dict[str, list[float]] = {name: [] for name in trees}
    found: dict[str, set[object]] = {name: set() for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            answer = _run(tree, args.calls, args.questions)
            per[name].append(float(str(answer["cpu"])) * 1000 / args.questions)
            found[name].add(answer["found"])
    print(f"get_balance at {args.questions:,} random earlier times after {args.calls:,} "
          f"calls, CPU ms per question (median of {args.rounds}; each round):")
    for name in trees:
        each = ", ".join(f"{v:.2f}" for v in per[name])
        print(f"  {name}: {statistics.median(per[name]):.2f} ({each}); answers "
              f"{', '.join(sorted(str(f) for f in found[name]))}")
    if args.other:
        ratio = statistics.median(per["other"]) / statistics.median(per["this tree"])
        print(f"  other / this tree: {ratio:.1f}x")


if __name__ == "__main__":
    main()
