"""A failed job's charge is one number whichever way its completion arrives: through the
`Scheduler` facade, an imported line, the HTTP service, as a `whatif` policy or as the
amount a reconciliation file expects. Each is floor(cost * (1 - f)) on the fraction as
written (0.9 as nine tenths, not the binary float just above it), exactly, for costs up
to 2**53 - 1 where cost * (1 - f) in floats is not."""

from __future__ import annotations

import json
import math
from fractions import Fraction

from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal
from projections import Scheduler
from projections.importing import import_file
from projections.policy import Policy
from projections.queries.reconcile import parse_charges, reconcile
from projections.queries.whatif import whatif
from projections.replay import replay
from projections.session import decision
from tools.service.app import create_app

BIG = 2**53 - 1

fractions = st.one_of(
    st.sampled_from([0.0, 1.0, 0.1, 0.3, 0.7, 0.9, 1 / 3, 2 / 3, 0.1 + 0.2, 0.29, 0.57,
                     5e-324, 1e-17, 0.9999999999999999, 0.5000000000000001]),
    st.floats(0, 1, allow_nan=False, allow_infinity=False),
    st.integers(0, 10**6).map(lambda n: n / 10**6),
)
costs = st.one_of(st.integers(0, 1000), st.integers(0, BIG), st.sampled_from([BIG, 10, 100]))


def exact(cost: int, fraction: float) -> int:
    return math.floor(cost * (1 - Fraction(repr(fraction))))


def by_facade(cost: int, fraction: float) -> int | None:
    scheduler = Scheduler(MemoryJournal(), clock=lambda: 1)
    for step, call in enumerate([
            lambda: scheduler.open_account("a", BIG),
            lambda: scheduler.submit("j", "a", cost, 1),
            lambda: scheduler.start_next(),
            lambda: scheduler.complete("j", False, refund_fraction=fraction)]):
        with decision(scheduler, event_id=f"e{step}"):
            call()
    journal = scheduler._session.journal
    return replay(journal).ledger.jobs["j"].charge


def lines(cost: int, fraction: float) -> bytes:
    events = [
        {"type": "grant", "account": "a", "amount": BIG, "time": 1, "id": "e0"},
        {"type": "submit", "account": "a", "job": "j", "cost": cost, "priority": 1,
         "time": 2, "id": "e1"},
        {"type": "start", "job": "j", "time": 3, "id": "e2"},
        {"type": "complete", "job": "j", "success": False, "time": 4,
         "refund_fraction": fraction, "id": "e3"},
    ]
    return "".join(json.dumps(e) + "\n" for e in events).encode()


def by_http(cost: int, fraction: float) -> int:
    with TestClient(create_app(MemoryJournal(), clock=lambda: 1, mount_web=False)
                    ) as client:
        assert client.post("/v1/accounts/a/grants",
                           json={"amount": BIG, "time": 1}).status_code == 201
        assert client.post("/v1/jobs", json={"job": "j", "account": "a", "cost": cost,
                                             "priority": 1, "time": 2}).json()["accepted"]
        assert client.post("/v1/jobs/start-next", json={"time": 3}).status_code == 200
        done = client.post("/v1/jobs/j/complete",
                           json={"success": False, "refund_fraction": fraction, "time": 4})
        assert done.status_code == 200, done.text
        charged: int = done.json()["charged"]
        return charged


@settings(max_examples=30, deadline=None)
@given(cost=costs, fraction=fractions)
def test_every_path_charges_a_failed_job_alike(cost: int, fraction: float) -> None:
    charge = exact(cost, fraction)
    assert by_facade(cost, fraction) == charge
    assert by_http(cost, fraction) == charge

    imported = MemoryJournal()
    import_file(imported, lines(cost, fraction), "charges.jsonl")
    assert replay(imported).ledger.jobs["j"].charge == charge
    # Refunding nothing under a what-if policy, or the same fraction, from a full refund.
    full = MemoryJournal()
    import_file(full, lines(cost, 1.0), "charges.jsonl")
    changed = whatif(full, Policy(refund_fraction=fraction))
    assert [(j.job, j.whatif_charge) for j in changed.jobs] == (
        [("j", charge)] if charge else [])
    # The charge a reconciliation file names is the ledger's, matched.
    rows = parse_charges(f"account,job,amount\na,j,{charge}\n", "file.csv")
    found = reconcile(imported, rows)
    assert [f.status for f in found.findings] == ["matched"]
