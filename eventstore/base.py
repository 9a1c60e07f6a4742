"""What every journal does the same way over its storage: read, verify, anchors.

A backend (`memory.py`, `journal.py` for SQL) stores rows and streams them back
(`_rows`); this base turns rows into `RecordedEvent`s, walks the hash chain, checks
anchors, and gives projections a read that checks the chain as it goes. One
definition, so the backends cannot drift apart in what "verified" means.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import appending
from .errors import ChainBroken
from .hashing import GENESIS_HASH, chained, load_json
from .interface import Order
from .reading import ReadQuery
from .records import Anchor, ChainReport, LeanRow, RecordedEvent, StoredRow

_new_record = tuple.__new__
_VERIFY_BATCH = 5000


def to_event(row: StoredRow | Any) -> RecordedEvent:
    """A stored row as a RecordedEvent: the same fields, the payload decoded."""
    # Built with tuple.__new__: a replay makes one per row, and NamedTuple's own
    # constructor costs twice as much.
    return _new_record(
        RecordedEvent, (row[0], row[1], row[2], row[3], row[4], row[5], row[6],
                        load_json(row[7]), row[8])
    )


class JournalBase:
    """Read, verify and anchors over a backend's `_rows`, `head` and `_ends`."""

    # -- what a backend provides ----------------------------------------------

    def head(self) -> int:
        """The last position, 0 when empty."""
        raise NotImplementedError

    def _rows(self, q: ReadQuery, tx: Any) -> Iterator[StoredRow]:
        """The stored rows the query selects, in its order (tx: an open transaction)."""
        raise NotImplementedError

    def _lean_rows(self, q: ReadQuery) -> Iterator[LeanRow]:
        """What `_rows` selects, as `LeanRow`s; a backend that can fetch fewer columns
        overrides this."""
        for row in self._rows(q, None):
            yield (row[0], row[1], row[4], row[5], row[7], row[2])

    def _ends(self) -> tuple[Anchor, Anchor]:
        """Read at one moment: what the head marker says (last position, its hash), and
        the last stored record's (position, stored hash); (0, genesis) when empty."""
        raise NotImplementedError

    # -- reading ---------------------------------------------------------------

    def read(
        self,
        *,
        after_position: int = 0,
        to_position: int | None = None,
        from_time: int | None = None,
        to_time: int | None = None,
        stream: str | None = None,
        after: tuple[int, int] | None = None,
        order: Order = "canonical",
        batch_size: int = 5000,
    ) -> Iterator[RecordedEvent]:
        """Stream events, fetching batch_size at a time (never the whole journal).

        canonical: by (event_time, position); position: arrival order.
        after_position exclusive; to_position inclusive (what was known then);
        from_time / to_time inclusive; after=(t, p) keeps events whose
        (event_time, position) > (t, p). The read sees the journal as it stood when
        it began: events appended meanwhile are not included.
        """
        q = ReadQuery.make(
            self.head(),
            after_position=after_position,
            to_position=to_position,
            from_time=from_time,
            to_time=to_time,
            stream=stream,
            after=after,
            order=order,
            batch_size=batch_size,
        )
        return self._read(q, None)

    def _read(self, q: ReadQuery, tx: Any) -> Iterator[RecordedEvent]:
        return map(to_event, self._rows(q, tx))

    def read_lean(
        self,
        *,
        after_position: int = 0,
        to_position: int | None = None,
        from_time: int | None = None,
        to_time: int | None = None,
        after: tuple[int, int] | None = None,
        order: Order = "canonical",
        batch_size: int = 5000,
    ) -> Iterator[LeanRow]:
        """What `read` gives, as (position, id, type, event time, payload as stored JSON
        text, stream): what a fold needs and nothing else, for a replay to decode as it
        likes. The text is the journal's own, not yet checked against the chain."""
        q = ReadQuery.make(
            self.head(),
            after_position=after_position,
            to_position=to_position,
            from_time=from_time,
            to_time=to_time,
            stream=None,
            after=after,
            order=order,
            batch_size=batch_size,
        )
        return self._lean_rows(q)

    def read_verified(
        self,
        after: Anchor | tuple[int, str] | None = None,
        *,
        to_position: int | None = None,
        batch_size: int = 5000,
    ) -> Iterator[RecordedEvent]:
        """Events after `after` in position order, each checked to chain from the one before.

        `after` is (position, hash) of the last record the caller already trusts (a
        verified checkpoint, an anchor); None starts from the empty journal. Raises
        ChainBroken naming the first position that does not chain, before that
        event is yielded: a reader never acts on an altered record. A tail removed
        from the end is not visible here; `verify_chain(anchor=...)` proves that.
        """
        start = Anchor.of(*after) if after is not None else Anchor(0, GENESIS_HASH)
        q = ReadQuery.make(
            self.head(),
            after_position=start.position,
            to_position=to_position,
            from_time=None,
            to_time=None,
            stream=None,
            after=None,
            order="position",
            batch_size=batch_size,
        )
        return map(to_event, chained(self._rows(q, None), start.hash, start.position))

    def head_anchor(self) -> Anchor:
        """The last position and its chain hash: an anchor to keep outside the database.

        Taken from the last stored record. It says what the journal holds now; only
        `verify_chain` says whether that is a whole chain.
        """
        return self._ends()[1]

    # -- verifying -------------------------------------------------------------

    def verify(self, anchor: Anchor | tuple[int, str] | None = None) -> int | None:
        """The first position whose hash or place in the 1..N sequence is wrong, else None.

        With an anchor, also the anchored position when the journal no longer holds
        that prefix unchanged (see `verify_chain`).
        """
        return self.verify_chain(anchor=anchor).first_bad_position

    def verify_chain(self, *, anchor: Anchor | tuple[int, str] | None = None) -> ChainReport:
        """Walk the whole chain and say whether it is whole, and where it breaks if not.

        Every hash is recomputed from the stored fields (a stored payload must also
        be canonical JSON), positions must run 1..N without a gap, and the head
        marker must name the last position and its hash. With an anchor
        (position, hash), the journal must also still hold that prefix unchanged:
        not be shorter than the anchor, and recompute exactly the anchored hash at
        its position. A chain rewritten and re-hashed from the start is consistent
        in itself; only an anchor kept outside the database reveals it.
        """
        mark = Anchor.of(*anchor) if anchor is not None else None
        (head_pos, head_hash), (last, _) = self._ends()
        q = ReadQuery.make(
            last,
            after_position=0,
            to_position=last,
            from_time=None,
            to_time=None,
            stream=None,
            after=None,
            order="position",
            batch_size=_VERIFY_BATCH,
        )
        prev, done = GENESIS_HASH, 0
        at_anchor: str | None = GENESIS_HASH if mark is not None and mark.position == 0 else None
        rows = chained(self._checked_payloads(self._rows(q, None)), GENESIS_HASH, 0)
        try:
            for row in rows:
                prev, done = row[8], row[0]
                if mark is not None and done == mark.position:
                    at_anchor = prev
        except ChainBroken as exc:
            return ChainReport(False, last, exc.position, str(exc))
        if done != last:  # rows vanished while reading: a concurrent rewrite
            return ChainReport(
                False, last, done + 1,
                f"journal chain broken at position {done + 1}: the record is missing",
            )
        if mark is not None:
            if last < mark.position:
                return ChainReport(
                    False, last, last + 1,
                    f"the journal ends at position {last}, before the anchor's position "
                    f"{mark.position}: records {last + 1}..{mark.position} were removed",
                )
            if at_anchor != mark.hash:
                return ChainReport(
                    False, last, mark.position,
                    f"the journal's chain hash at position {mark.position} is "
                    f"{at_anchor}, the anchor says {mark.hash}: the prefix 1..{mark.position} "
                    "was rewritten since the anchor was taken (or the anchor is of another "
                    "journal)",
                )
        if head_pos != last:
            bad = min(head_pos, last) + 1
            return ChainReport(
                False, last, bad,
                f"the journal's head marker names position {head_pos}, the last record is "
                f"at {last}: records were removed from or added past the head",
            )
        if head_hash != prev:
            return ChainReport(
                False, last, last,
                f"the journal's head marker hash differs from the hash at position {last}",
            )
        return ChainReport(True, last, None, None, Anchor(last, prev))

    @staticmethod
    def _checked_payloads(rows: Iterator[StoredRow]) -> Iterator[StoredRow]:
        """Pass rows through, stopping with ChainBroken at a non-canonical payload.

        The hash covers the payload's text; a text that is not the canonical form of
        what it decodes to (duplicate keys, spaces) was not written by the journal.
        """
        for row in rows:
            if not appending.payload_is_canonical(row[7]):
                raise ChainBroken(
                    row[0],
                    f"journal record at position {row[0]} has a payload that is not "
                    "canonical JSON: it was altered outside the journal",
                )
            yield row
