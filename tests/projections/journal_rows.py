"""Journals written from plain rows, for the model tests that generate them."""

from __future__ import annotations

from typing import Any

from eventstore import MemoryJournal, NewEvent

Row = tuple[str, str, int, dict[str, Any]]
"""One event as a model test draws it: id, type, time, payload."""


def journal_of(rows: list[Row]) -> MemoryJournal:
    """A memory journal holding `rows` in this order, one append each (so a row drawn
    after a later one is a late event), each in its account's stream, or its job's."""
    journal = MemoryJournal()
    for event_id, kind, time, payload in rows:
        stream = payload.get("account") or f"job:{payload.get('job', event_id)}"
        journal.append([NewEvent(event_id, stream, kind, time, payload)])
    return journal
