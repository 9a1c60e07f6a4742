"""An import that runs while another writer appends counts and reports only its own
events: the head it counts from is taken under the journal's lock, not before it."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

from eventstore import Journal
from projections.importing import ImportResult, import_stream
from projections.queries import import_effects


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


GRANTS = [{"type": "grant", "account": "a", "amount": 10, "time": 100 + i} for i in range(20)]


def _while_another_import_is_uncommitted(url: str, theirs: bytes, ours: bytes
                                         ) -> ImportResult:
    """Import `ours` while another writer has imported `theirs` and not committed yet;
    that writer commits once ours waits for the journal."""
    Journal(url).close()  # the schema, before either writer
    other, mine = Journal(url), Journal(url)
    imported, waiting = threading.Event(), threading.Event()
    done: list[ImportResult] = []

    def the_other() -> None:
        with other.transaction():
            import_stream(other, io.BytesIO(theirs), "theirs.jsonl")
            imported.set()
            waiting.wait(10)

    def ours_() -> None:
        done.append(import_stream(mine, io.BytesIO(ours), "ours.jsonl"))

    try:
        first = threading.Thread(target=the_other)
        first.start()
        assert imported.wait(10)
        second = threading.Thread(target=ours_)
        second.start()
        second.join(0.5)  # it waits for the journal's head (or its write lock)
        waiting.set()
        first.join(10)
        second.join(10)
        assert done, "our import did not finish"
        return done[0]
    finally:
        other.close()
        mine.close()


def test_lines_another_writer_appended_first_count_as_already_present(
        database_url: str) -> None:
    extra = [{"type": "grant", "account": "b", "amount": 1, "time": 200 + i} for i in range(3)]
    result = _while_another_import_is_uncommitted(
        database_url, _jsonl(GRANTS), _jsonl(GRANTS + extra))
    assert (result.appended, result.already_present) == (3, 20)
    assert result.after == 20 and result.latest_before == 119


def test_what_an_import_reports_it_did_leaves_out_the_other_writers_events(
        database_url: str, tmp_path: Path) -> None:
    theirs = _jsonl([*GRANTS, {"type": "consume", "account": "a", "amount": 7, "time": 1},
                     {"type": "start", "job": "ghost", "time": 5}])
    ours = _jsonl([{"type": "grant", "account": "z", "amount": 5, "time": 2000}])
    result = _while_another_import_is_uncommitted(database_url, theirs, ours)
    journal = Journal(database_url)
    try:
        effects = import_effects(journal, after=result.after,
                                 latest_before=result.latest_before, count=result.appended)
    finally:
        journal.close()
    # Theirs held a late usage report and a start of a job never submitted: not ours.
    assert (effects.appended, effects.late, effects.revisions) == (1, 0, 0)
    assert effects.anomalies == []
