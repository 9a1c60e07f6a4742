"""`whatif` against a model: the policy's fold equals a plain fold of the journal rewritten
to carry the policy's rules (every grant at the default priority, every failed job's
refund fraction, every account's cap), and exactly what differs is listed."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.events import TIMELINE_START
from projections.figures import Figures
from projections.policy import Policy
from projections.queries import whatif
from projections.queries.common import fold_as_known
from tests.projections.journal_rows import Row, journal_of

ACCOUNTS = ("a", "b")
POOLS = (None, "h100")


@st.composite
def journals(draw: st.DrawFn) -> list[Row]:
    """Every account opened at the start of the timeline (so a cap has an event to carry
    it), then grants, usage, adjustments, voids, reversals and jobs at times drawn in any
    order (late events included)."""
    rows: list[Row] = []
    for name in ACCOUNTS:
        opened: dict[str, Any] = {"account": name}
        cap = draw(st.none() | st.integers(1, 3))
        if cap is not None:
            opened["max_running"] = cap
        rows.append((f"open-{name}", "account", TIMELINE_START, opened))
    grants: list[str] = []
    jobs: list[str] = []
    reversible: list[str] = []
    kinds = st.sampled_from(["grant", "grant", "consume", "adjust", "void", "reverse",
                             "submit", "submit", "start", "start", "complete", "cancel",
                             "account"])
    for n in range(draw(st.integers(1, 30))):
        kind = draw(kinds)
        account = draw(st.sampled_from(ACCOUNTS))
        pool = draw(st.sampled_from(POOLS))
        time = draw(st.integers(0, 12))
        payload: dict[str, Any]
        if kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 40)),
                       "priority": draw(st.sampled_from([0, 10, 50, 90]))}
            if draw(st.booleans()):
                payload["expiry"] = time + draw(st.integers(1, 8))
            grants.append(f"e{n}")
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 30))}
        elif kind == "adjust":
            payload = {"account": account, "amount": draw(st.integers(-20, 20).filter(bool)),
                       "reason": "fix"}
        elif kind == "void":
            if not grants:
                continue
            payload = {"grant": draw(st.sampled_from(grants))}
        elif kind == "reverse":
            if not reversible:
                continue
            payload = {"event": draw(st.sampled_from(reversible)), "reason": "wrong"}
        elif kind == "submit":
            payload = {"account": account, "job": f"j{n}", "cost": draw(st.integers(0, 25)),
                       "priority": draw(st.integers(0, 2))}
            jobs.append(f"j{n}")
        elif kind == "account":
            payload = {"account": account}
            cap = draw(st.none() | st.integers(1, 3))
            if cap is not None:
                payload["max_running"] = cap
        else:
            if not jobs:
                continue
            payload = {"job": draw(st.sampled_from(jobs))}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
                if draw(st.booleans()):
                    payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
        if pool is not None and kind in ("grant", "consume", "adjust", "submit"):
            payload["pool"] = pool
        rows.append((f"e{n}", kind, time, payload))
        if kind != "account":
            reversible.append(f"e{n}")
    return rows


policies = st.builds(
    lambda order, fraction, caps: {
        k: v for k, v in (("grant_order", order), ("refund_fraction", fraction),
                          ("max_running", caps)) if v is not None},
    st.none() | st.sampled_from(["priority", "expiry"]),
    st.none() | st.sampled_from([0, 0.3, 0.5, 1]),
    st.none() | st.dictionaries(st.sampled_from(ACCOUNTS), st.integers(1, 3)))


def _rewritten(rows: list[Row], policy: dict[str, Any]) -> list[Row]:
    """The journal as if its events had carried the policy's rules."""
    caps = policy.get("max_running", {})
    out: list[Row] = []
    for event_id, kind, time, payload in rows:
        payload = dict(payload)
        if kind == "grant" and policy.get("grant_order") == "expiry":
            payload.pop("priority", None)
        if kind == "complete" and not payload["success"] and "refund_fraction" in policy:
            payload["refund_fraction"] = policy["refund_fraction"]
        if kind == "account" and payload["account"] in caps:
            payload["max_running"] = caps[payload["account"]]
        out.append((event_id, kind, time, payload))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=journals(), policy=policies, data=st.data())
def test_whatif_is_a_fold_of_the_journal_rewritten_to_the_policy(
        rows: list[Row], policy: dict[str, Any], data: st.DataObject) -> None:
    journal = journal_of(rows)
    head = journal.head()
    known = data.draw(st.integers(len(ACCOUNTS), head), label="as known at")
    result = whatif(journal, Policy.from_json(policy), as_known_at=known)
    assert journal.head() == head  # nothing written

    actual = fold_as_known(journal_of(rows[:known]))
    model = fold_as_known(journal_of(_rewritten(rows[:known], policy)))
    at = result.at
    listed = {c.account: c for c in result.accounts}
    for name in sorted(set(actual.accounts) | set(model.accounts)):
        a = Figures.of(actual.accounts.get(name), at)
        w = Figures.of(model.accounts.get(name), at)
        if name in listed:
            assert (listed[name].actual, listed[name].whatif) == (a, w)
            assert a != w
        else:
            assert a == w, name
    jobs = {j.job: j for j in result.jobs}
    for job_id in set(actual.jobs) | set(model.jobs):
        a_job, w_job = actual.jobs.get(job_id), model.jobs.get(job_id)
        a_key = None if a_job is None else (a_job.state, a_job.charge)
        w_key = None if w_job is None else (w_job.state, w_job.charge)
        if job_id in jobs:
            change = jobs[job_id]
            assert (change.actual_state, change.actual_charge) == (a_key or (None, None))
            assert (change.whatif_state, change.whatif_charge) == (w_key or (None, None))
            assert a_key != w_key
        else:
            assert a_key == w_key, job_id
    assert result.totals["anomalies"] == (len(actual.anomalies), len(model.anomalies))
    assert result.changed == bool(result.accounts or result.jobs)
