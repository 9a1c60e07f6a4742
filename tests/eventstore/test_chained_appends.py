"""Appends that chain from what their writer read: a journal restored from an older
copy, then written on by another process up to the position its writer read, holds
another chain hash there, and an append that names the hash it read writes nothing.
The check rides on the head the append reads anyway: no statement of its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from journal_testkit import ev, rehash, replace_rows, stored_rows

from eventstore import ChainBroken, Journal
from eventstore.hashing import GENESIS_HASH


def _rewritten_to_the_same_head(j: Journal) -> tuple[int, str]:
    """The head a writer read, then the journal replaced by another history as long."""
    j.append([ev("a"), ev("b"), ev("c")])
    read = j.head_anchor()
    rows = stored_rows(j)
    replace_rows(j, rehash([rows[0], rows[2], rows[1]]))
    assert j.head() == read.position and j.head_anchor().hash != read.hash
    return read.position, read.hash


def test_append_at_after_another_hash_writes_nothing(database_url: str) -> None:
    with Journal(database_url) as j:
        position, hash_ = _rewritten_to_the_same_head(j)
        with pytest.raises(ChainBroken, match="restored from an older copy") as caught:
            j.append_at([ev("d")], at=position + 1, locks=["k"], after_hash=hash_)
        assert caught.value.position == position + 1
        assert f"position {position}" in str(caught.value)
        assert j.head() == position and j.get("d") is None
        # The hash the journal holds there is the one to chain from.
        now = j.head_anchor().hash
        assert j.append_at([ev("d")], at=position + 1, locks=["k"],
                           after_hash=now)[0].position == position + 1
        assert j.verify() is None


def test_a_transaction_expecting_another_head_writes_nothing(database_url: str) -> None:
    with Journal(database_url) as j:
        position, hash_ = _rewritten_to_the_same_head(j)
        with (pytest.raises(ChainBroken, match="restored from an older copy"),
              j.transaction(["k"]) as tx):
            tx.expect_head(position, hash_)
            tx.append([ev("d")])
        assert j.head() == position and j.get("d") is None
        with j.transaction(["k"]) as tx:
            tx.expect_head(position, j.head_anchor().hash)
            assert tx.append([ev("d")])[0].position == position + 1
        # A head elsewhere than expected is left to the caller's position checks.
        with j.transaction(["k"]) as tx:
            tx.expect_head(position, hash_)
            assert tx.append([ev("e")])[0].position == position + 2
        assert j.verify() is None


def test_head_holding_is_the_head_and_the_hash_stored_there(database_url: str) -> None:
    with Journal(database_url) as j:
        assert j.head_holding(0) == (0, GENESIS_HASH)
        assert j.head_holding(1) == (0, None)
        recorded = j.append([ev("a"), ev("b")])
        assert j.head_holding(1) == (2, recorded[0].hash)
        assert j.head_holding(2) == (2, recorded[1].hash)
        assert j.head_holding(3) == (2, None)


@contextmanager
def _counted() -> Iterator[list[str]]:
    """Every statement the driver sends (each a round trip, or part of one), listed."""
    sent: list[str] = []
    plain = psycopg.Cursor.execute

    def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query))
        return plain(self, query, *args, **kwargs)

    psycopg.Cursor.execute = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = plain  # type: ignore[method-assign]


@pytest.mark.postgres
def test_the_hash_check_sends_no_statement_of_its_own(pg_fresh_url: str) -> None:
    with Journal(pg_fresh_url) as j, j.keeping_connection():
        j.append([ev("a")])
        j.append_at([ev("warm")], at=2, locks=["k"])  # statements prepared
        with _counted() as plain:
            j.append_at([ev("b")], at=3, locks=["k"])
        read = j.head_anchor().hash
        with _counted() as checked:
            j.append_at([ev("c")], at=4, locks=["k"], after_hash=read)
        assert plain and len(checked) == len(plain)
        head = j.head_anchor()
        with _counted() as looked:
            assert j.head_holding(head.position) == (4, head.hash)
        assert len(looked) == 1
        assert j.verify() is None
