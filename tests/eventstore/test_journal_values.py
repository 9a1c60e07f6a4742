"""The values the journal gives out: anchors as users write them down."""

from __future__ import annotations

import pytest

from eventstore import Anchor


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
