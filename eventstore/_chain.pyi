"""The C accelerator of `eventstore.hashing` (`_chain.c`): its definitions are there."""

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .errors import ChainBroken
from .records import StoredRow

def chained(
    rows: Iterable[StoredRow], prev_hash: str, after_position: int, /
) -> Iterator[StoredRow]: ...
def record_hash(prev_hash: str, row: StoredRow, /) -> str | None: ...
def configure(
    reference: Callable[[Iterable[StoredRow], str, int], Iterator[StoredRow]],
    out_of_place: Callable[[int, int], ChainBroken],
    bad_hash: Callable[[int], ChainBroken],
    sha256: Callable[[bytes], Any],
    chain: Callable[..., Iterator[Any]],
    /,
) -> None: ...
