"""An account's revisions on the web view when the journal grows between finding the
revisions and naming their accounts: the answer remembered for the new head is never
one made from the revisions found before it."""

from __future__ import annotations

from typing import Any

from eventstore import MemoryJournal, NewEvent
from projections.replay import replay
from tools.web.pages import account_revisions
from tools.web.source import AuditSource


def event(type_: str, time: int, event_id: str, **payload: Any) -> NewEvent:
    return NewEvent(stream="a", type=type_, time=time, id=event_id,
                    payload={"account": "a", **payload})


def test_revisions_found_before_a_write_are_not_remembered_for_the_head_after_it() -> None:
    journal = MemoryJournal()
    journal.append([event("grant", 0, "g", amount=10),
                    event("consume", 100, "u1", amount=8)])
    journal.append([event("consume", 50, "u0", amount=8)])  # late: revises u1
    source = AuditSource(journal)
    found = source.revisions

    def then_a_write() -> Any:
        revisions = found()
        if journal.head() == 3:  # a late report lands right after they were found
            journal.append([event("consume", 60, "u00", amount=1)])  # revises u1 again
        return revisions

    source.revisions = then_a_write  # type: ignore[method-assign]
    assert [r.revision.late_event_id for r in account_revisions(source, "a") or []] == ["u0"]
    source.revisions = found  # type: ignore[method-assign]
    rows = account_revisions(source, "a")
    assert rows is not None
    assert [r.revision for r in rows] == replay(journal).revisions
    assert [r.revision.late_event_id for r in rows] == ["u0", "u00"]


def test_the_latest_revisions_are_those_counted() -> None:
    from tools.web.pages import recent_revisions

    journal = MemoryJournal()
    journal.append([event("grant", 0, "g", amount=10),
                    event("consume", 100, "u1", amount=8)])
    journal.append([event("consume", 50, "u0", amount=8)])
    source = AuditSource(journal)
    found = source.revisions

    def then_a_write() -> Any:
        revisions = found()
        if journal.head() == 3:
            journal.append([event("consume", 60, "u00", amount=1)])
        return revisions

    source.revisions = then_a_write  # type: ignore[method-assign]
    assert recent_revisions(source)[1] == 1
    source.revisions = found  # type: ignore[method-assign]
    rows, total = recent_revisions(source)
    assert total == 2 and rows is not None and len(rows) == 2


def _head_calls_for_a_page(revising: int) -> int:
    """How often the journal's head is asked while an account's revisions are found, with
    `revising` late reports each revising the account's usage."""
    journal = MemoryJournal()
    journal.append([event("grant", 0, "g", amount=8),
                    event("consume", 100, "u1", amount=8)])
    for i in range(revising):
        journal.append([event("consume", 99 - i, f"late-{i}", amount=1)])
    source = AuditSource(journal)
    assert len(source.revisions() or []) >= revising
    asked = 0
    head = journal.head

    def counting() -> int:
        nonlocal asked
        asked += 1
        return head()

    journal.head = counting  # type: ignore[method-assign]
    rows = account_revisions(source, "a")
    assert rows is not None and len(rows) >= revising
    return asked


def test_an_accounts_revisions_ask_the_head_as_often_however_many_there_are() -> None:
    # Each ask is a round trip to the database, and an account page of a service that
    # has run for a while lists thousands of revisions.
    assert _head_calls_for_a_page(40) == _head_calls_for_a_page(2)


def test_the_summary_shows_its_figures_at_a_time_the_ledger_has_reached() -> None:
    """The summary's time is read (and remembered) before its accounts' figures are: an
    event appended in between is in the figures, so the page says their later time, not
    a time before the account's last event (a balance that counted usage made after it)."""
    from tools.web import pages

    journal = MemoryJournal()
    journal.append([event("grant", 0, "g", amount=10, expiry=150),
                    event("consume", 100, "u1", amount=3)])
    source = AuditSource(journal)
    figures = pages.summary_figures

    def then_a_write(source: AuditSource) -> Any:
        found = figures(source)
        if journal.head() == 2:  # past the grant's expiry: 7 expire, 2 become debt
            journal.append([event("consume", 200, "u2", amount=2)])
        return found

    pages.summary_figures = then_a_write  # type: ignore[assignment]
    try:
        page = pages.summary(source, {})
    finally:
        pages.summary_figures = figures  # type: ignore[assignment]
    (row,) = page["accounts"]
    assert page["at"] == 200
    assert (row.figures.balance, row.figures.debt) == (-2, 2)
