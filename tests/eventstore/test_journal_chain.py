"""The chain as a user of the journal relies on it, on every backend: anchors to keep
outside the database, verify against them, and reads that check the chain as they go.

Each attack a forger with database access can make is tried here: one edited record,
a record deleted and the rest renumbered and re-hashed, the newest records removed
with the head marker pointed back. Without an anchor the last two are consistent in
themselves; against an anchor taken before, every one of them fails.
"""

from __future__ import annotations

import pytest
from journal_testkit import ev, rehash, replace_rows, stored_rows, tamper_payload

from eventstore import GENESIS_HASH, Anchor, ChainBroken, JournalLike, MemoryJournal


def filled(journal: JournalLike, n: int = 10) -> JournalLike:
    journal.append([ev(f"e{i}", i, f"s{i % 3}", amount=100 + i) for i in range(1, n + 1)])
    return journal


# -- anchors ------------------------------------------------------------------------


def test_an_empty_journal_is_anchored_at_the_genesis_hash(journal: JournalLike) -> None:
    assert journal.head_anchor() == Anchor(0, GENESIS_HASH)
    assert journal.verify_chain().ok
    assert journal.verify_chain(anchor=Anchor(0, GENESIS_HASH)).ok


def test_the_head_anchor_is_the_last_position_and_its_hash(journal: JournalLike) -> None:
    last = filled(journal).append([ev("last", 99)])[0]
    assert journal.head_anchor() == Anchor(last.position, last.hash)
    report = journal.verify_chain(anchor=journal.head_anchor())
    assert report.ok and report.events == 11 and report.head == journal.head_anchor()
    assert report.first_bad_position is None and report.problem is None


def test_an_anchor_still_holds_after_more_appends(journal: JournalLike) -> None:
    anchor = filled(journal).head_anchor()
    journal.append([ev("later", 50)])
    assert journal.verify(anchor) is None
    assert journal.verify_chain(anchor=(anchor.position, anchor.hash)).ok


def test_an_anchor_reads_and_prints_as_position_colon_hash() -> None:
    anchor = Anchor(12, "ab" * 32)
    assert str(anchor) == f"12:{'ab' * 32}"
    assert Anchor.parse(str(anchor)) == anchor


@pytest.mark.parametrize(
    "text",
    ["", "12", "12:", ":" + "a" * 64, "-1:" + "a" * 64, "1:" + "A" * 64, "1:" + "a" * 63,
     "x:" + "a" * 64, "١:" + "a" * 64],
)
def test_a_malformed_anchor_is_refused_with_the_expected_format(text: str) -> None:
    with pytest.raises(ValueError, match="anchor"):
        Anchor.parse(text)


# -- tampering found against an anchor ----------------------------------------------


def test_one_edited_record_is_found_at_its_position(journal: JournalLike) -> None:
    anchor = filled(journal).head_anchor()
    tamper_payload(journal, 6, lambda s: s.replace("106", "107"))
    report = journal.verify_chain(anchor=anchor)
    assert not report.ok and report.first_bad_position == 6
    assert report.problem is not None and "position 6" in report.problem


def test_a_deleted_record_with_the_chain_rehashed_fails_only_against_an_anchor(
    journal: JournalLike,
) -> None:
    anchor = filled(journal).head_anchor()
    rows = stored_rows(journal)
    replace_rows(journal, rehash(rows[:3] + rows[4:]))  # delete position 4, re-chain the rest
    assert journal.verify_chain().ok  # consistent in itself: nothing else could tell
    report = journal.verify_chain(anchor=anchor)
    assert not report.ok and report.first_bad_position == 10
    assert report.problem is not None and "ends at position 9" in report.problem


def test_a_rewritten_prefix_fails_at_the_anchored_position(journal: JournalLike) -> None:
    filled(journal)
    rows = stored_rows(journal)
    anchor = Anchor(5, rows[4][8])
    edited = (*rows[1][:7], rows[1][7].replace("102", "999"), rows[1][8])
    replace_rows(journal, rehash([rows[0], edited, *rows[2:]]))
    assert journal.verify() is None
    report = journal.verify_chain(anchor=anchor)
    assert not report.ok and report.first_bad_position == 5
    assert report.problem is not None and "rewritten" in report.problem


def test_a_truncated_tail_with_the_head_pointed_back_fails_against_an_anchor(
    journal: JournalLike,
) -> None:
    anchor = filled(journal).head_anchor()
    replace_rows(journal, stored_rows(journal)[:7])
    assert journal.verify() is None  # no re-hash needed for this one
    assert journal.head_anchor().position == 7
    report = journal.verify_chain(anchor=anchor)
    assert not report.ok and report.first_bad_position == 8


def test_a_truncated_tail_behind_the_head_marker_is_found_without_an_anchor(
    journal: JournalLike,
) -> None:
    if isinstance(journal, MemoryJournal):
        pytest.skip("the memory journal has no head marker apart from its records")
    filled(journal)
    replace_rows(journal, stored_rows(journal)[:7], move_head=False)
    report = journal.verify_chain()
    assert not report.ok and report.first_bad_position == 8


def test_an_anchor_from_another_journal_fails(journal: JournalLike) -> None:
    filled(journal)
    assert journal.verify(Anchor(3, "f" * 64)) == 3


# -- reads that check the chain --------------------------------------------------------


def test_a_verified_read_yields_the_same_events_as_a_plain_read(journal: JournalLike) -> None:
    filled(journal, 25)
    plain = list(journal.read(order="position"))
    assert list(journal.read_verified(batch_size=4)) == plain
    mid = plain[9]
    assert list(journal.read_verified((mid.position, mid.hash), batch_size=3)) == plain[10:]
    assert list(journal.read_verified((mid.position, mid.hash), to_position=12)) == plain[10:12]
    assert list(journal.read_verified(journal.head_anchor())) == []


def test_a_verified_read_stops_before_an_altered_event(journal: JournalLike) -> None:
    filled(journal)
    checkpoint = list(journal.read(order="position"))[3]
    tamper_payload(journal, 7, lambda s: s.replace("107", "1070"))
    seen: list[int] = []
    with pytest.raises(ChainBroken, match="position 7") as caught:
        for event in journal.read_verified((checkpoint.position, checkpoint.hash)):
            seen.append(event.position)
    assert caught.value.position == 7
    assert seen == [5, 6]


def test_a_verified_read_from_a_wrong_hash_fails_at_the_first_event(journal: JournalLike) -> None:
    filled(journal)
    with pytest.raises(ChainBroken) as caught:
        list(journal.read_verified((4, "0" * 64)))
    assert caught.value.position == 5


def test_a_verified_read_finds_a_missing_position(journal: JournalLike) -> None:
    filled(journal)
    rows = stored_rows(journal)
    replace_rows(journal, rows[:5] + rows[6:])
    with pytest.raises(ChainBroken, match="position 6") as caught:
        list(journal.read_verified())
    assert caught.value.position == 6
