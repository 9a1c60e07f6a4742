"""What a read asks for, validated once for every backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

from .appending import require_int, require_text

#: The orders `read` knows: canonical = (event_time, position); position = arrival.
Order = Literal["canonical", "position"]


@dataclass(frozen=True, slots=True)
class ReadQuery:
    """The filters of one read; `to_position` is fixed when the read starts.

    after_position and after are exclusive, to_position, from_time and to_time
    inclusive. `after=(t, p)` keeps events whose (event_time, position) > (t, p).
    """

    after_position: int
    to_position: int  # the head when the read began, if the caller gave none
    from_time: int | None
    to_time: int | None
    stream: str | None
    after: tuple[int, int] | None
    order: Order
    batch_size: int
    head: int  # the journal's last position when the read began
    type: str | None = None  # only events of this type

    @classmethod
    def make(
        cls,
        head: int,
        *,
        after_position: int = 0,
        to_position: int | None = None,
        from_time: int | None = None,
        to_time: int | None = None,
        stream: str | None = None,
        after: tuple[int, int] | None = None,
        order: Order = "canonical",
        batch_size: int = 5000,
        type: str | None = None,
    ) -> ReadQuery:
        """Validate read arguments (ValueError) and pin to_position to what is known now.

        The defaults are `read()`'s: a read that names no filter reads everything.

        Pinning makes a long read a consistent view of the journal as it stood when
        the read began, even though it fetches in batches, each in its own short
        transaction: positions up to the head are immutable.
        """
        require_int("after_position", after_position)
        if to_position is not None:
            require_int("to_position", to_position)
        if from_time is not None:
            require_int("from_time", from_time)
        if to_time is not None:
            require_int("to_time", to_time)
        if stream is not None:
            require_text("stream", stream)
        if type is not None:
            require_text("type", type)
        if after is not None:
            if not isinstance(after, tuple) or len(after) != 2:
                raise ValueError(f"after must be a tuple (event_time, position), got {after!r}")
            after = (
                require_int("after[0] (event_time)", after[0]),
                require_int("after[1] (position)", after[1]),
            )
        if order != "canonical" and order != "position":
            raise ValueError(f"order must be 'canonical' or 'position', got {order!r}")
        if require_int("batch_size", batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        bound = head if to_position is None else min(to_position, head)
        return cls(
            after_position, bound, from_time, to_time, stream, after, order, batch_size, head,
            type,
        )

    @property
    def narrow(self) -> bool:
        """Whether the position window is a small part of the journal.

        Then walking the positions and sorting them is cheaper than walking the
        whole canonical index; otherwise the position bounds must not tempt the
        planner away from the (event_time, position) index.
        """
        return (self.to_position - self.after_position) * 4 < self.head

    @property
    def contiguous(self) -> bool:
        """Whether the read selects every position in (after_position, to_position]:
        no filter but the position window. Then each row's predecessor is a row of the
        same read (or, for the first, the record at after_position)."""
        return (self.from_time is None and self.to_time is None and self.stream is None
                and self.after is None and self.type is None)

    @property
    def empty(self) -> bool:
        """Whether no event can match (so no query is needed)."""
        if self.to_position <= self.after_position:
            return True
        return (
            self.from_time is not None
            and self.to_time is not None
            and self.from_time > self.to_time
        )


class ReadFilters(TypedDict, total=False):
    """The filters `read()` and `read_lean()` take, by name; what is left out takes
    `ReadQuery.make`'s default. `stream`: one stream's events (a late event's per-account
    refold reads its account's so), else every stream's (a fold's)."""

    after_position: int
    to_position: int | None
    from_time: int | None
    to_time: int | None
    after: tuple[int, int] | None
    order: Order
    batch_size: int
    type: str | None
    stream: str | None
