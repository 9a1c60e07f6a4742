"""The last verification of a journal, kept beside it so any reader can show it.

`gpu-credits verify`, the service's `POST /v1/journal/verify` and the web view's verify
button each record their verdict with `record_verification`; the web view's summary shows
`last_verification`, however the verification ran. The record is a small JSON document
in the journal's snapshot store under the name `VERIFICATION` (no table of its own, so no
schema change): only the newest is kept.

A verification of a read-only journal (a read-only database user, a file the verifier
may not write) cannot be recorded: `record_verification` then says so and changes
nothing. The record is a note about a past check, never evidence: anyone who can write the
database can write it, which is why the web view offers to verify again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eventstore import JournalLike

if TYPE_CHECKING:
    from projections.replay import VerifyReport

VERIFICATION = "verification"
"""The snapshot name the verdicts are kept under."""


@dataclass(frozen=True, slots=True)
class Verification:
    """One finished verification: its verdict, what it covered, when and how it ran."""

    ok: bool
    head: int  # the journal's head when it started
    events: int  # events whose hash chain was checked
    checkpoints: int = 0  # checkpoints whose digest replay reproduced
    first_bad_position: int | None = None
    problem: str | None = None
    finished_at: float = 0.0  # wall clock, seconds since the epoch
    by: str = "cli"  # "cli", "http" (POST /v1/journal/verify) or "web" (the verify button)
    # Checkpoints passed over as saved in another format (a stale cache, not a finding):
    # why, one line each, as `VerifyReport.stale_checkpoints` gives them.
    stale_checkpoints: tuple[str, ...] = ()

    @classmethod
    def of(cls, report: VerifyReport, *, head: int, by: str, finished_at: float,
           events: int | None = None) -> Verification:
        """The verdict of `report` (`projections.replay.verify`), as every way of
        verifying records it; `events`: the events whose chain was checked, when the
        caller checked the chain itself."""
        return cls(report.ok, head, report.checked_events if events is None else events,
                   report.checked_checkpoints, report.first_bad_position, report.problem,
                   finished_at, by, report.stale_checkpoints)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready record."""
        return {"ok": self.ok, "head": self.head, "events": self.events,
                "checkpoints": self.checkpoints,
                "first_bad_position": self.first_bad_position, "problem": self.problem,
                "finished_at": self.finished_at, "by": self.by,
                "stale_checkpoints": list(self.stale_checkpoints)}

    @classmethod
    def from_dict(cls, data: Any) -> Verification:
        """The record from its JSON form; ValueError naming the field that is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a verification record is a JSON object, not {data!r:.40}")
        return cls(_typed(data, "ok", bool), _typed(data, "head", int),
                   _typed(data, "events", int),
                   _typed(data, "checkpoints", int, optional=True) or 0,
                   _typed(data, "first_bad_position", int, optional=True),
                   _typed(data, "problem", str, optional=True),
                   float(_typed(data, "finished_at", float)),
                   _typed(data, "by", str, optional=True) or "cli",
                   _stale(data.get("stale_checkpoints")))


def _stale(value: Any) -> tuple[str, ...]:
    """A record's `stale_checkpoints`: a list of text (missing or null in a record kept
    before it was one: none); else ValueError."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"verification record: stale_checkpoints is {value!r:.40}, "
                         "expected a list of text")
    return tuple(value)


def _typed(data: dict[str, Any], name: str, kind: type, *, optional: bool = False) -> Any:
    """`data[name]` if it is a `kind` (an int is a float; a bool is neither); None for an
    optional field that is missing or null; else ValueError."""
    value = data.get(name)
    if value is None and optional:
        return None
    if kind is bool:
        fits = isinstance(value, bool)
    elif kind is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        fits = isinstance(value, kind) and not isinstance(value, bool)
    if not fits:
        raise ValueError(f"verification record: {name} is {value!r:.40}, expected "
                         f"{kind.__name__}")
    return value


def record_verification(journal: JournalLike, verdict: Verification) -> str | None:
    """Keep `verdict` as the journal's last verification; None once kept, else why it could
    not be (a read-only journal). Never raises for a journal it cannot write."""
    state = json.dumps(verdict.as_dict(), sort_keys=True).encode()
    try:
        # The newest replaces the others: a reader wants the last one, not a history. In
        # one transaction: a verdict that cannot be written leaves the one before it.
        with journal.transaction():
            journal.drop_snapshots(VERIFICATION)
            journal.save_snapshot(VERIFICATION, verdict.head, 0,
                                  "ok" if verdict.ok else "failed", state)
    except Exception as exc:  # read-only database, permissions: the verdict stands anyway
        return f"{type(exc).__name__}: {exc}"
    return None


def last_verification(journal: JournalLike) -> Verification | None:
    """The newest recorded verification, None when none is (or it cannot be read: a
    record is data, read as JSON and checked field by field)."""
    try:
        found = journal.snapshots(VERIFICATION)
        if not found:
            return None
        newest = max(found, key=lambda info: info.id)
        return Verification.from_dict(json.loads(journal.load_snapshot(newest.id)))
    except (KeyError, ValueError):
        return None

