"""A `RevisionLog` catching up while a batch is being appended: the events appended
together are one step of knowledge whenever the log reads them, as `replay` takes them."""

from __future__ import annotations

from typing import Any

from eventstore import MemoryJournal, NewEvent
from projections.replay import replay
from projections.revisionlog import RevisionLog


def event(stream: str, type_: str, time: int, event_id: str, **payload: Any) -> NewEvent:
    return NewEvent(stream=stream, type=type_, time=time, id=event_id,
                    payload={"account": stream, **payload})


def test_a_batch_appended_while_the_log_looks_up_the_batches_is_one_step() -> None:
    journal = MemoryJournal()
    journal.append([event("a", "grant", 0, "g", amount=10)])
    log = RevisionLog(journal)
    assert log.revisions() == []
    # A usage report, and one earlier on the timeline, appended together: the earlier one
    # is late only to what was known before the batch, not to its batch-mate.
    batch = [event("a", "consume", 100, "u1", amount=8),
             event("a", "consume", 50, "u0", amount=8)]
    batches = journal.batches

    def racing(**query: Any) -> Any:
        found = batches(**query)
        if batch:
            journal.append(list(batch))  # lands after the batches were looked up
            batch.clear()
        return found

    journal.batches = racing  # type: ignore[method-assign]
    assert log.revisions() == replay(journal).revisions == []
