"""`reconcile` against a model: from a plain fold's outcomes, the ledger's charges (each
job's charge at its completion, each usage report, each adjustment's debit, none of them
reversed or an anomaly), then every row's verdict and every charge the file lacks, for
the accounts it names and between its earliest and latest time, both included."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.ledger import Ledger
from projections.queries import reconcile
from projections.queries.reconcile import FileCharge
from tests.projections.journal_rows import Row, journal_of

ACCOUNTS = ("a", "b", "c")
Charge = tuple[str, str, str, int, int, int]  # kind ("job" or "id"), ref, account, amount,
# time, position


@st.composite
def journals(draw: st.DrawFn) -> list[Row]:
    rows: list[Row] = [("g", "grant", 0, {"account": "a", "amount": 30})]
    ids: list[str] = []
    jobs: list[str] = []
    for n in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["grant", "consume", "adjust", "reverse", "job", "job",
                                     "complete"]))
        account = draw(st.sampled_from(ACCOUNTS))
        time = draw(st.integers(0, 10))
        if kind == "grant":
            rows.append((f"g{n}", "grant", time, {"account": account,
                                                  "amount": draw(st.integers(1, 50))}))
        elif kind == "consume":
            rows.append((f"u{n}", "consume", time, {"account": account,
                                                    "amount": draw(st.integers(1, 20))}))
        elif kind == "adjust":
            rows.append((f"d{n}", "adjust", time, {
                "account": account, "amount": draw(st.integers(-20, 20).filter(bool)),
                "reason": "fix"}))
        elif kind == "reverse":
            if not ids:
                continue
            rows.append((f"r{n}", "reverse", time, {"event": draw(st.sampled_from(ids)),
                                                    "reason": "wrong"}))
        elif kind == "job":
            job = f"j{n}"
            jobs.append(job)
            rows.append((f"s{n}", "submit", time, {"account": account, "job": job,
                                                   "cost": draw(st.integers(0, 15)),
                                                   "priority": 1}))
            if draw(st.booleans()):
                rows.append((f"t{n}", "start", time + draw(st.integers(0, 2)), {"job": job}))
        else:
            if not jobs:
                continue
            payload: dict[str, Any] = {"job": draw(st.sampled_from(jobs)),
                                       "success": draw(st.booleans())}
            if draw(st.booleans()):
                payload["refund_fraction"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
            if draw(st.booleans()):
                start = f"t{n}s"
                rows.append((start, "start", time, {"job": payload["job"]}))
            rows.append((f"c{n}", "complete", time + draw(st.integers(0, 2)), payload))
        ids.append(rows[-1][0])
    return rows


def _reversed(rows: list[Row]) -> set[str]:
    """Out of the fold: an event some reversal of which is itself in."""
    reversals = [(i, p["event"]) for i, kind, _, p in rows if kind == "reverse"]

    def out(event_id: str) -> bool:
        return any(not out(r) for r, target in reversals if target == event_id)

    return {target for _, target in reversals if out(target)}


def ledger_charges(rows: list[Row]) -> dict[tuple[str, str], Charge]:
    """Every charge of the journal `rows` (in arrival order), by ("job", job) or ("id", id)."""
    out_ = _reversed(rows)
    ledger = Ledger(excluded=frozenset(out_))
    placed = sorted(enumerate(rows, start=1), key=lambda pr: (pr[1][2], pr[0]))
    charges: dict[tuple[str, str], Charge] = {}
    for position, (event_id, kind, time, payload) in placed:
        done = ledger.apply_recorded(position, event_id, kind, time, payload)
        if event_id in out_ or done.anomaly:
            continue
        if kind == "consume":
            charges[("id", event_id)] = ("id", event_id, payload["account"],
                                         payload["amount"], time, position)
        elif kind == "adjust":
            charges[("id", event_id)] = ("id", event_id, payload["account"],
                                         -payload["amount"], time, position)
        elif kind == "complete" and done.charge is not None:
            job = payload["job"]
            charges[("job", job)] = ("job", job, ledger.jobs[job].account, done.charge, time,
                                     position)
    return charges


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Row], int, list[FileCharge]]:
    rows = draw(journals())
    known = draw(st.integers(1, len(rows)))
    charges = list(ledger_charges(rows[:known]).values())
    named = [("job", i) for i, k, _, p in rows if k == "submit" for i in [p["job"]]]
    named += [("id", i) for i, k, _, _ in rows]
    file: list[FileCharge] = []
    for line in range(2, draw(st.integers(2, 10))):
        if charges and draw(st.booleans()):
            kind, ref, account, amount, _, _ = draw(st.sampled_from(charges))
        else:
            kind, ref = draw(st.sampled_from(named))
            account, amount = draw(st.sampled_from(ACCOUNTS)), draw(st.integers(0, 20))
        account = draw(st.sampled_from([account, account, draw(st.sampled_from(ACCOUNTS))]))
        amount = draw(st.sampled_from([amount, amount, amount + 1, 0]))
        time = draw(st.none() | st.integers(-1, 13))
        file.append(FileCharge(line, account, amount, ref if kind == "job" else None,
                               ref if kind == "id" else None, time))
    return rows, known, file


def expected(rows: list[Row], file: list[FileCharge]) -> list[tuple[Any, ...]]:
    """(status, account, job, id, file amount, ledger amount) of each finding."""
    charges = ledger_charges(rows)
    found: list[tuple[Any, ...]] = []
    seen: set[tuple[str, str, str]] = set()
    named: set[tuple[str, str]] = set()
    for r in file:
        key = ("job", r.job) if r.job is not None else ("id", r.event_id or "")
        if (r.account, *key) in seen:
            found.append(("duplicate", r.account, r.job, r.event_id, r.amount, None))
            continue
        seen.add((r.account, *key))
        named.add(key)
        charge = charges.get(key)
        if charge is None or charge[2] != r.account:
            found.append(("missing_from_ledger", r.account, r.job, r.event_id, r.amount,
                          None))
        else:
            status = "matched" if charge[3] == r.amount else "amount_differs"
            found.append((status, r.account, r.job, r.event_id, r.amount, charge[3]))
    times = [r.time for r in file if r.time is not None]
    low, high = (min(times), max(times)) if times else (None, None)
    accounts = {r.account for r in file}
    extras = sorted((c for key, c in charges.items()
                     if c[2] in accounts and c[3] != 0 and key not in named
                     and (low is None or low <= c[4]) and (high is None or c[4] <= high)),
                    key=lambda c: (c[4], c[5]))
    for kind, ref, account, amount, _, _ in extras:
        found.append(("missing_from_file", account, ref if kind == "job" else None,
                      ref if kind == "id" else None, None, amount))
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_reconcile_agrees_with_a_model_of_the_ledgers_charges(
        case: tuple[list[Row], int, list[FileCharge]]) -> None:
    rows, known, file = case
    journal = journal_of(rows)
    result = reconcile(journal, file, as_known_at=known)
    got = [(f.status, f.account, f.job, f.event_id, f.file_amount, f.ledger_amount)
           for f in result.findings]
    assert got == expected(rows[:known], file)
    assert result.ok == all(g[0] == "matched" for g in got)
