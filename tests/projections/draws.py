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
