"""Usage reports arriving late into a long one-account history: `GPUCreditTracker.consume`
at random earlier times on a tracker in memory that took N calls in time order, in CPU
time per late call, this tree beside another (a worktree of an earlier commit) in
alternating fresh processes; medians of the rounds:

    python -m tools.bench.late_tracker --other /tmp/base --calls 100000 --late 20

Each process prints a hash of its answers (the debts the late calls return, every revision
with the session's random id prefix taken out, and two balances after), which must be the
same on both trees. Not the digest: it holds the event ids, random per session.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_CASE = """
import hashlib, json, random, re, sys, time
from projections import GPUCreditTracker
calls, late = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(1)
tracker = GPUCreditTracker()
ts = 0
for _ in range(calls):
    ts += rng.randint(0, 2)
    if rng.random() < 0.5:
        tracker.grant(rng.randint(1, 100), ts, ts + rng.randint(1, 500))
    else:
        tracker.consume(rng.randint(1, 100), ts)
times = [rng.randint(0, ts) for _ in range(late)]
begin = time.process_time()
debts = [tracker.consume(1, t) for t in times]
cpu = time.process_time() - begin
balances = [tracker.get_balance(t) for t in (ts // 2, ts)]
seen = re.sub(r"[0-9a-f]{16}-", "", repr((debts, tracker.revisions, balances)))
found = hashlib.sha256(seen.encode()).hexdigest()[:16]
print(json.dumps({"cpu": cpu, "found": found, "revisions": len(tracker.revisions)}))
"""


def _run(tree: Path, calls: int, late: int) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _CASE, str(calls), str(late)],
                         cwd=tree, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    answer: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return answer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.late_tracker")
    parser.add_argument("--other", help="the tree to compare with (none: this tree alone)")
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--late", type=int, default=20)
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
            answer = _run(tree, args.calls, args.late)
            per[name].append(float(str(answer["cpu"])) / args.late)
            found[name].add(f"{answer['found']} ({answer['revisions']:,} revisions)")
    print(f"consume at {args.late:,} random earlier times after {args.calls:,} calls, CPU s "
          f"per late call (median of {args.rounds}; each round):")
    for name in trees:
        each = ", ".join(f"{v:.3f}" for v in per[name])
        print(f"  {name}: {statistics.median(per[name]):.3f} ({each}); answers "
              f"{', '.join(sorted(str(f) for f in found[name]))}")
    if args.other:
        ratio = statistics.median(per["other"]) / statistics.median(per["this tree"])
        print(f"  other / this tree: {ratio:.1f}x")


if __name__ == "__main__":
    main()
