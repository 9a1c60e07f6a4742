"""`Journal.append_at` remembers the stream versions its last append left and asks the
database only for the others: every version it gives must be the one a journal that
asks for all of them gives (each stream's events numbered 1, 2, 3... in position order),
whoever else appended in between."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from journal_testkit import empty_the_journal, ev

from eventstore import Journal, VersionConflict
from eventstore.hashing import GENESIS_HASH

STREAMS = st.lists(st.sampled_from(["s", "t", "u", "v"]), min_size=1, max_size=4)
# (how, which journal, the streams of the batch's events): "at" is append_at at the head,
# "stale" append_at one position behind it (refused), "plain" an ordinary append.
OPS = st.lists(st.tuples(st.sampled_from(["at", "at", "stale", "plain"]),
                         st.integers(0, 1), STREAMS), min_size=1, max_size=12)


def _check(journals: tuple[Journal, Journal], ops: list[tuple[str, int, list[str]]]) -> None:
    counts: dict[str, int] = {}  # the model: events per stream so far
    for n, (how, which, streams) in enumerate(ops):
        journal = journals[which]
        events = [ev(f"e{n}-{i}", stream=s) for i, s in enumerate(streams)]
        head = journal.head()
        if how == "plain":
            recorded = journal.append(events)
        elif how == "stale":
            if head == 0:
                continue
            with pytest.raises(VersionConflict):
                journal.append_at(events, at=head, locks=sorted(set(streams)))
            continue
        else:
            recorded = journal.append_at(events, at=head + 1, locks=sorted(set(streams)))
        expected = []
        for s in streams:
            counts[s] = counts.get(s, 0) + 1
            expected.append(counts[s])
        assert [r.version for r in recorded] == expected
    everything = list(journals[0].read(order="position"))
    for stream, count in counts.items():
        assert [r.version for r in everything if r.stream == stream] == list(
            range(1, count + 1))
    assert journals[0].verify() is None


@contextmanager
def _two(url: str) -> Iterator[tuple[Journal, Journal]]:
    with Journal(url) as first, Journal(url) as second:
        yield first, second


@settings(max_examples=20, deadline=None)
@given(OPS)
def test_sqlite_versions_match_the_count(ops: list[tuple[str, int, list[str]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, _two(f"sqlite:///{Path(tmp) / 'j.db'}") as two:
        _check(two, ops)


@pytest.mark.postgres
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_postgres_versions_match_the_count(pg_url: str,
                                           ops: list[tuple[str, int, list[str]]]) -> None:
    with _two(pg_url) as two:
        # One schema for the session: empty it for each example (new journals each
        # time, so nothing is remembered from the one before).
        empty_the_journal(two[0])
        _check(two, ops)


def test_a_journal_moved_back_to_the_noted_head_is_asked_again(database_url: str) -> None:
    """Versions are noted at a head (position and hash): another chain at the same
    position is asked again."""
    with Journal(database_url) as journal, Journal(database_url) as other:
        journal.append_at([ev("a", stream="s")], at=1, locks=["s"])
        # Noted: s at 1, head 1. Now another event at position 1 (another hash), on
        # another stream: s is at 0 there.
        with other._engine.begin() as conn:
            from sqlalchemy import text

            conn.execute(text("DELETE FROM batches"))
            conn.execute(text("DELETE FROM events"))
            conn.execute(text("UPDATE journal_head SET position = 0, hash = :h"),
                         {"h": GENESIS_HASH})
        other.append([ev("b", stream="t")])
        recorded = journal.append_at([ev("c", stream="s")], at=2, locks=["s"])
        assert [r.version for r in recorded] == [1]
