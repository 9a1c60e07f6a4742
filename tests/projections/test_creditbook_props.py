"""The credit fold against a linear-scan model, over random calls (late ones and pools too).

Each example drives a `GPUCreditTracker` and `credit_model.CreditModel` with the same
calls. Timestamps are random, so many calls are late: the model simply re-folds every
call sorted by (timestamp, call index), which is what the tracker must agree with after
re-projecting. After every step: the consume's return value, the balance at the step's
time and at the end of the timeline (all pools, each pool, and which pools are listed:
every pool a call up to then named, however its credits or debt came to 0), and
`assert_invariants`.
"""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from credit_model import CreditModel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invariants import assert_invariants

from eventstore import MemoryJournal
from projections import GPUCreditTracker
from projections.creditbook import BatchKey, key_before
from projections.ledger import Ledger
from projections.projector import Projector, apply_recorded

POOLS = ["general", "h100", "a100"]

pool_arg = st.sampled_from([None, "h100", "h100", "a100", "general"])
times = st.integers(0, 12)

# Expiries come from a few slots so that equal expiries (the tie-breaks) are common.
expiry_slot = st.sampled_from([6, 6, 12, 24])
grant_op = st.tuples(st.just("grant"), st.integers(1, 30), times, expiry_slot, pool_arg)
consume_op = st.tuples(st.just("consume"), st.integers(1, 30), times, pool_arg)
balance_op = st.tuples(
    st.just("balance"), st.integers(-1, 40), st.sampled_from([None, *POOLS])
)
ops_strategy = st.lists(
    st.one_of(grant_op, grant_op, consume_op, consume_op, balance_op), max_size=24
)


def check_balances(tracker: GPUCreditTracker, model: CreditModel, t: int) -> None:
    assert tracker.get_balance(t) == model.get_balance(t), f"get_balance({t})"
    for pool in POOLS:
        assert tracker.get_balance(t, pool=pool) == model.get_balance(t, pool), (
            f"get_balance({t}, pool={pool!r})"
        )
    # The pools listed: every one a grant or consume named, in name order ("general" at 0
    # when nothing was recorded yet).
    listed = tracker.pool_balances(t)
    assert list(listed.items()) == list((model.pools(t) or {"general": 0}).items()), (
        f"pool_balances({t})")


def run(ops: list[tuple[Any, ...]], tracker: GPUCreditTracker) -> CreditModel:
    model = CreditModel()
    latest = 0
    for step, op in enumerate(ops):
        kind = op[0]
        if kind == "grant":
            _, amount, t, slot, pool = op
            expiry = slot if slot > t else t + slot
            tracker.grant(amount, t, expiry, pool=pool)
            model.grant(amount, t, expiry, pool)
        elif kind == "consume":
            _, amount, t, pool = op
            got = tracker.consume(amount, t, pool=pool)
            want = model.consume(amount, t, pool)
            assert got == want, f"step {step}: consume({amount}, {t}, pool={pool!r})"
        else:
            _, t, pool = op
            assert tracker.get_balance(t, pool=pool) == model.get_balance(t, pool), (
                f"step {step}: get_balance({t}, pool={pool!r})"
            )
        latest = max(latest, t)
        check_balances(tracker, model, t)
        check_balances(tracker, model, latest)
        check_balances(tracker, model, latest + 40)
        assert_invariants(tracker.ledger())
    return model


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy)
def test_tracker_agrees_with_linear_model(ops: list[tuple[Any, ...]]) -> None:
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    model = run(ops, tracker)

    # Replay: a second tracker on the same journal gives the same answers and state.
    again = GPUCreditTracker(journal, account="a")
    assert again.state_digest() == tracker.state_digest()
    for t in sorted({-1, 0, 7, 15, 31, 50, *(c.time for c in model.calls)}):
        assert again.get_balance(t) == model.get_balance(t), f"replayed get_balance({t})"
        assert again.pool_balances(t) == tracker.pool_balances(t)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy)
