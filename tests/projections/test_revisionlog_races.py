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


def test_a_page_does_not_wait_for_a_first_pass_another_request_started(
        monkeypatch: Any) -> None:
    """The service's `GET /v1/revisions` may make the shared log's first pass; meanwhile
    the web view's pages say the revisions are still being found, as during their own
    background pass, instead of waiting for the whole replay."""
    import threading

    from projections import revisionlog
    from tools.web import source as source_module
    from tools.web.source import AuditSource

    journal = MemoryJournal()
    journal.append([event("a", "grant", i, f"g{i}", amount=1) for i in range(20)])
    monkeypatch.setattr(source_module, "SYNC_REPLAY_LIMIT", 10)
    entered, gate = threading.Event(), threading.Event()
    read = revisionlog.lean_rows  # type: ignore[attr-defined]

    def slow(*args: Any, **query: Any) -> Any:
        entered.set()
        gate.wait(30)
        yield from read(*args, **query)

    monkeypatch.setattr(revisionlog, "lean_rows", slow)
    log = RevisionLog(journal)
    api = threading.Thread(target=log.revisions)
    api.start()
    try:
        assert entered.wait(30)
        source = AuditSource(journal, revision_log=log)
        answered: list[object] = []
        page = threading.Thread(target=lambda: answered.append(source.revisions()))
        page.start()
        page.join(3)
        assert not page.is_alive() and answered == [None]
    finally:
        gate.set()
        api.join(30)
    assert source.wait_for_revisions(30) == replay(journal).revisions


def test_a_batch_larger_than_held_at_once_is_split_where_replay_splits_it(
        monkeypatch: Any) -> None:
    """An import larger than `BATCH_HELD` is folded a part at a time, each known with the
    parts before it: the log cuts it where `replay` does, so each late event names the
    revisions `gpu-credits revisions` names."""
    from projections import replay as replay_module

    # One constant for both: they cut with the one function.
    monkeypatch.setattr(replay_module, "BATCH_HELD", 300)
    # A journal with a batch that large is too large for `replay` to hold its rows.
    monkeypatch.setattr(replay_module, "HELD_ROWS", 300)
    journal = MemoryJournal()
    journal.append([event("a", "grant", 0, "g", amount=1000),
                    event("a", "consume", 10_000, "before", amount=1)])
    log = RevisionLog(journal)
    assert log.revisions() == []
    # One import of 700 usage reports in time order but for two, late to what was known
    # before it (the report at 10,000): the first after 200 lines, the second after 350.
    lines = [event("a", "consume", 20_000 + i, f"u{i}", amount=1) for i in range(700)]
    lines[200] = event("a", "consume", 5_000, "late1", amount=900)
    lines[350] = event("a", "consume", 6_000, "late2", amount=200)
    journal.append(lines)
    assert log.revisions() == replay(journal).revisions
