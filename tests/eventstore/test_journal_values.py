"""The values the journal gives out: anchors as users write them down."""

from __future__ import annotations

import pytest

from eventstore import Anchor, MemoryJournal, NewEvent


def test_an_anchor_reads_and_prints_as_position_colon_hash() -> None:
    anchor = Anchor(12, "ab" * 32)
    assert str(anchor) == f"12:{'ab' * 32}"
    assert Anchor.parse(str(anchor)) == anchor
    assert Anchor.parse(f" {anchor}\n") == anchor  # as pasted from a file


@pytest.mark.parametrize(
    "text",
    ["", "12", "12:", ":" + "a" * 64, "-1:" + "a" * 64, "1:" + "A" * 64, "1:" + "a" * 63,
     "1:" + "a" * 65, "x:" + "a" * 64, "١:" + "a" * 64],
)
def test_a_malformed_anchor_is_refused_with_the_expected_format(text: str) -> None:
    with pytest.raises(ValueError, match="anchor"):
        Anchor.parse(text)


@pytest.mark.parametrize(("anchor", "message"), [
    ("5:ab", "anchor hash must be 64 lowercase hex digits (a SHA-256), got 'ab'"),
    ((5,), "an anchor is an Anchor, a (position, hash) pair or the text POSITION:HASH, "
           "got (5,)"),
    (5, "an anchor is an Anchor, a (position, hash) pair or the text POSITION:HASH, got 5"),
])
def test_verify_names_an_anchor_it_cannot_read(anchor: object, message: str) -> None:
    """Not a TypeError about `Anchor.of()`'s arguments."""
    journal = MemoryJournal()
    with pytest.raises(ValueError) as refused:
        journal.verify(anchor=anchor)  # type: ignore[arg-type]
    assert str(refused.value).startswith(message)


def test_verify_takes_an_anchor_as_written_down() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("e", "s", "note", 1, {})])
    assert journal.verify(anchor=str(journal.head_anchor())) is None


@pytest.mark.parametrize(("value", "shown"), [
    (10**400, "an integer of 1329 bits"), (2**63, "9223372036854775808"),
], ids=["huge", "2**63"])
def test_an_event_time_too_large_is_shown_shortened(value: int, shown: str) -> None:
    journal = MemoryJournal()
    with pytest.raises(ValueError) as refused:
        journal.append([NewEvent("e", "s", "note", value, {})])
    assert str(refused.value) == f"event 'e' time must fit in 64 bits, got {shown}"
    assert journal.head() == 0
