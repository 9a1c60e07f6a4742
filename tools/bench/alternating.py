"""A case run in fresh processes of this tree and another (a worktree of an earlier
commit), alternating round by round: CPU per unit of work and a hash of the answers,
which must be the same on both trees; medians of the rounds."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
"""This tree."""


def arguments(prog: str, argv: list[str] | None, **sizes: int) -> argparse.Namespace:
    """The command line of a two-tree benchmark: `--other TREE`, `--rounds N` and an
    integer option per name of `sizes` (its default)."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}")
    parser.add_argument("--other", help="the tree to compare with (none: this tree alone)")
    for name, default in sizes.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args(argv)


def run_case(tree: Path, case: str, args: Sequence[object]) -> dict[str, Any]:
    """Run the script `case` with `args` on the code of `tree`, in a fresh process; the
    JSON object its last line prints."""
    out = subprocess.run([sys.executable, "-c", case, *map(str, args)], cwd=tree,
                         env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    answer: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
    return answer


def compare(case: str, args: Sequence[object], *, other: str | None, rounds: int,
            per_unit: float, unit: str, title: str) -> None:
    """Run `case` on this tree and on `other` (if given) in alternating rounds and print,
    per tree, the median of its `cpu` divided by `per_unit` (in `unit`), each round's, and
    the answers it `found` (with how many `revisions`, when it says)."""
    trees = {"this tree": HERE}
    if other:
        trees["other"] = Path(other).resolve()
    per: dict[str, list[float]] = {name: [] for name in trees}
    found: dict[str, set[str]] = {name: set() for name in trees}
    for _ in range(rounds):
        for name, tree in trees.items():
            answer = run_case(tree, case, args)
            per[name].append(float(answer["cpu"]) / per_unit)
            seen = str(answer["found"])
            if "revisions" in answer:
                seen += f" ({int(answer['revisions']):,} revisions)"
            found[name].add(seen)
    print(f"{title}, {unit} (median of {rounds}; each round):")
    for name in trees:
        each = ", ".join(f"{v:.3f}" for v in per[name])
        print(f"  {name}: {statistics.median(per[name]):.3f} ({each}); answers "
              f"{', '.join(sorted(found[name]))}")
    if other:
        ratio = statistics.median(per["other"]) / statistics.median(per["this tree"])
        print(f"  other / this tree: {ratio:.1f}x")
