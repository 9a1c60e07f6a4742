"""The journal's public promises: in-memory default and idempotency by id."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from eventstore import IdempotencyConflict, Journal, NewEvent


def test_journal_without_url_is_in_memory_and_starts_empty() -> None:
    j = Journal()
    assert j.url is None
    assert j.head() == 0
    assert Journal().head() == 0


def test_same_id_same_content_appends_nothing() -> None:
    j = Journal()
    e = NewEvent("e1", "s", "t", 1, {"x": 1})
    first = j.append([e])
    again = j.append([e])
    assert j.head() == 1
    assert [r.position for r in again] == [r.position for r in first] == [1]


def test_same_id_other_content_is_an_error_and_appends_nothing() -> None:
    j = Journal()
    j.append([NewEvent("e1", "s", "t", 1, {"x": 1})])
    with pytest.raises(IdempotencyConflict):
        j.append([NewEvent("e2", "s", "t", 1, {}), NewEvent("e1", "s", "t", 1, {"x": 2})])
    assert j.head() == 1


def test_positions_are_gapless_from_one() -> None:
    j = Journal()
    recs = j.append([NewEvent(f"e{i}", "s", "t", 5 - i, {}) for i in range(3)])
    assert [r.position for r in recs] == [1, 2, 3]


def test_journal_of_none_is_a_memory_journal_of_its_own() -> None:
    first, second = Journal(None), Journal(None)
    assert first.url is None
    first.append([NewEvent("e1", "s", "t", 1, {})])
    assert (first.head(), second.head()) == (1, 0)


def test_same_id_on_a_database_file_is_idempotent_across_openings(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    event = NewEvent("e1", "s", "t", 1, {"x": 1})
    with closing(Journal(url)) as first:
        first.append([event])
    with closing(Journal(url)) as again:
        assert [r.position for r in again.append([event])] == [1]
        with pytest.raises(IdempotencyConflict):
            again.append([NewEvent("e1", "s", "t", 1, {"x": 2})])
        assert again.head() == 1


def test_journal_url_keyword_creates_the_schema_through_alembic(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "fresh.db"
    with closing(Journal(url=f"sqlite:///{path}")) as journal:
        assert journal.head() == 0
    conn = sqlite3.connect(path)
    try:
        versions = conn.execute("SELECT version_num FROM alembic_version").fetchall()
    finally:
        conn.close()
    assert len(versions) == 1 and versions[0][0]
