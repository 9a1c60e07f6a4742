"""The chain check on its own: what reading with the chain checked costs.

Every answer from the journal beyond a verified checkpoint is checked to chain
(`eventstore.hashing.chained`, behind `Journal.read_verified` and `verify_chain`).
Measured here apart from the folds, beside raw `hashlib.sha256` over the very same
bytes in the same run, so the replay targets stay fold targets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tools.bench.runner import Case, Config, Scenario, Table, Target, Timing

_ROWS: dict[int, list[Any]] = {}


def _rows(n: int) -> list[Any]:
    """The stored rows of a realistic journal of n events (built once per process)."""
    rows = _ROWS.get(n)
    if rows is None:
        from eventstore import MemoryJournal
        from tools.bench.workload import append_mix, realistic_mix

        journal = MemoryJournal()
        append_mix(journal, realistic_mix(n), 5000)
        rows = _ROWS[n] = list(journal._stored)
    return rows


def raw_sha256(t: Timing, n: int) -> None:
    """hashlib.sha256 over the bytes the chain hashes, prebuilt: the floor."""
    import hashlib

    from eventstore.hashing import GENESIS_HASH, chain_input

    rows = _rows(n)
    prev = GENESIS_HASH
    inputs = []
    for row in rows:
        inputs.append(chain_input(prev, row))
        prev = row[8]
    sha256 = hashlib.sha256
    with t.measure():
        for data in inputs:
            sha256(data).hexdigest()
    t.note("events", len(inputs))


def checked(t: Timing, n: int) -> None:
    """`chained()` over the stored rows: build each record's bytes, hash, compare. In C
    where the accelerator is built (`_how_checked`), as `read_verified` runs it."""
    from eventstore.hashing import chained

    _check(t, n, chained)


def checked_python(t: Timing, n: int) -> None:
    """`chained_python()`, the Python definition: what runs where the C accelerator is
    not built, or is turned off."""
    from eventstore.hashing import chained_python

    _check(t, n, chained_python)


def _check(t: Timing, n: int, check: Callable[[list[Any], str, int], Iterator[Any]]) -> None:
    from eventstore.hashing import GENESIS_HASH

    rows = _rows(n)
    count = 0
    with t.measure():
        for _ in check(rows, GENESIS_HASH, 0):
            count += 1
    t.note("events", count)


def _how_checked() -> str:
    """Where `chained` runs in this install, for the case's label."""
    from eventstore import hashing

    if hashing._accelerator is None:
        return f"in Python: no C accelerator built, or {hashing.PURE_PYTHON_VARIABLE} set"
    return f"in C, SHA-256 from {hashing._accelerator.HASHED_WITH}"


def scenario(cfg: Config) -> Scenario:
    n = cfg.sizes.replay
    return Scenario(
        name="chain",
        title="The chain check",
        intro=(
            f"{n:,} events of the realistic mix, stored in a memory journal before timing. "
            "`chained()` rebuilds each record's canonical bytes from the stored row, "
            "hashes them with the previous hash and compares with the stored hash: what "
            "`read_verified` and `verify_chain` do per event (in C where the accelerator "
            "is built: the case's label says). Beside it, raw `hashlib.sha256` over "
            "the same bytes, prebuilt, and the check's Python definition, the fallback."
        ),
        cases=[
            Case("chain.raw", "raw hashlib.sha256 over the same bytes", "chain:raw_sha256",
                 {"n": n}, n, baseline=True, short="raw sha256"),
            Case("chain.checked", f"chain check (eventstore.hashing.chained, {_how_checked()})",
                 "chain:checked", {"n": n}, n, compare=("chain.raw",)),
            Case("chain.python", "chain check in Python (hashing.chained_python, the fallback)",
                 "chain:checked_python", {"n": n}, n, compare=("chain.raw",),
                 short="in Python"),
        ],
        tables=[Table(f"{n:,} events", ("chain.raw", "chain.checked", "chain.python"))],
        targets=[
            Target("chain check at least 0.5x raw sha256 over the same bytes", "ratio",
                   "chain.checked", "chain.raw", 0.5, "chain.checked", "trust"),
        ],
    )
