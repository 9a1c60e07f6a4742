"""The C accelerator of `eventstore.hashing` (`_chain.c`): its definitions are there."""

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .errors import ChainBroken
from .records import PinnedRow, StoredRow

HASHED_WITH: str  # "openssl" (libcrypto's SHA-256) or "hashlib"

def chained(
    rows: Iterable[StoredRow], prev_hash: str, after_position: int, /
) -> Iterator[StoredRow]: ...
def pinned(rows: Iterable[PinnedRow], /) -> Iterator[PinnedRow]: ...
def linked(
    rows: Iterable[StoredRow], hashes: Mapping[int, str], /
) -> Iterator[StoredRow]: ...
def configure(
    reference: Callable[[Iterable[StoredRow], str, int], Iterator[StoredRow]],
    out_of_place: Callable[[int, int], ChainBroken],
    bad_hash: Callable[[int], ChainBroken],
    sha256: Callable[[bytes], Any],
    chain: Callable[..., Iterator[Any]],
    pinned_reference: Callable[[Iterable[PinnedRow]], Iterator[PinnedRow]],
    linked_reference: Callable[[Iterable[StoredRow], Mapping[int, str]], Iterator[StoredRow]],
    /,
) -> None: ...
