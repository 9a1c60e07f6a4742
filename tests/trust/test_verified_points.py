"""Answering commands check the chain only beyond the journal's last verified point (a
mark a writing command records, or a saved checkpoint), and still name the first bad
position; a verified point the journal no longer holds (a re-hashed rewrite, a cut tail)
is itself a finding. `verify` keeps checking every event."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from eventstore import ChainBroken, Journal, NewEvent
from eventstore.hashing import GENESIS_HASH, record_hash_text
from projections import GPUCreditTracker
from projections.anchors import VERIFIED, advance_verified, check_chain, verified_checkpoint
from projections.checkpoint import CHECKPOINT
from projections.replay import replay, verify

EVENTS = 20


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """A stored journal of EVENTS events, never verified."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        url = str(request.getfixturevalue("pg_fresh_url"))
    with Journal(url) as j:
        tracker = GPUCreditTracker(j, account="a")
        for t in range(EVENTS // 2):
            tracker.grant(10, 2 * t, 2 * t + 50)
            tracker.consume(3, 2 * t + 1)
        j.drop_snapshots(CHECKPOINT)
        yield j


def _more(journal: Journal, n: int) -> None:
    head = journal.head()
    journal.append([NewEvent(f"more-{head + i}", "a", "consume", 100 + i,
                             {"account": "a", "amount": 1}) for i in range(n)])


def _sql(journal: Journal, sql: str, **params: object) -> None:
    assert journal.url is not None
    engine = create_engine(journal.url)
    try:
        with engine.begin() as conn:
            conn.execute(text(sql), params)
    finally:
        engine.dispose()


def test_without_a_verified_point_everything_is_checked(journal: Journal) -> None:
    assert verified_checkpoint(journal) is None
    assert check_chain(journal) == EVENTS


def test_a_mark_limits_the_check_to_what_came_after(journal: Journal) -> None:
    mark = advance_verified(journal)
    assert mark == journal.head_anchor() and mark.position == EVENTS
    assert verified_checkpoint(journal) == mark
    assert check_chain(journal) == 0
    _more(journal, 3)
    assert check_chain(journal) == 3
    assert check_chain(journal, full=True) == EVENTS + 3
    assert advance_verified(journal).position == EVENTS + 3
    assert len(journal.snapshots(VERIFIED)) == 1  # the newest mark only
    assert check_chain(journal) == 0


def test_a_checkpoint_is_a_verified_point_too(journal: Journal) -> None:
    replay(journal, checkpoint=True)
    (info,) = journal.snapshots(CHECKPOINT)
    _more(journal, 2)
    point = verified_checkpoint(journal)
    assert point is not None and point.position == info.position == EVENTS
    assert check_chain(journal) == 2


def test_a_break_after_the_verified_point_names_its_position(journal: Journal) -> None:
    advance_verified(journal)
    _more(journal, 3)
    _sql(journal, "UPDATE events SET payload = replace(payload, :a, :b) WHERE position = :p",
         a='"amount":1', b='"amount":9', p=EVENTS + 2)
    with pytest.raises(ChainBroken) as caught:
        check_chain(journal)
    assert caught.value.position == EVENTS + 2


def test_an_edit_before_the_verified_point_is_left_to_verify(journal: Journal) -> None:
    """The trade: the quick check trusts what was verified; `verify` re-checks it all."""
    advance_verified(journal)
    _sql(journal, "UPDATE events SET payload = replace(payload, :a, :b) WHERE position = 2",
         a='"amount":3', b='"amount":1')
    assert check_chain(journal) == 0
    with pytest.raises(ChainBroken) as caught:
        check_chain(journal, full=True)
    assert caught.value.position == 2
    report = verify(journal)
    assert not report.ok and report.first_bad_position == 2


def _rehash_from(journal: Journal, position: int) -> None:
    """Edit the record at `position` and re-hash it and everything after: a whole chain."""
    assert journal.url is not None
    engine = create_engine(journal.url)
    try:
        with engine.begin() as conn:
            rows = conn.execute(text(
                "SELECT position, event_id, stream, version, type, event_time, recorded_at, "
                "payload, hash FROM events ORDER BY position")).all()
            prev = GENESIS_HASH
            for r in rows:
                payload = r[7]
                if r[0] == position:
                    payload = payload.replace('"amount":3', '"amount":1')
                if r[0] >= position:
                    digest = record_hash_text(prev, r[0], r[1], r[2], r[3], r[4], r[5], r[6],
                                              payload)
                    conn.execute(text("UPDATE events SET payload = :pl, hash = :h "
                                      "WHERE position = :p"),
                                 {"pl": payload, "h": digest, "p": r[0]})
                    prev = digest
                else:
                    prev = r[8]
            conn.execute(text("UPDATE journal_head SET hash = :h"), {"h": prev})
    finally:
        engine.dispose()


def test_a_rehashed_rewrite_of_a_verified_prefix_is_refused(journal: Journal) -> None:
    advance_verified(journal)
    _rehash_from(journal, 4)
    assert journal.verify_chain().ok  # consistent on its own
    for full in (False, True):  # a full check asks the verified point too
        with pytest.raises(ChainBroken) as caught:
            check_chain(journal, full=full)
        assert caught.value.position == EVENTS
        assert "re-hashed" in str(caught.value)


def test_a_tail_cut_below_the_verified_point_is_refused(journal: Journal) -> None:
    advance_verified(journal)
    previous = next(r.hash for r in journal.read(order="position") if r.position == EVENTS - 2)
    _sql(journal, "DELETE FROM events WHERE position > :p", p=EVENTS - 2)
    _sql(journal, "UPDATE journal_head SET position = :p, hash = :h", p=EVENTS - 2,
         h=previous)
    with pytest.raises(ChainBroken) as caught:
        check_chain(journal)
    assert caught.value.position == EVENTS - 1
    assert "removed" in str(caught.value)


def test_unreadable_checkpoint_bytes_are_no_verified_point(journal: Journal) -> None:
    journal.save_snapshot(CHECKPOINT, EVENTS, 100, "x", b"not a checkpoint")
    assert verified_checkpoint(journal) is None
    assert check_chain(journal) == EVENTS


def test_a_verified_point_lost_to_an_edit_names_the_first_altered_position(
        journal: Journal) -> None:
    """A tail cut below the verified point, with a record before it edited too: the
    finding is the first position the chain shows altered, not the verified point's."""
    advance_verified(journal)
    previous = next(r.hash for r in journal.read(order="position") if r.position == EVENTS - 2)
    _sql(journal, "UPDATE events SET payload = replace(payload, '10', '90') WHERE position = 3")
    _sql(journal, "DELETE FROM events WHERE position > :p", p=EVENTS - 2)
    _sql(journal, "UPDATE journal_head SET position = :p, hash = :h", p=EVENTS - 2,
         h=previous)
    with pytest.raises(ChainBroken) as caught:
        check_chain(journal)
    assert caught.value.position == 3


def test_a_rewrite_behind_the_newest_verified_point_is_refused_though_older_ones_hold(
        journal: Journal) -> None:
    """Checkpoints before the re-hashed record still match the journal: the newest point
    is the one asked, else a command would check from an older one, through a rewrite
    that is consistent from there on."""
    replay(journal, checkpoint=True, checkpoint_every=5)
    held = sorted(info.position for info in journal.snapshots(CHECKPOINT))
    assert held[0] < 12 < EVENTS == held[-1]
    _more(journal, 3)
    advance_verified(journal)
    _rehash_from(journal, 12)
    with pytest.raises(ChainBroken) as caught:
        check_chain(journal)
    assert caught.value.position == EVENTS + 3
    assert "re-hashed" in str(caught.value)


def test_a_checkpoint_pointed_at_another_position_is_no_verified_point(
        journal: Journal) -> None:
    """Its header still names the position it was built at: read as a claim on the one
    it was moved to, it would call an untouched journal rewritten. Such a checkpoint is
    `verify`'s finding (docs/operations.md); a command checks as if it were absent."""
    replay(journal, checkpoint=True)
    _sql(journal, "UPDATE snapshots SET position = :p WHERE name = :n", p=EVENTS - 5,
         n=CHECKPOINT)
    assert verified_checkpoint(journal) is None
    assert check_chain(journal) == EVENTS
    report = verify(journal)
    assert not report.ok and report.first_bad_position == EVENTS - 5
