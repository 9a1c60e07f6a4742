"""Credits expiring in a window: walking only the top of each heap finds what a scan of
every batch finds."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal
from projections.ledger import Ledger
from projections.replay import fold_canonical
from projections.timeline import ExpiringEntry, expiring_entries
from tests.projections.test_history import arrivals


def scanned(ledger: Ledger, at: int, until: int) -> list[ExpiringEntry]:
    """Every batch of every account looked at: the obviously right answer."""
    return sorted((b.expiry, name, b.pool, b.grant_id, b.amount)
                  for name, state in ledger.accounts.items()
                  for heap in state.book.heaps.values() for b in heap
                  if b.expiry is not None and at < b.expiry <= until and b.amount > 0)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journal=arrivals(), at=st.integers(-1, 26), span=st.integers(0, 26))
def test_the_heap_walk_finds_what_a_full_scan_finds(journal: MemoryJournal, at: int,
                                                     span: int) -> None:
    ledger = fold_canonical(journal)
    assert expiring_entries(ledger, at, at + span) == scanned(ledger, at, at + span)
