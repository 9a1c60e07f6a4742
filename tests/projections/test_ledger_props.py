"""Both facades on one journal, with late tracker calls re-projecting scheduler jobs.

No model here: the oracles are `assert_invariants` after every step, and the live state
(ingested in arrival order, late events re-projected from snapshots) against a cold fold
of the same journal in canonical order, after every step. A late usage report can turn
an accepted submit into a rejected one on the corrected timeline; whatever it does, the
two ways of computing the state must agree and every invariant must hold.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_invariants

from eventstore import MemoryJournal
from projections import GPUCreditTracker, LedgerError, Scheduler
from projections.projector import Projector
from projections.replay import fold_canonical

ACCOUNTS = ["a", "b"]
POOLS = [None, "h100"]

tracker_grant = st.tuples(
    st.just("grant"), st.sampled_from(ACCOUNTS), st.integers(1, 30), st.integers(0, 40),
    st.sampled_from([5, 10, 40]), st.sampled_from(POOLS),
)
tracker_consume = st.tuples(
    st.just("consume"), st.sampled_from(ACCOUNTS), st.integers(1, 30), st.integers(0, 40),
    st.sampled_from(POOLS),
)
open_account = st.tuples(
    st.just("open"), st.sampled_from(ACCOUNTS), st.integers(0, 40),
    st.sampled_from([None, 1, 2]),
)
submit = st.tuples(
    st.just("submit"), st.sampled_from(ACCOUNTS), st.integers(0, 25), st.integers(0, 2),
    st.sampled_from(POOLS), st.one_of(st.none(), st.integers(0, 40)),
)
start = st.tuples(st.just("start"))
complete = st.tuples(
    st.just("complete"), st.integers(0, 20), st.booleans(),
    st.sampled_from([0.0, 0.5, 0.9, 1.0]),
)
cancel = st.tuples(st.just("cancel"), st.integers(0, 20))
ops_strategy = st.lists(
    st.one_of(tracker_grant, tracker_consume, tracker_consume, open_account, submit, submit,
              submit, start, start, complete, cancel),
    min_size=8,
    max_size=30,
)
# Both accounts opened first, with these balances and caps.
openings = st.tuples(st.integers(0, 60), st.sampled_from([None, 1, 2]), st.integers(0, 60),
                     st.sampled_from([None, 1, 2]))


def run(opening: tuple[int, int | None, int, int | None], ops: list[tuple[Any, ...]],
        snapshot_every: int | None) -> None:
    journal = MemoryJournal()
    ticks = itertools.count(0, 2)
    scheduler = Scheduler(journal, clock=lambda: next(ticks))
    if snapshot_every is not None:
        session = scheduler._session
        session.projector = Projector(session._read_canonical, min_snapshot_every=snapshot_every)
    trackers = {name: GPUCreditTracker(journal, account=name) for name in ACCOUNTS}
    jobs: list[str] = []
    balance_a, cap_a, balance_b, cap_b = opening
    ops = [("open", "a", balance_a, cap_a), ("open", "b", balance_b, cap_b), *ops]
    for step, op in enumerate(ops):
        kind = op[0]
        head = journal.head()
        try:
            if kind == "grant":
                _, name, amount, t, duration, pool = op
                trackers[name].grant(amount, t, t + duration, pool=pool)
            elif kind == "consume":
                _, name, amount, t, pool = op
                trackers[name].consume(amount, t, pool=pool)
            elif kind == "open":
                _, name, balance, cap = op
                scheduler.open_account(name, balance, max_running=cap)
            elif kind == "submit":
                _, name, cost, priority, pool, at = op
                job = f"j{len(jobs)}"
                jobs.append(job)
                scheduler.submit(job, name, cost, priority, pool=pool, at=at)
            elif kind == "start":
                scheduler.start_next()
            elif kind == "complete" and jobs:
                _, i, success, fraction = op
                scheduler.complete(jobs[i % len(jobs)], success, refund_fraction=fraction)
            elif kind == "cancel" and jobs:
                scheduler.cancel(jobs[op[1] % len(jobs)])
        except (LedgerError, KeyError, ValueError):
            assert journal.head() == head, f"step {step} {op}: raised but appended"
        ledger = scheduler.ledger()
        assert_invariants(ledger)
        cold = fold_canonical(journal)
        assert ledger.canonical() == cold.canonical(), f"step {step} {op}: live != cold fold"
        for tracker in trackers.values():
            assert tracker.state_digest() == ledger.digest()
    assert Scheduler(journal).state_digest() == scheduler.state_digest()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opening=openings, ops=ops_strategy)
def test_live_state_equals_a_cold_fold_with_late_usage_reports(
    opening: tuple[int, int | None, int, int | None], ops: list[tuple[Any, ...]],
) -> None:
    run(opening, ops, snapshot_every=None)


@pytest.mark.parametrize("every", [1, 4])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opening=openings, ops=ops_strategy)
def test_live_state_equals_a_cold_fold_when_snapshots_are_frequent(
    every: int, opening: tuple[int, int | None, int, int | None], ops: list[tuple[Any, ...]]
) -> None:
    run(opening, ops, snapshot_every=every)
