"""Usage reports arriving late into a long one-account history: `GPUCreditTracker.consume`
at random earlier times on a tracker in memory that took N calls in time order, in CPU
time per late call, this tree beside another (a worktree of an earlier commit) in
alternating fresh processes; medians of the rounds:

    python -m tools.bench.late_tracker --other /tmp/base --calls 100000 --late 20

Each process prints a hash of its answers (the debts the late calls return, every revision
with the random event ids the tracker made up taken out, and two balances after), which
must be the same on both trees. Not the digest: it holds those ids.
"""

from __future__ import annotations

from tools.bench.alternating import arguments, compare

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
# Made-up ids: 32 hex digits, or (in trees before them) a session prefix and a counter.
seen = re.sub(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])|[0-9a-f]{16}-[0-9]+", "ID",
              repr((debts, tracker.revisions, balances)))
found = hashlib.sha256(seen.encode()).hexdigest()[:16]
print(json.dumps({"cpu": cpu, "found": found, "revisions": len(tracker.revisions)}))
"""


def main(argv: list[str] | None = None) -> None:
    args = arguments("tools.bench.late_tracker", argv, calls=100_000, late=20)
    compare(_CASE, (args.calls, args.late), other=args.other, rounds=args.rounds,
            per_unit=args.late, unit="CPU s per late call",
            title=f"consume at {args.late:,} random earlier times after {args.calls:,} calls")


if __name__ == "__main__":
    main()
