"""Following one account through a fold: expiries found from an index, as a full scan finds them."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings

from projections.queries.walk import AccountWalk, expired_batches
from tests.replay.test_replay import _journal, histories


@settings(max_examples=60, deadline=None)
@given(histories())
def test_the_walk_reports_every_expired_batch_a_full_scan_finds(events: list[Any]) -> None:
    journal = _journal(sorted(events, key=lambda e: e[2]))
    for account in ("a", "b"):
        walk = AccountWalk(account)
        reported: set[int] = set()
        for rec in journal.read(order="canonical"):
            state = walk.state
            # What a scan of the whole book says expired by now, and not yet reported.
            want = [] if state is None else [
                (b.grant_id, b.amount) for b in expired_batches(state.book, rec.time)
                if id(b) not in walk.announced]
            step = walk.apply(rec)
            if step is not None:
                assert [(e.grant_id, e.amount) for e in step.expired] == want
                reported.update(id(b) for b in walk.announced.values())
