"""Questions about the past: `GPUCreditTracker.get_balance` at random earlier times on a
tracker in memory that took N calls in time order, in CPU time per question, this tree
beside another (a worktree of an earlier commit) in alternating fresh processes; medians
of the rounds:

    python -m tools.bench.past --other /tmp/base --calls 100000 --questions 2000

Each process prints a hash of its answers, which must be the same on both trees.
"""

from __future__ import annotations

from tools.bench.alternating import arguments, compare

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


def main(argv: list[str] | None = None) -> None:
    args = arguments("tools.bench.past", argv, calls=100_000, questions=2_000)
    compare(_CASE, (args.calls, args.questions), other=args.other, rounds=args.rounds,
            per_unit=args.questions / 1000, unit="CPU ms per question",
            title=f"get_balance at {args.questions:,} random earlier times after "
                  f"{args.calls:,} calls")


if __name__ == "__main__":
    main()
