"""Replay and the revision log's first pass on journals where many events arrive slightly
late, in CPU time, this tree beside another (a worktree of an earlier commit), in
alternating fresh processes; medians of the rounds:

    python -m tools.bench.late_replay --other /tmp/base --workdir /tmp/late --rounds 3

Two SQLite journals, written first when missing: `late60k`, 60,000 events of the
realistic mix with 5% of them arriving up to 30 events late, appended 10 at a time; and
`soak44k`, 44,000 events of the mix whose usage reports all arrive 1 to 30 events late,
appended 50 at a time (a service fed usage reports up to 30 s late, in batches). Each
case also prints what it found (a hash of the revisions, the digest), which must be
the same on both trees.
"""

from __future__ import annotations

import argparse
import bisect
import json
import random
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tools.bench.workload import MixEvent, append_mix, realistic_mix, with_late_arrivals

CASES = ("replay", "revisions", "fold_canonical")

_CASE = """
import hashlib, json, sys, time
from eventstore import Journal
from projections.replay import fold_canonical, replay
from projections.revisionlog import RevisionLog
journal = Journal("sqlite:///" + sys.argv[1])
case = sys.argv[2]
begin = time.process_time()
if case == "replay":
    report = replay(journal)
    revisions, digest = report.revisions, report.digest
elif case == "revisions":
    revisions, digest = RevisionLog(journal).revisions(), ""
else:
    revisions, digest = [], fold_canonical(journal).digest()
cpu = time.process_time() - begin
found = hashlib.sha256(repr(revisions).encode()).hexdigest()[:16]
print(json.dumps({"cpu": cpu, "revisions": len(revisions), "found": found,
                  "digest": digest[:16]}))
"""


def _soak(n: int) -> Iterator[MixEvent]:
    late: list[MixEvent] = []
    rest: list[MixEvent] = []
    for event in realistic_mix(n):
        (late if event.type == "consume" else rest).append(event)
    # Every usage report late by 1 to 30 events of the others.
    delayed = with_late_arrivals(iter(late), 1.0, max_delay=30)
    yield from _merge_late(rest, list(delayed))


def _merge_late(rest: list[MixEvent], late: list[MixEvent]) -> Iterator[MixEvent]:
    rng = random.Random(11)
    order = sorted(range(len(late)), key=lambda i: (late[i].time, i))
    queue = [late[i] for i in order]
    times = [e.time for e in rest]
    cursor = 0
    for i, event in enumerate(rest):
        yield event
        # Reports whose event time lies 1 to 30 events back arrive now.
        while cursor < len(queue):
            due = bisect.bisect_right(times, queue[cursor].time) + rng.randint(1, 30)
            if due > i:
                break
            yield queue[cursor]
            cursor += 1
    yield from queue[cursor:]


def _journal(path: Path, name: str) -> None:
    if path.exists():
        return
    from eventstore import Journal

    journal = Journal(f"sqlite:///{path}")
    if name == "late60k":
        append_mix(journal, with_late_arrivals(realistic_mix(60_000), 0.05, max_delay=30), 10)
    else:
        append_mix(journal, _soak(44_000), 50)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.late_replay")
    parser.add_argument("--other", required=True, help="the tree to compare with")
    parser.add_argument("--workdir", default="/tmp/late-replay")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--journal", nargs="*", default=["late60k", "soak44k"])
    parser.add_argument("--case", nargs="*", default=list(CASES))
    args = parser.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    trees = {"this": str(Path.cwd()), "other": str(Path(args.other).resolve())}
    results: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for name in args.journal:
        path = work / f"{name}.db"
        _journal(path, name)
        for _ in range(args.rounds):
            for case in args.case:
                for tree, root in trees.items():
                    out = subprocess.run(
                        [sys.executable, "-c", _CASE, str(path), case], cwd=root,
                        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
                        check=True, capture_output=True, text=True).stdout
                    results.setdefault((name, case, tree), []).append(
                        json.loads(out.strip().splitlines()[-1]))
    print("| journal | case | other (s) | this (s) | revisions | same answer |")
    print("|---|---|---:|---:|---:|---|")
    for name in args.journal:
        for case in args.case:
            mine, theirs = results[(name, case, "this")], results[(name, case, "other")]
            same = {(r["found"], r["digest"]) for r in mine + theirs}
            print(f"| {name} | {case} | {statistics.median(r['cpu'] for r in theirs):.2f} "
                  f"| {statistics.median(r['cpu'] for r in mine):.2f} "
                  f"| {mine[0]['revisions']} | {'yes' if len(same) == 1 else 'NO'} |")


if __name__ == "__main__":
    main()
