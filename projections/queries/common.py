"""What every query shares: the latest time, `--as-known-at` positions, unknown names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from eventstore import JournalLike
from projections.creditbook import Lineage
from projections.errors import UnknownAccount
from projections.events import TIMELINE_START
from projections.ledger import Ledger
from projections.timefmt import parse_micros

_KNOWN_SHOWN = 20


def latest_time(journal: JournalLike) -> int:
    """The latest event time in the journal; TIMELINE_START when it is empty."""
    latest = journal.max_time()
    return TIMELINE_START if latest is None else latest


def known_position(journal: JournalLike, value: int | str | None) -> int:
    """A journal position from `--as-known-at`: a position, or an ISO-8601 recorded-at time.

    None means the head. A position past the head means the head. ValueError if negative
    or neither an integer nor ISO-8601.
    """
    head = journal.head()
    if value is None:
        return head
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("+-").isdigit():
            value = int(text)
        else:
            return journal.position_at(parse_micros(text))
    if value < 0:
        raise ValueError(f"a position is 0 or more (0: before the first event), got {value}")
    return min(value, head)


def names_text(names: Iterable[str]) -> str:
    ordered = sorted(names)
    if not ordered:
        return "none"
    shown = ", ".join(ordered[:_KNOWN_SHOWN])
    more = len(ordered) - _KNOWN_SHOWN
    return f"{shown}, and {more} more" if more > 0 else shown


def unknown_account(name: str, ledger: Ledger) -> UnknownAccount:
    """The error for an account the journal does not know, naming the ones it does."""
    return UnknownAccount(f"unknown account {name!r} (known: {names_text(ledger.accounts)})")


def exists_later(journal: JournalLike, name: str) -> bool:
    """Whether any event of the journal is in the account's stream."""
    return journal.stream_version(name) > 0


def lineage_dict(lineage: Lineage) -> list[list[Any]]:
    return [[grant, amount] for grant, amount in lineage]


def describe_lineage(lineage: Lineage) -> str:
    """`g1 50, g2 20`: which grants gave how many credits."""
    return ", ".join(f"{grant} {amount:,}" for grant, amount in lineage) or "nothing"

