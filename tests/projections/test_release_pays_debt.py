"""Credits a job releases pay debt first; every answer traces them to the debt they paid.

A cancel, or a completion that charges less than was held, gives credits back; while the
account owes, they pay the debt before they are usable again. The balance always said so
(the debt goes down); the statement's line of the release, its words, and the lineage of
the grant the credits came back to must say so too, with the same figures.
"""

from __future__ import annotations

from typing import Any

import pytest

from eventstore import MemoryJournal, NewEvent
from projections.queries import balance, statement
from tools import wording


def _journal(events: list[tuple[str, int, dict[str, Any]]]) -> MemoryJournal:
    journal = MemoryJournal()
    for n, (kind, time, payload) in enumerate(events):
        stream = payload.get("account", "a")
        journal.append([NewEvent(payload.pop("id", f"e{n}"), stream, kind, time, payload)])
    return journal


def _released_in_debt(finish: str) -> MemoryJournal:
    """Grant 10 (g1), a job holding 8, a usage of 5 (2 from g1, 3 owed), then the job
    released: cancelled, failed with a full refund, or failed with half refunded."""
    events: list[tuple[str, int, dict[str, Any]]] = [
        ("grant", 0, {"account": "a", "amount": 10, "expiry": 1000, "id": "g1"}),
        ("submit", 1, {"account": "a", "job": "j1", "cost": 8, "priority": 1}),
        ("consume", 2, {"account": "a", "amount": 5}),
    ]
    if finish == "cancel":
        events.append(("cancel", 3, {"job": "j1"}))
    else:
        events.append(("start", 3, {"job": "j1"}))
        refund = 1.0 if finish == "fail" else 0.5
        events.append(("complete", 4, {"job": "j1", "success": False,
                                       "refund_fraction": refund}))
    return _journal(events)


@pytest.mark.parametrize("finish", ["cancel", "fail", "partial"])
def test_the_release_line_says_the_debt_its_credits_paid(finish: str) -> None:
    journal = _released_in_debt(finish)
    assert balance(journal, "a").figures.debt == 0
    release = statement(journal, "a").lines[-1]
    assert release.type == ("cancel" if finish == "cancel" else "complete")
    assert release.debt_paid == 3
    assert wording.text(release.effect).endswith("3 paid debt first (g1 3)")
