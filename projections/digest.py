"""A ledger's canonical form and its digest: what `replay`, `verify` and checkpoints
compare, the same for the same journal on every backend.

The canonical form holds no position and no arrival order: each account's batches,
debt, holds and totals, the anomalies, and every job's figures, all sorted. The digest
is the SHA-256 of its canonical JSON (`json.dumps(canonical(ledger), sort_keys=True,
separators=(",", ":"), ensure_ascii=False)`), streamed: the jobs, most of a large
state, are encoded a slice at a time, never as one string.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:  # the ledger module calls this one: no import back at run time
    from projections.ledger import Ledger

_DIGEST_SLICE = 10_000
"""Jobs encoded at a time while hashing."""


def canonical(ledger: Ledger) -> dict[str, Any]:
    """A canonical, JSON-ready view of the whole state (no positions, no arrival order)."""
    state = _without_jobs(ledger)
    state["jobs"] = {job_id: canonical_job(ledger, job_id) for job_id in sorted(ledger.jobs)}
    return state


def _without_jobs(ledger: Ledger) -> dict[str, Any]:
    accounts: dict[str, Any] = {}
    for name in sorted(ledger.accounts):
        account = ledger.accounts[name]
        book = account.book
        batches = sorted(
            (b for heap in book.heaps.values() for b in heap),
            key=lambda b: (*b.key[:4], b.key[4][0], b.grant_id),
        )
        accounts[name] = {
            "opened": account.opened,
            "max_running": account.max_running,
            "share": account.share,
            "running": account.running,
            "batches": [[b.grant_id, b.pool, b.expiry, b.amount] for b in batches],
            "debt": dict(sorted(book.debt.items())),
            "holds": {
                ref: [[b.grant_id, amount] for b, amount in book.holds[ref].portions]
                for ref in sorted(book.holds)
            },
            "totals": {
                "granted": book.totals.granted,
                "consumed": book.totals.consumed,
                "charged_from_credits": book.totals.charged_from_credits,
                "charged_jobs": book.totals.charged_jobs,
                "debt_created": book.totals.debt_created,
                "debt_paid": book.totals.debt_paid,
                "expired": book.totals.expired,
                # Only when there is any: digests of journals without voids stay as
                # they were.
                **({"voided": book.totals.voided} if book.totals.voided else {}),
            },
        }
    return {"accounts": accounts, "anomalies": sorted([list(a) for a in ledger.anomalies])}


def canonical_job(ledger: Ledger, job_id: str) -> list[Any]:
    """One job's entry of the canonical form: account, cost, priority, pool, state, charge."""
    j = ledger.jobs[job_id]
    return [j.account, j.cost, j.priority, j.pool, j.state, j.charge]


def digest(ledger: Ledger) -> str:
    """SHA-256 of the canonical state: same journal, same digest, on every backend.

    The bytes hashed are `json.dumps(canonical(ledger), sort_keys=True, ...)`, but the
    jobs (most of a large state) are encoded a slice at a time, never as one string.
    """
    hasher = hashlib.sha256()
    head = canonical_bytes({**_without_jobs(ledger), "jobs": {}})
    # `head` ends with '"jobs":{}}': the keys sort as accounts, anomalies, jobs.
    hasher.update(head[:-2])
    ids = sorted(ledger.jobs)
    for start in range(0, len(ids), _DIGEST_SLICE):
        part = canonical_bytes(
            {job_id: canonical_job(ledger, job_id) for job_id in ids[start:start + _DIGEST_SLICE]})
        if start:
            hasher.update(b",")
        hasher.update(part[1:-1])
    hasher.update(b"}}")
    return hasher.hexdigest()


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_bytes(obj: Any) -> bytes:
    """`_CANONICAL.encode(obj)` as UTF-8, through orjson (several times faster).

    orjson with sorted keys writes the same bytes as `json.dumps(..., sort_keys=True,
    separators=(",", ":"), ensure_ascii=False)` for what a canonical state holds (str
    keys, str, int, bool, None, lists); what orjson refuses (an integer beyond 64 bits)
    goes through `json`, so the digest never changes with the encoder.
    """
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):
        return _CANONICAL.encode(obj).encode()
