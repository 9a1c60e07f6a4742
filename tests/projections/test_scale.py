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


def _consumes_journal(count: int) -> MemoryJournal:
    """One account granted once, then `count` usage reports, one per time unit; the
    report at time 3 is reversed at the very end."""
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 10**6})])
    journal.append([NewEvent(f"c{i}", "a", "consume", i, {"account": "a", "amount": 1})
                    for i in range(1, count + 1)])
    journal.append([NewEvent("r", "a", "reverse", count + 1,
                             {"event": "c3", "reason": "sent twice"})])
    return journal


def _statement_reading(count: int) -> tuple[Any, int]:
    """A statement of times 10 to 20 in a journal of `count` reports, and the events it
    read."""
    journal = _consumes_journal(count)
    read = journal.read
    rows = 0

    def counted(**filters: Any) -> Any:
        nonlocal rows
        for rec in read(**filters):
            rows += 1
            yield rec

    journal.read = counted  # type: ignore[method-assign]
    return statement(journal, "a", from_time=10, to_time=20), rows


def test_a_statement_of_a_short_window_reads_the_account_up_to_its_end_only() -> None:
    # It read every event of the account, those after the window too, to find the
    # reversals among them: a hundred lines of a long-lived account held all of it.
    small, small_rows = _statement_reading(100)
    large, large_rows = _statement_reading(2000)
    assert [(line.event_id, line.balance, line.status) for line in large.lines] == \
        [(line.event_id, line.balance, line.status) for line in small.lines]
    assert large.opening == small.opening
    assert large_rows <= small_rows, (small_rows, large_rows)
    # The reversal recorded after the window still counts in it.
    assert small.opening is not None and small.opening.balance == 10**6 - 8
