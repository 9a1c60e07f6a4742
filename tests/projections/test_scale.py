"""Work that grows with the ledger grows linearly: many pools, grants, accounts, jobs.

Measured in lines run (`tests.linecount`), never in seconds: two sizes, and the larger
may cost at most a little more than its share."""

from __future__ import annotations

from typing import Any

from eventstore import MemoryJournal, NewEvent
from projections.queries import walk
from projections.queries.explain import explain_account
from projections.queries.statement import statement
from tests.linecount import lines_run


def _pools_journal(pools: int) -> MemoryJournal:
    """One account granted in `pools` pools, one grant each, every grant expiring."""
    journal = MemoryJournal()
    journal.append([
        NewEvent(f"g{i}", "a", "grant", i,
                 {"account": "a", "amount": 10, "expiry": 10**6 + i, "pool": f"p{i}"})
        for i in range(pools)])
    return journal


def _walk_lines(pools: int, query: Any) -> int:
    journal = _pools_journal(pools)
    _, lines = lines_run([walk], lambda: query(journal, "a"))
    return lines


def test_a_statement_of_an_account_with_many_pools_walks_each_grant_once() -> None:
    # Each grant's batch is found on its own pool's heap; looking through every pool's
    # heap at every grant made a statement quadratic in the account's pools.
    small, large = _walk_lines(100, statement), _walk_lines(400, statement)
    assert large < 5 * small, (small, large)


def test_an_explanation_of_an_account_with_many_pools_walks_each_grant_once() -> None:
    small, large = _walk_lines(100, explain_account), _walk_lines(400, explain_account)
    assert large < 5 * small, (small, large)
