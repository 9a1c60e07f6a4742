"""The state digest is SHA-256 over the canonical JSON of the whole state.

`Ledger.digest` encodes the jobs a slice at a time (a million jobs never become one
string); these tests pin that it hashes exactly the bytes of the one-shot encoding.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import projections.digest as digest_module
from projections.events import (
    CreditsConsumed,
    CreditsGranted,
    JobCompleted,
    JobStarted,
    JobSubmitted,
)
from projections.ledger import Ledger


def one_shot_digest(ledger: Ledger) -> str:
    text = json.dumps(ledger.canonical(), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def build(jobs: list[tuple[str, int, bool]], anomalies: int) -> Ledger:
    ledger = Ledger()
    position = 0

    def apply(event: object) -> None:
        nonlocal position
        position += 1
        ledger.apply(position, f"e{position}", position, event)  # type: ignore[arg-type]

    apply(CreditsGranted("ä-acct", 500, None))
    for job, cost, run in jobs:
        apply(JobSubmitted("ä-acct", job, cost, 0))
        if run:
            apply(JobStarted(job))
            apply(JobCompleted(job, True))
    for _ in range(anomalies):
        apply(JobStarted("missing"))
    apply(CreditsConsumed("ä-acct", 7))
    return ledger


job_ids = st.text(st.characters(categories=("L", "N", "P", "S")), min_size=1,
                  max_size=6)


@settings(max_examples=30, deadline=None)
@given(jobs=st.lists(st.tuples(job_ids, st.integers(0, 200), st.booleans()), max_size=25,
                     unique_by=lambda j: j[0]),
       anomalies=st.integers(0, 2), slice_size=st.integers(1, 5))
def test_sliced_digest_hashes_the_one_shot_encoding(
    jobs: list[tuple[str, int, bool]], anomalies: int, slice_size: int,
) -> None:
    ledger = build(jobs, anomalies)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(digest_module, "_DIGEST_SLICE", slice_size)
        assert ledger.digest() == one_shot_digest(ledger)


def test_digest_changes_with_a_finished_job_charge() -> None:
    a = build([("j1", 10, True)], 0)
    b = build([("j1", 11, True)], 0)
    assert a.digest() != b.digest()


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(_json_values)
def test_the_fast_canonical_encoder_writes_the_bytes_json_dumps_writes(value: object) -> None:
    want = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        expected = want.encode()
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 either way
        return
    assert digest_module.canonical_bytes(value) == expected
