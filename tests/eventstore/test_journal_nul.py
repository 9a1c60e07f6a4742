"""NUL characters are refused by the journal on every backend, with a clear error.

PostgreSQL cannot store NUL in text; the memory and SQLite journals refuse it too, so
an event means the same wherever it is stored, and nothing is appended.
"""

from __future__ import annotations

from typing import Any

import pytest
from journal_testkit import ev

from eventstore import JournalLike, NewEvent

NUL = "\x00"


@pytest.mark.parametrize(
    ("event", "where"),
    [
        (NewEvent("a\x00b", "s", "t", 1, {}), "id"),
        (NewEvent("a", "s\x00", "t", 1, {}), "stream"),
        (NewEvent("a", "s", "\x00t", 1, {}), "type"),
        (NewEvent("a", "s", "t", 1, {"memo": "x\x00y"}), "memo"),
        (NewEvent("a", "s", "t", 1, {"deep": [{"k": ["ok", "no\x00"]}]}), "deep"),
        (NewEvent("a", "s", "t", 1, {"key\x00": 1}), "key"),
    ],
    ids=["id", "stream", "type", "payload-value", "payload-deep", "payload-key"],
)
def test_nul_anywhere_in_an_event_is_refused_and_nothing_is_appended(
    journal: JournalLike, event: NewEvent, where: str
) -> None:
    journal.append([ev("before")])
    with pytest.raises(ValueError, match="NUL") as caught:
        journal.append([ev("fine"), event])
    assert where in str(caught.value)
    assert journal.head() == 1


def test_a_backslash_u0000_text_is_not_a_nul(journal: JournalLike) -> None:
    payload: dict[str, Any] = {"memo": "\\u0000 is how JSON writes NUL"}
    journal.append([NewEvent("a", "s", "t", 1, payload)])
    got = journal.get("a")
    assert got is not None and got.payload == payload
    assert journal.verify() is None


def test_lookups_with_nul_find_nothing_instead_of_failing(journal: JournalLike) -> None:
    journal.append([ev("a", stream="s")])
    assert journal.get("a\x00") is None
    assert journal.stream_version("s\x00") == 0
    assert journal.max_time(["s\x00"]) is None
    assert journal.max_time(["s\x00", "s"]) == 0
    with pytest.raises(ValueError, match="NUL"):
        list(journal.read(stream="s\x00"))
    with pytest.raises(ValueError, match="NUL"), journal.transaction(["k\x00"]):
        pass
    with pytest.raises(ValueError, match="NUL"):
        journal.save_snapshot("n\x00", 1, 0, "d", b"")
