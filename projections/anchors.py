"""Anchors: the journal's head kept outside the database, and the proof it still holds.

An **anchor** is `POSITION:HASH`, the chain hash of the record at POSITION. The hash
commits to that record and, through the chain, to every record before it. Whoever keeps
an anchor somewhere the database's owner cannot reach (a finance system, a ticket, an
email) can later prove that the journal still holds exactly that prefix: a rewrite of
any earlier record, even one that re-hashes the whole chain, changes the hash at
POSITION; a truncation removes POSITION.

Signed anchors are in `projections.signing`. The command line, the HTTP service and the
facades call these functions.
"""

from __future__ import annotations

from typing import Any

from eventstore import Anchor, ChainReport, JournalLike
from eventstore.hashing import GENESIS_HASH


class AnchorError(ValueError):
    """An anchor, or a signed anchor statement, that cannot be read or does not check out."""


def parse_anchor(text: str) -> Anchor:
    """`POSITION:HASH` as `gpu-credits head` prints it; AnchorError naming the format."""
    try:
        return Anchor.parse(text.strip().lower() if text.isascii() else text)
    except ValueError as exc:
        why = str(exc)
        if "POSITION:HASH" not in why:
            why += " (an anchor is POSITION:HASH, as `gpu-credits head` prints it)"
        raise AnchorError(why) from None


def head_anchor(journal: JournalLike) -> Anchor:
    """The journal's head as an anchor: its last position and that record's chain hash."""
    return journal.head_anchor()


def check_anchor(journal: JournalLike, anchor: Anchor) -> ChainReport:
    """Whether the journal is a whole chain that still holds exactly the prefix `anchor`
    names: every hash recomputed, then the one at the anchor's position compared."""
    return journal.verify_chain(anchor=anchor)


def hash_at(journal: JournalLike, position: int) -> str:
    """The chain hash the journal stores at `position` (the genesis hash at 0); KeyError
    when it holds no record there."""
    if position == 0:
        return GENESIS_HASH
    for rec in journal.read(after_position=position - 1, to_position=position,
                            order="position"):
        if rec.position == position:
            return rec.hash
    raise KeyError(f"the journal holds no record at position {position}")


def check_chain(journal: JournalLike, since: Anchor | None = None) -> int:
    """Check that every event after `since` (a verified checkpoint's position and hash;
    None: the start) chains from the one before; return how many were checked.

    Raises `eventstore.ChainBroken` naming the first altered position. A command or
    facade calls this before it answers, so it never answers from an altered journal.
    """
    return sum(1 for _ in journal.read_verified(after=since))


def report_dict(report: ChainReport, anchor: Anchor | None = None) -> dict[str, Any]:
    """`{"ok", "events", "first_bad_position"?, "problem"?, "anchor"?}`, as `verify
    --json` and `POST /v1/journal/verify` answer."""
    out: dict[str, Any] = {"ok": report.ok, "events": report.events}
    if not report.ok:
        out["first_bad_position"] = report.first_bad_position
        out["problem"] = report.problem
    if anchor is not None:
        out["anchor"] = str(anchor)
    return out
