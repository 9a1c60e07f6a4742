"""`Transaction.hold_head`: a transaction takes the journal's head before it appends, so
that what it appends next follows the head it was told, whoever else is writing."""

from __future__ import annotations

import pytest
from journal_testkit import ev

from eventstore import Journal, LockTimeout, MemoryJournal


def test_a_held_head_keeps_every_other_append_out_until_the_transaction_ends(
        database_url: str) -> None:
    a, b = Journal(database_url), Journal(database_url, lock_timeout=0.3)
    try:
        a.append([ev("first")])
        with a.transaction() as tx:
            assert tx.hold_head() == 1
            # On PostgreSQL an append takes the head only when it comes: before it, the
            # head read could be overtaken by another writer's commit.
            with pytest.raises(LockTimeout):
                b.append([ev("other")])
            assert tx.append([ev("mine")])[0].position == 2
        assert b.append([ev("other")])[0].position == 3
        assert b.verify() is None
    finally:
        a.close()
        b.close()


def test_a_memory_journal_holds_its_head_under_its_lock() -> None:
    journal = MemoryJournal()
    journal.append([ev("first"), ev("second")])
    with journal.transaction() as tx:
        assert tx.hold_head() == 2
        assert tx.append([ev("third")])[0].position == 3
