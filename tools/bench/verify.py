"""`verify` on a SQLite journal of the realistic mix (1 % of events late) with the
checkpoints `replay` saves, in CPU seconds per whole `verify`, this tree beside another (a
worktree of an earlier commit) in alternating fresh processes; medians of the rounds:

    python -m tools.bench.verify --other /tmp/base --events 150000

The journal is written once, by this tree, to `--journal` (kept for the next run); both
trees then only read it. Each process prints what its `verify` reported, which must be
the same on both trees.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tools.bench.alternating import HERE, compare

_WRITE = """
import sys
from eventstore import Journal
from projections.replay import replay
from tools.bench.workload import append_mix, realistic_mix, with_late_arrivals
journal = Journal(f"sqlite:///{sys.argv[1]}")
append_mix(journal, with_late_arrivals(realistic_mix(int(sys.argv[2])), 0.01), 5000)
replay(journal, checkpoint=True)
journal.close()
"""

_CASE = """
import json, sys, time
from eventstore import Journal
from projections.replay import verify
journal = Journal(f"sqlite:///{sys.argv[1]}", read_only=True)
begin = time.process_time()
report = verify(journal)
cpu = time.process_time() - begin
print(json.dumps({"cpu": cpu, "found": repr(report)}))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.verify")
    parser.add_argument("--other", help="the tree to compare with (none: this tree alone)")
    parser.add_argument("--events", type=int, default=150_000)
    parser.add_argument("--journal", help="the SQLite file (default: one per size in /tmp)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    path = Path(args.journal or f"/tmp/gpu-credits-bench-verify-{args.events}.db")
    if not path.exists():
        subprocess.run([sys.executable, "-c", _WRITE, str(path), str(args.events)],
                       cwd=HERE, check=True)
    compare(_CASE, (path,), other=args.other, rounds=args.rounds, per_unit=1.0,
            unit="CPU s per verify",
            title=f"verify of {args.events:,} events with replay's checkpoints")


if __name__ == "__main__":
    main()
