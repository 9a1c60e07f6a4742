"""Hypothesis draws that more than one generated-journal test makes the same way."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def job_event(draw: st.DrawFn, kind: str,
              jobs: list[tuple[str, str]]) -> tuple[dict[str, Any], str] | None:
    """The payload of a `start` or `complete` (its success drawn) of one of `jobs`
    (job, account), and that job's account; None while nothing has been submitted."""
    if not jobs:
        return None
    job, account = draw(st.sampled_from(jobs))
    payload: dict[str, Any] = {"job": job}
    if kind == "complete":
        payload["success"] = draw(st.booleans())
    return payload, account


def other_event(draw: st.DrawFn, kind: str, n: int, account: str, grants: list[str],
                jobs: list[tuple[str, str]], *,
                most_used: int = 40) -> tuple[dict[str, Any], str] | None:
    """The payload of a `consume` (of 1 to `most_used`), `adjust`, `void` (of one of
    `grants`), `submit` (job `j{n}`, added to `jobs`) or job event (`job_event`) as event
    number n, and its account; None when it cannot be drawn yet."""
    if kind == "consume":
        return {"account": account, "amount": draw(st.integers(1, most_used))}, account
    if kind == "adjust":
        return {"account": account, "amount": draw(st.integers(-30, 30).filter(bool)),
                "reason": "correction"}, account
    if kind == "void":
        return ({"grant": draw(st.sampled_from(grants))}, account) if grants else None
    if kind == "submit":
        job = f"j{n}"
        payload = {"account": account, "job": job, "cost": draw(st.integers(0, 30)),
                   "priority": 1}
        jobs.append((job, account))
        return payload, account
    return job_event(draw, kind, jobs)


def add_event(events: list[tuple[str, str, int, dict[str, Any]]], n: int, kind: str,
              time: int, payload: dict[str, Any], pool: str | None) -> None:
    """Add event n (id `e{n}`) to `events`, in `pool` when its kind takes one."""
    if pool is not None and kind in ("grant", "consume", "adjust", "submit"):
        payload["pool"] = pool
    events.append((f"e{n}", kind, time, payload))
