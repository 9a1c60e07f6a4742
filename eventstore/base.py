"""What every journal does the same way over its storage: read, verify, anchors.

A backend (`memory.py`, `journal.py` for SQL) stores rows and streams them back
(`_rows`); this base turns rows into `RecordedEvent`s, walks the hash chain, checks
anchors, and gives projections a read that checks the chain as it goes. One
definition, so the backends cannot drift apart in what "verified" means.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Unpack

from . import appending
from .errors import ChainBroken, went_back
from .hashing import GENESIS_HASH, chained, linked, load_json, pinned, seal
from .reading import ReadFilters, ReadQuery
from .records import (
    ERASED_KEY,
    PRIVATE_KEY,
    Anchor,
    ChainReport,
    Erasure,
    LeanRow,
    NewEvent,
    PinnedRow,
    RecordedEvent,
    StoredRow,
)

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


_lean_of: Callable[[StoredRow | PinnedRow], LeanRow] = operator.itemgetter(0, 1, 4, 5, 7, 2)
_position_of = operator.itemgetter(0)
_hash_of = operator.itemgetter(8)
_predecessor = (-1).__add__


class Reader:
    """`read()`, written once for a journal and for a transaction on one: the filters
    are checked by `ReadQuery`, the events come from `_query` (what this reader sees)."""

    def head(self) -> int:
        """The last position this reader sees, 0 when empty."""
        raise NotImplementedError

    def _query(self, q: ReadQuery) -> Iterator[RecordedEvent]:
        """The events `q` selects, as this reader sees them, in its order."""
        raise NotImplementedError

    def read(self, **filters: Unpack[ReadFilters]) -> Iterator[RecordedEvent]:
        """Stream events, fetching batch_size at a time (never the whole journal).

        canonical: by (event_time, position); position: arrival order.
        after_position exclusive; to_position inclusive (what was known then);
        from_time / to_time inclusive; after=(t, p) keeps events whose
        (event_time, position) > (t, p). The read sees the journal as it stood when
        it began: events appended meanwhile are not included. The filters, by name:
        after_position=0, to_position=None, from_time=None, to_time=None, stream=None,
        after=None, order="canonical", batch_size=5000, type=None (only events of that
        type) (`ReadQuery.make` checks them).
        """
        return self._query(ReadQuery.make(self.head(), **filters))


class JournalBase(Reader):
    """Read, verify and anchors over a backend's `_rows`, `head` and `_ends`."""

    # -- what a backend provides ----------------------------------------------

    def head(self) -> int:
        """The last position, 0 when empty."""
        raise NotImplementedError

    def get_many(self, event_ids: Iterable[str]) -> dict[str, RecordedEvent]:
        """The events recorded under any of these ids, by id."""
        raise NotImplementedError

    def head_and_get_many(self, event_ids: Iterable[str]
                          ) -> tuple[int, dict[str, RecordedEvent]]:
        """`head()` and `get_many(event_ids)` as of one moment (a writer holding the keys
        of those ids, so nobody else can record them meanwhile, may ask the two apart)."""
        return self.head(), self.get_many(event_ids)

    def _rows(self, q: ReadQuery, tx: Any) -> Iterator[StoredRow]:
        """The stored rows the query selects, in its order (tx: an open transaction)."""
        raise NotImplementedError

    def _row_batches(self, q: ReadQuery, tx: Any) -> Iterator[list[StoredRow]]:
        """What `_rows` yields, in the lists it fetches them in (none empty)."""
        raise NotImplementedError

    def _hashes_at(self, positions: Sequence[int], tx: Any) -> dict[int, str]:
        """The stored hashes at these positions, by position (absent where none is
        stored)."""
        raise NotImplementedError

    def _pinned_rows(self, q: ReadQuery, tx: Any) -> Iterator[PinnedRow]:
        """What `_rows` selects, each row followed by its predecessor's stored hash (None
        at position 1 or where none is stored), fetched with it: no extra round trip."""
        raise NotImplementedError

    def _lean_rows(self, q: ReadQuery) -> Iterator[LeanRow]:
        """What `_rows` selects, as `LeanRow`s, each checked to link to its predecessor."""
        # A map, not a generator: no Python frame resumed per row of a replay.
        return map(_lean_of, self._checked_rows(q, None))

    def _checked_rows(self, q: ReadQuery, tx: Any) -> Iterator[StoredRow | PinnedRow]:
        """What `_rows` selects, each row yielded only after its link is checked: its
        stored hash is the one its content and its predecessor's stored hash give.

        A read of every stream (a replay, a fold) finds most predecessors among the rows
        it fetched (`_linked`); a read of one stream or one type, whose rows are mostly
        not each other's predecessors, fetches each row's predecessor hash beside it
        (`_pinned_rows`). Every way, each row is checked against its predecessor's
        stored hash before it is yielded, and the same ChainBroken names the same
        position.
        """
        if q.stream is None and q.type is None:
            return self._linked(q, tx)
        return pinned(self._pinned_rows(q, tx))

    def _linked(self, q: ReadQuery, tx: Any) -> Iterator[StoredRow]:
        # Chained in C: the rows pass from each batch's check to the reader without a
        # Python frame in between.
        return itertools.chain.from_iterable(self._linked_batches(q, tx))

    def _linked_batches(self, q: ReadQuery, tx: Any) -> Iterator[Iterator[StoredRow]]:
        """The rows of a read of every stream, as one check per batch (each taken only
        when the one before is done), each row checked against its predecessor's stored
        hash.

        A batch of consecutive positions in order (a whole window read in position
        order: a replay; or a stretch of the timeline where nothing arrived late) is
        walked by `chained`: each row after the first links to the one just checked,
        whose stored hash is the one recomputed, and the first to the last row of the
        batch before or, at the start, to the stored hash the window starts from.
        Any other batch (a late event on the timeline, or a gap) is checked row by row by `linked`
        against the stored hashes of its rows' predecessors, found among the rows of this
        batch and of the one before (on the timeline of an in-order journal: all but
        those around a late event), the rest fetched in one query, before any row of the
        batch is yielded.
        """
        sequential = q.contiguous and q.order == "position"
        before: dict[int, str] = {}
        walked: list[StoredRow] | None = None  # the batch before, if walked: `before` of it
        last: tuple[int, str] | None = None  # the previous batch's last row, checked
        for batch in self._row_batches(q, tx):
            first = batch[0][0]
            if batch[-1][0] - first == len(batch) - 1 and (sequential or all(
                    map(operator.eq, map(_position_of, batch), range(first, first + len(batch))))):
                # Consecutive positions in order (in position order, or a stretch of the
                # timeline without a late event: most of an in-order journal's): walked
                # like a replay's rows, without a map of hashes by position per row.
                prev = (last[1] if last is not None and last[0] == first - 1
                        else before.get(first - 1) if walked is None and first - 1 in before
                        else self._stored_hash(first - 1, q.head, tx) if first > 0 else None)
                if prev is not None:
                    yield chained(batch, prev, first - 1)
                    last = (batch[-1][0], batch[-1][8])
                    walked = batch
                    continue
            if walked is not None:
                before = dict(zip(map(_position_of, walked), map(_hash_of, walked), strict=True))
                walked = None
            known = dict(zip(map(_position_of, batch), map(_hash_of, batch), strict=True))
            wanted = set(map(_predecessor, known))
            wanted.difference_update(known)
            wanted.discard(0)
            held = {p: before[p] for p in wanted if p in before}
            if last is not None and last[0] in wanted:
                held[last[0]] = last[1]
            if len(held) < len(wanted):
                held.update(self._hashes_at(sorted(wanted.difference(held)), tx))
            known.update(held)
            yield linked(batch, known)
            if not sequential:
                before = known
            last = (batch[-1][0], batch[-1][8])

    def _ends(self) -> tuple[Anchor, Anchor]:
        """Read at one moment: what the head marker says (last position, its hash), and
        the last stored record's (position, stored hash); (0, genesis) when empty."""
        raise NotImplementedError

    def _private_rows(self, after_position: int, to_position: int | None,
                      batch_size: int) -> Iterator[tuple[int, str, str, str]]:
        """The stored private parts in position order: (position, event id, salt, text)."""
        raise NotImplementedError

    def _private_of(self, ids: Sequence[str]) -> list[tuple[StoredRow, str, str]]:
        """The held private parts of these event ids: (the record's row, salt, text)."""
        raise NotImplementedError

    def _erase_private(self, ids: Sequence[str], record: NewEvent) -> Erasure:
        """In one transaction: append `record` naming the ids whose parts are held, and
        delete those parts; nothing when none is held."""
        raise NotImplementedError

    # -- reading ---------------------------------------------------------------

    def _query(self, q: ReadQuery) -> Iterator[RecordedEvent]:
        return self._read(q, None)

    def _read(self, q: ReadQuery, tx: Any) -> Iterator[RecordedEvent]:
        # Every event read is checked against its own stored hash and its predecessor's
        # (`hashing.pinned`): an edit in place that was not re-hashed is ChainBroken at
        # its position, wherever it stands relative to a verified point.
        return map(to_event, self._checked_rows(q, tx))

    def read_lean(self, **filters: Unpack[ReadFilters]) -> Iterator[LeanRow]:
        """What `read` gives, as (position, id, type, event time, payload as stored JSON
        text, stream): what a fold needs and nothing else, for a replay to decode as it
        likes. Each row is checked as `read` checks it (its own hash from its content and
        its predecessor's stored hash; ChainBroken at its position), not the whole chain
        (`read_verified`). Takes `read()`'s filters."""
        return self._lean_rows(ReadQuery.make(self.head(), **filters))

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
        event is yielded: a reader never acts on an altered record.

        The journal must still hold `after` as the caller trusts it: a journal that ends
        before it (restored from an older copy under a running reader, or its tail cut)
        raises ChainBroken at its first missing position, and one whose stored hash at
        `after` is another (the same length, another history) at the position after it,
        never an empty read that looks like "nothing new". The record at `after` comes in
        the same query as those after it. A tail removed from the end of a journal
        nobody read that far is not visible here; `verify_chain(anchor=...)` proves that.
        """
        start = Anchor.read(after) if after is not None else Anchor(0, GENESIS_HASH)
        head = self.head()
        if start.position > head:
            raise went_back(head, start.position)
        if start.position == 0:
            q = ReadQuery.make(head, after_position=0, to_position=to_position,
                               order="position", batch_size=batch_size)
            return map(to_event, chained(self._rows(q, None), start.hash, 0))
        q = ReadQuery.make(head, after_position=start.position - 1, to_position=to_position,
                           order="position", batch_size=batch_size)
        return map(to_event, chained(_holding(self._rows(q, None), start), start.hash,
                                     start.position))

    def stored_hash(self, position: int) -> str | None:
        """The chain hash stored at `position` (the genesis hash at 0), None when the
        journal holds no record there. As stored, not checked: what a verified point or a
        checkpoint is compared with, so that a state folded before an edit of that very
        record can still be used (its content is checked when it is read)."""
        return self._stored_hash(position, self.head(), None)

    def head_holding(self, position: int) -> tuple[int, str | None]:
        """`head()`, and `stored_hash(position)` as of the same moment: what a reader
        that verified the journal up to `position` asks to tell "nothing new" from "the
        same length, another history" (restored from an older copy, then written on up
        to there). One statement on a SQL journal, as `head()` alone is."""
        head = self.head()
        return head, self._stored_hash(position, head, None) if position <= head else None

    def _stored_hash(self, position: int, head: int, tx: Any) -> str | None:
        if position == 0:
            return GENESIS_HASH
        q = ReadQuery.make(head, after_position=position - 1, to_position=position,
                           order="position", batch_size=1)
        for row in self._rows(q, tx):
            return row[8] if row[0] == position else None
        return None

    # -- private parts ---------------------------------------------------------

    def private(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The private parts still held of these event ids, by id (erased ones are absent).

        Each part is checked against the seal its record carries: a part that does not
        match (altered beside the chain) raises ChainBroken at the record's position, so
        nothing altered is ever shown.
        """
        wanted = sorted({i for i in ids if isinstance(i, str) and appending.storable(i)})
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(wanted), _PRIVATE_BATCH):
            for row, salt, text in self._private_of(wanted[start:start + _PRIVATE_BATCH]):
                _check_seal(row[0], load_json(row[7]), salt, text)
                found[row[1]] = load_json(text)
        return found

    def private_parts(self, *, after_position: int = 0, to_position: int | None = None,
                      batch_size: int = 5000) -> Iterator[tuple[int, str, dict[str, Any]]]:
        """Every private part still held, in position order: (position, event id, fields).

        For finding what to erase; not checked against the seals (`private` and
        `verify_chain` do that).
        """
        appending.private_bounds(after_position, to_position, batch_size)
        for position, event_id, _salt, text in self._private_rows(
                after_position, to_position, batch_size):
            yield position, event_id, load_json(text)

    def erase(self, ids: Iterable[str], record: NewEvent) -> Erasure:
        """Erase the private parts of these events, recording the erasure as an event.

        In one transaction: `record` is appended with the ids whose parts were still held
        under `ERASED_KEY` in its payload, and those parts (fields and salt) are deleted.
        The records themselves, their seals and every hash stay: the chain still verifies,
        and `verify_chain` accepts a missing part only when an erasure record names it.
        Ids without a held part (unknown, without one, already erased) are skipped; when
        none is left, nothing is appended (`Erasure(None, ())`): erasing twice is a no-op.
        """
        if isinstance(ids, str):
            raise ValueError("erase takes an iterable of event ids, not a single str")
        wanted = sorted({appending.require_text("event id", i) for i in ids})
        return self._erase_private(wanted, record)

    def head_anchor(self) -> Anchor:
        """The last position and its chain hash: an anchor to keep outside the database.

        Taken from the last stored record. It says what the journal holds now; only
        `verify_chain` says whether that is a whole chain.
        """
        last = self._ends()[1]
        if not isinstance(last.hash, str):
            raise ChainBroken(last.position, f"journal record at position {last.position} "
                              "holds a hash that is not text: it was written outside the "
                              "journal; run `gpu-credits verify`")
        return last

    # -- verifying -------------------------------------------------------------

    def verify(self, anchor: Anchor | tuple[int, str] | str | None = None) -> int | None:
        """The first position whose hash or place in the 1..N sequence is wrong, else None.

        With an anchor (an `Anchor`, a (position, hash) pair, or the text POSITION:HASH
        `gpu-credits head` prints), also the anchored position when the journal no longer
        holds that prefix unchanged (see `verify_chain`).
        """
        return self.verify_chain(anchor=anchor).first_bad_position

    def verify_chain(self, *, anchor: Anchor | tuple[int, str] | str | None = None,
                     progress: Callable[[int, int], None] | None = None) -> ChainReport:
        """Walk the whole chain and say whether it is whole, and where it breaks if not.

        Every hash is recomputed from the stored fields (a stored payload must also
        be canonical JSON), positions must run 1..N without a gap, and the head
        marker must name the last position and its hash. With an anchor
        (position, hash), the journal must also still hold that prefix unchanged:
        not be shorter than the anchor, and recompute exactly the anchored hash at
        its position. A chain rewritten and re-hashed from the start is consistent
        in itself; only an anchor kept outside the database reveals it.

        `progress(done, total)` is called now and then while the chain is walked, with
        `total` the last position (known before the walk starts).
        """
        mark = Anchor.read(anchor) if anchor is not None else None
        (head_pos, head_hash), (last, _) = self._ends()
        q = ReadQuery.make(last, to_position=last, order="position", batch_size=_VERIFY_BATCH)
        prev, done = GENESIS_HASH, 0
        at_anchor: str | None = GENESIS_HASH if mark is not None and mark.position == 0 else None
        rows = chained(self._checked_payloads(self._rows(q, None)), GENESIS_HASH, 0)
        parts = _PrivateCheck(self._private_rows(0, last, _VERIFY_BATCH))
        if progress is not None:
            progress(0, last)
        try:
            for row in rows:
                prev, done = row[8], row[0]
                if mark is not None and done == mark.position:
                    at_anchor = prev
                if parts.next_position <= done or '"$' in row[7]:
                    parts.see(row)
                if progress is not None and done % _VERIFY_BATCH == 0:
                    progress(done, last)
            parts.finish(last, self._erasures_after(last))
        except ChainBroken as exc:
            return ChainReport(False, last, exc.position, str(exc))
        if progress is not None:
            progress(done, last)
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
                    f"{mark.position}: records {last + 1}..{mark.position} were removed, "
                    "or the journal was restored from a copy older than the anchor",
                )
            if at_anchor != mark.hash:
                return ChainReport(
                    False, last, mark.position,
                    f"the journal's chain hash at position {mark.position} is "
                    f"{at_anchor}, the anchor says {mark.hash}: the prefix 1..{mark.position} "
                    "was rewritten since the anchor was taken (or the anchor is of another "
                    "journal)",
                )
        if not isinstance(head_pos, int) or not isinstance(head_hash, str):
            # The journal keeps one head row, written with every append: gone or holding
            # something else, it was edited outside the journal.
            what = "is missing (its row was deleted)" if head_pos is None and \
                head_hash is None else f"is damaged (position {head_pos!r}, hash " \
                f"{'not text' if isinstance(head_hash, bytes) else repr(head_hash)})"
            return ChainReport(
                False, last, max(last, 1),
                f"the journal's head marker {what}: it names the last position and its "
                f"hash, written with every append; the last record is at {last}",
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

    def _erasures_after(self, position: int) -> Iterator[list[str]]:
        """The ids named by erasure records after `position` (appended during a verify)."""
        for rec in self.read(after_position=position, order="position"):
            named = rec.payload.get(ERASED_KEY)
            if isinstance(named, list):
                yield [i for i in named if isinstance(i, str)]

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


_PRIVATE_BATCH = 500
_NOWHERE = 2**63


def _check_seal(position: int, payload: Any, salt: str, text: str) -> None:
    """ChainBroken unless the private part (salt, text) is the one the record's seal names."""
    sealed = payload.get(PRIVATE_KEY) if isinstance(payload, dict) else None
    if sealed is None:
        raise ChainBroken(
            position,
            f"journal record at position {position} has a private part stored beside it but "
            "no seal in its payload: the private part was added outside the journal",
        )
    if seal(salt, text) != sealed:
        raise ChainBroken(
            position,
            f"the private part of the journal record at position {position} does not match "
            "the seal its record carries: it was altered outside the journal",
        )


class _PrivateCheck:
    """Walks the stored private parts beside the chain (both in position order): each part
    must match its record's seal, and a sealed record without its part must be named by an
    erasure record, else ChainBroken at the first position where that fails."""

    def __init__(self, parts: Iterator[tuple[int, str, str, str]]) -> None:
        self._parts = parts
        self._part: tuple[int, str, str, str] | None = None
        self.next_position = _NOWHERE
        self._advance()
        self._missing: list[tuple[int, str]] = []  # (position, id) of sealed, part gone
        self._erased: set[str] = set()

    def _advance(self) -> None:
        self._part = next(self._parts, None)
        self.next_position = self._part[0] if self._part is not None else _NOWHERE

    def see(self, row: StoredRow) -> None:
        """One record, in position order (called for those with a part or a `"$` key)."""
        position = row[0]
        if self.next_position < position:
            self._orphan(self.next_position)
        payload = load_json(row[7]) if '"$' in row[7] else {}
        if self._part is not None and self.next_position == position:
            _check_seal(position, payload, self._part[2], self._part[3])
            self._advance()
        elif PRIVATE_KEY in payload:
            self._missing.append((position, row[1]))
        named = payload.get(ERASED_KEY)
        if isinstance(named, list):
            self._erased.update(i for i in named if isinstance(i, str))

    def _orphan(self, position: int) -> None:
        raise ChainBroken(
            position,
            f"a private part is stored for position {position}, but no record there carries "
            "its seal: it was added outside the journal",
        )

    def finish(self, last: int, later_erasures: Iterator[list[str]]) -> None:
        """After the last record: no part left over, every missing part erased by a record."""
        if self.next_position <= last:
            self._orphan(self.next_position)
        unaccounted = [m for m in self._missing if m[1] not in self._erased]
        if not unaccounted:
            return
        for named in later_erasures:  # an erasure that ran while this verify read
            self._erased.update(named)
        unaccounted = [m for m in unaccounted if m[1] not in self._erased]
        if unaccounted:
            position, event_id = unaccounted[0]
            raise ChainBroken(
                position,
                f"the private part of the journal record at position {position} (event "
                f"{event_id!r}) is gone, and no erasure record names it: it was deleted "
                "outside the journal",
            )


def _holding(rows: Iterable[StoredRow], start: Anchor) -> Iterator[StoredRow]:
    """The rows after `start`, once the first row read, the record at `start`, proves
    the journal still holds it with the trusted hash (stored, as a verified point is
    compared: its content is checked when it is read)."""
    it = iter(rows)
    first = next(it, None)
    if first is None or first[0] != start.position:
        raise ChainBroken(
            start.position,
            f"journal chain broken at position {start.position}: it is missing, and it "
            "was read before: the journal was altered")
    if first[8] != start.hash:
        raise ChainBroken(
            start.position + 1,
            f"the journal's chain hash at position {start.position} is not the one read "
            "there before: the journal was rewritten, or replaced by another copy (a "
            "restore), since; nothing is answered from what it no longer holds",
            moved_under=True)
    yield from it