def test_tracker_agrees_with_linear_model_on_a_sqlite_file(ops: list[tuple[Any, ...]]) -> None:
    """The same differential test through a SQLite file journal (late calls re-project
    from SQL reads), and a second tracker reopened on the URL agrees."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/journal.db"
        tracker = GPUCreditTracker(url, account="a")
        try:
            model = run(ops, tracker)
            again = GPUCreditTracker(url, account="a")
            try:
                assert again.state_digest() == tracker.state_digest()
                for t in sorted({-1, 15, 50, *(c.time for c in model.calls)}):
                    assert again.get_balance(t) == model.get_balance(t)
            finally:
                again.journal.close()  # type: ignore[attr-defined]
        finally:
            tracker.journal.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("every", [1, 3])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops_strategy)
def test_tracker_agrees_with_model_when_snapshots_are_frequent(
    every: int, ops: list[tuple[Any, ...]]
) -> None:
    """The same differential test with the projector snapshotting every few events, so
    late calls re-project from a snapshot and past balances restore one (white box: the
    default spacing of 2000 events never snapshots in a short example)."""
    tracker = GPUCreditTracker(account="a")
    session = tracker._session
    session.projector = Projector(session._read_canonical, min_snapshot_every=every)
    run(ops, tracker)
    if sum(1 for op in ops if op[0] != "balance") > 2 * every:
        assert session.projector.snapshot_count() > 0


@settings(max_examples=50, deadline=None)
@given(
    calls=st.lists(
        st.one_of(
            st.tuples(st.just("grant"), st.integers(1, 30), st.integers(0, 15),
                      st.integers(1, 10), pool_arg),
            st.tuples(st.just("consume"), st.integers(1, 40), st.integers(0, 20),
                      st.just(0), pool_arg),
        ),
        max_size=16,
    )
)
def test_lineage_accounts_for_every_credit(calls: list[tuple[Any, ...]]) -> None:
    """Per consume: grants that paid + debt created = amount. Per grant: debt it paid +
    what consumes took from it + what expired of it + what is left = its amount."""
    journal = MemoryJournal()
    tracker = GPUCreditTracker(journal, account="a")
    for kind, amount, t, duration, pool in calls:
        if kind == "grant":
            tracker.grant(amount, t, t + duration, pool=pool)
        else:
            tracker.consume(amount, t, pool=pool)

    used: dict[str, int] = {}
    granted: dict[str, int] = {}
    ledger = Ledger()
    for rec in journal.read(order="canonical"):
        outcome = apply_recorded(ledger, rec)
        for e in outcome.expired:
            used[e.grant_id] = used.get(e.grant_id, 0) + e.amount
        if rec.type == "consume":
            assert sum(a for _, a in outcome.paid_by) + outcome.debt_created == (
                rec.payload["amount"]
            ), f"consume at position {rec.position}: lineage {outcome.paid_by}"
            for grant_id, amount in outcome.paid_by:
                assert amount > 0
                used[grant_id] = used.get(grant_id, 0) + amount
        if rec.type == "grant":
            granted[rec.id] = rec.payload["amount"]
            used[rec.id] = used.get(rec.id, 0) + sum(p for _, p in outcome.paid_debt)
    assert ledger.digest() == tracker.state_digest()
    left = {b.grant_id: b.amount for heap in ledger.accounts["a"].book.heaps.values()
            for b in heap} if "a" in ledger.accounts else {}
    for grant_id, amount in granted.items():
        assert used.get(grant_id, 0) + left.get(grant_id, 0) == amount, f"grant {grant_id}"
    assert set(used) <= set(granted)
    assert_invariants(ledger)


_BATCH_KEYS = st.tuples(st.integers(0, 3), st.booleans(), st.integers(-3, 3), st.booleans(),
                        st.tuples(st.integers(-3, 3), st.integers(0, 3)))


@given(_BATCH_KEYS, _BATCH_KEYS)
def test_the_draw_order_of_two_batches_is_their_keys_compared_as_tuples(
        a: BatchKey, b: BatchKey) -> None:
    assert key_before(a, b) == (a < b)
    assert key_before(b, a) == (b < a)
