"""What each event did, as the fold decided it: the only place outcomes come from.

Outcomes are never stored beside the journal as truth; they are recomputed by the fold
and compared between timelines to find revisions. `reported()` is the part a caller was
told (a submit's acceptance, a consume's debt, who paid a charge), which a late event
may revise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from projections.creditbook import Expiry, Lineage


class Outcome(NamedTuple):
    """The result of applying one recorded event (immutable).

    A named tuple rather than a frozen dataclass: the fold makes one per event, and a
    tuple is several times cheaper to build.
    """

    position: int
    event_id: str
    type: str
    time: int
    account: str | None
    ok: bool = True  # False: a rejected submit, or an anomaly kept in the journal
    reason: str | None = None
    debt_after: int | None = None  # consume: the account's outstanding debt right after it
    debt_created: int = 0
    paid_by: Lineage = ()  # consume / charge: grants that paid; submit: grants reserved
    # (pool, amount) of debt the event paid: a grant's or a credit's credits, or the
    # credits a complete or cancel released (they pay debt before becoming active again)
    paid_debt: tuple[tuple[str, int], ...] = ()
    debt_paid_by: Lineage = ()  # complete / cancel: grants whose released credits paid it
    charge: int | None = None  # complete: credits charged
    released: int | None = None  # complete / cancel: credits released
    expired: tuple[Expiry, ...] = ()  # credits that expired before/at this event
    anomaly: bool = False

    def reported(self) -> dict[str, Any]:
        """What a caller was told about this event; a change here is a revision."""
        out: dict[str, Any] = {"ok": self.ok}
        if self.reason is not None and not self.ok:
            out["reason"] = self.reason
        if self.debt_after is not None:
            out["debt_after"] = self.debt_after
        if self.paid_by:
            out["paid_by"] = [list(p) for p in self.paid_by]
        if self.charge is not None:
            out["charge"] = self.charge
        return out


# Constants to compiled code (a Final name is read directly, not looked up by name).
_TUPLE_NEW: Final = tuple.__new__
_OUTCOME: Final = Outcome


def outcome(position: int, event_id: str, type: str, time: int, account: str | None,
            ok: bool = True, reason: str | None = None, debt_after: int | None = None,
            debt_created: int = 0, paid_by: Lineage = (),
            paid_debt: tuple[tuple[str, int], ...] = (), debt_paid_by: Lineage = (),
            charge: int | None = None,
            released: int | None = None, expired: tuple[Expiry, ...] = (),
            anomaly: bool = False) -> Outcome:
    """`Outcome(...)`, the same value, built the way the fold can afford once per event.

    A named tuple's constructor is a Python function taking keywords: compiled, the fold
    spent about a sixth of its time in it. Here the fields go straight to `tuple.__new__`
    (the defaults are Outcome's: a test holds them equal)."""
    made: Outcome = _TUPLE_NEW(_OUTCOME, (position, event_id, type, time, account, ok, reason,
                                          debt_after, debt_created, paid_by, paid_debt,
                                          debt_paid_by, charge, released, expired,
                                          anomaly))
    return made


@dataclass(frozen=True, slots=True)
class Revision:
    """A late event changed what an already-applied event was reported to do."""

    late_position: int
    late_event_id: str
    position: int
    event_id: str
    type: str
    before: dict[str, Any]
    after: dict[str, Any]
