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

from eventstore import MemoryJournal, NewEvent
from projections import GPUCreditTracker, LedgerError, Scheduler
from projections.events import (
    AccountOpened,
    CreditsConsumed,
    CreditsGranted,
    JobCancelled,
    JobCompleted,
    JobStarted,
    JobSubmitted,
    to_payload,
)
from projections.projector import Projector
from projections.replay import fold_canonical, replay
from tests.projections.invariants import assert_invariants

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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opening=openings, ops=ops_strategy)
def test_live_state_equals_a_cold_fold_with_late_usage_reports(
    opening: tuple[int, int | None, int, int | None], ops: list[tuple[Any, ...]],
) -> None:
    run(opening, ops, snapshot_every=None)


@pytest.mark.parametrize("every", [1, 4])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(opening=openings, ops=ops_strategy)
def test_live_state_equals_a_cold_fold_when_snapshots_are_frequent(
    every: int, opening: tuple[int, int | None, int, int | None], ops: list[tuple[Any, ...]]
) -> None:
    run(opening, ops, snapshot_every=every)


# -- arrival order does not matter for events with distinct event times ------------------

JOB_NAMES = ["x", "y", "z"]
domain_event = st.one_of(
    st.builds(AccountOpened, st.sampled_from(ACCOUNTS), st.sampled_from([None, 1])),
    st.builds(CreditsGranted, st.sampled_from(ACCOUNTS), st.integers(1, 30),
              st.one_of(st.none(), st.integers(0, 60)), st.sampled_from(["general", "h100"])),
    st.builds(CreditsConsumed, st.sampled_from(ACCOUNTS), st.integers(1, 30),
              st.sampled_from(["general", "h100"])),
    st.builds(JobSubmitted, st.sampled_from(ACCOUNTS), st.sampled_from(JOB_NAMES),
              st.integers(0, 20), st.integers(0, 2), st.sampled_from(["general", "h100"])),
    st.builds(JobStarted, st.sampled_from(JOB_NAMES)),
    st.builds(JobCompleted, st.sampled_from(JOB_NAMES), st.booleans(),
              st.sampled_from([0.0, 0.5, 1.0])),
    st.builds(JobCancelled, st.sampled_from(JOB_NAMES)),
)


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), events=st.lists(domain_event, min_size=1, max_size=25))
def test_replay_digest_does_not_depend_on_arrival_order(
    data: st.DataObject, events: list[Any]
) -> None:
    times = data.draw(st.permutations(range(0, 3 * len(events), 3)))
    new = [
        NewEvent(f"e{i}", getattr(e, "account", "jobs"), e.type, times[i], to_payload(e))
        for i, e in enumerate(events)
    ]
    arrival = data.draw(st.permutations(new))
    first, second = MemoryJournal(), MemoryJournal()
    for ev in new:
        first.append([ev])
    for ev in arrival:
        second.append([ev])
    want = fold_canonical(first).digest()
    assert fold_canonical(second).digest() == want
    assert replay(first).digest == want
    assert replay(second).digest == want
    assert Scheduler(second).state_digest() == want
    assert_invariants(replay(second).ledger)
