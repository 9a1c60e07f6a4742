"""How a journal's batches are cut into parts for a fold (`replay` and the revision log)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from projections import replay as replay_module
from projections.replay import LeanRow, batch_parts


@st.composite
def journals(draw: Any) -> tuple[list[LeanRow], dict[int, int], list[bool]]:
    """Rows with gaps in their positions, batches over them (some reaching past a gap or
    past the last row), and which parts the fold refuses."""
    positions = sorted(draw(st.sets(st.integers(1, 400), min_size=1, max_size=120)))
    ends: dict[int, int] = {}
    i = 0
    while i < len(positions):
        length = draw(st.integers(1, 60))
        if length > 1:
            # A batch's last position, possibly one no row holds (a gap at its end).
            ends[positions[i]] = positions[i] + draw(st.integers(0, length * 2))
        i += length
    refusals = draw(st.lists(st.booleans(), max_size=40))
    return [(p, f"e{p}", "grant", p, "{}", "s") for p in positions], ends, refusals


@given(journals(), st.sampled_from([1, 3, 8]), st.sampled_from([5, 16, 1000]))
def test_every_row_goes_over_once_in_order_and_no_part_crosses_a_batch(
        journal: tuple[list[LeanRow], dict[int, int], list[bool]], size: int,
        held: int) -> None:
    rows, ends, refusals = journal
    original = replay_module.BATCH_HELD
    replay_module.BATCH_HELD = held
    try:
        taken: list[tuple[list[int], int, bool]] = []
        offered: list[list[int]] = []
        answers = iter(refusals)

        def hand_over(part: list[LeanRow], begin: int, more: bool) -> bool:
            offered.append([r[0] for r in part])
            if more and not next(answers, True):
                return False
            taken.append(([r[0] for r in part], begin, more))
            return True

        batches = list(batch_parts(iter(rows), ends, hand_over, size=min(size, held)))
    finally:
        replay_module.BATCH_HELD = original
    # Every row exactly once, in position order.
    assert [p for part, _, _ in taken for p in part] == [r[0] for r in rows]
    # Each batch's parts lie inside it and name its first row; the batches yielded cover
    # the parts handed over, with their counts.
    spans = []
    for begin, last, count in batches:
        end = ends.get(begin, begin)
        mine = [(part, more) for part, b, more in taken if b == begin]
        assert all(begin <= p <= min(end, last) for part, _ in mine for p in part)
        assert sum(len(part) for part, _ in mine) == count
        assert mine[-1][0][-1] == last
        spans.append((begin, last))
    assert spans == sorted(spans) and all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    for part, _, more in taken:
        # A part with more to come is at most `size` rows; a refused part goes over again
        # with what follows it, so nothing offered is lost.
        assert not more or len(part) <= size
        assert len(part) <= max(size, held)
    assert all(o for o in offered)
