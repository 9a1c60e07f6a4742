"""The job queue held by the ledger (`projections.jobqueue`): what it picks survives the
snapshots and checkpoints made of the ledger, which keep the form they had before the queue
had a class of its own."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from projections.events import (
    DEFAULT_HALF_LIFE,
    AccountOpened,
    CreditsGranted,
    DomainEvent,
    JobStarted,
    JobSubmitted,
)
from projections.jobqueue import JobQueue, JobState
from projections.ledger import STATE, Ledger, restore, snapshot

# The ledger's fields as checkpoints saved before the queue had a class list them: a
# checkpoint's header carries this schema, and one that differs is not loaded.
SAVED_LEDGER_FIELDS = ["accounts", "jobs", "live", "heads", "last", "applied", "rejected",
                       "anomalies", "excluded", "reversals", "voids", "policy"]

ACCOUNTS = ("a", "b", "c")


def test_the_ledger_is_encoded_with_its_queue_as_the_heaps_of_heads() -> None:
    assert STATE.schema()["Ledger"] == SAVED_LEDGER_FIELDS
    assert "JobQueue" not in STATE.schema()
    ledger = _ledger([(0, 5, 1, True), (1, 7, 2, False)])
    tree = STATE.encode(ledger)
    # The tree holds the heads where `heads` was: a dict of half-life to a plain list of
    # (key, account), here the default half-life's alone.
    heads = tree[2 + SAVED_LEDGER_FIELDS.index("heads")]
    assert heads[:2] == [2, DEFAULT_HALF_LIFE] and len(heads) == 3
    assert heads[2][0] == 0 and len(heads[2]) == 1 + len(ledger.heads[DEFAULT_HALF_LIFE])


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 30), st.integers(0, 3),
                          st.booleans()), max_size=25))
def test_copies_and_decoded_trees_pick_the_same_next_job(
        steps: list[tuple[int, int, int, bool]]) -> None:
    ledger = _ledger(steps)
    others = [STATE.copy(ledger), STATE.decode(STATE.encode(ledger)), restore(snapshot(ledger))]
    for other in others:
        assert isinstance(other.queue, JobQueue) and other.queue is not ledger.queue
        assert other.heads == ledger.heads
    picked = _picks(ledger)
    for other in others:  # picking from the original left the copies alone
        assert _picks(other) == picked


def _ledger(steps: list[tuple[int, int, int, bool]]) -> Ledger:
    """Accounts with grants, then submits (account, cost, priority), each started at once
    when its flag says so."""
    ledger = Ledger()
    position = 0

    def apply(event: DomainEvent) -> None:
        nonlocal position
        position += 1
        ledger.apply(position, f"e{position}", 1000 + position, event)

    for name in ACCOUNTS:
        apply(AccountOpened(name, max_running=2))
        apply(CreditsGranted(name, 100))
    for i, (account, cost, priority, start) in enumerate(steps):
        apply(JobSubmitted(ACCOUNTS[account], f"j{i}", cost, priority))
        if start:
            job = ledger.next_job(1000 + position)
            if job is not None:
                apply(JobStarted(job.id))
    return ledger


def _picks(ledger: Ledger) -> list[str]:
    """The jobs the queue starts, one after another, until none can (on this ledger)."""
    picked = []
    position, time = ledger.last[1], ledger.last[0]
    while (job := ledger.next_job(time + 1)) is not None:
        position += 1
        time += 1
        ledger.apply(position, f"s{position}", time, JobStarted(job.id))
        picked.append(job.id)
    return picked


def test_a_job_compares_and_shows_itself_as_a_dataclass_did() -> None:
    job = JobState("j", "a", 5, 1, "general", "pending", (10, 3))
    assert job == JobState("j", "a", 5, 1, "general", "pending", (10, 3))
    assert job != JobState("j", "a", 5, 1, "general", "pending", (10, 3), charge=5)
    assert job != ("j", "a", 5, 1, "general", "pending", (10, 3), None)
    assert repr(job) == ("JobState(id='j', account='a', cost=5, priority=1, pool='general', "
                         "state='pending', order=(10, 3), charge=None)")


def test_the_heads_heap_stays_as_small_as_the_accounts_whatever_the_queue() -> None:
    """Each submit of a higher priority than the account's head makes it the new head
    and leaves the old entry stale: however many there were, the heap is compacted to
    about two entries an account (plus a constant), and still picks the right job right
    after a compaction."""
    for submits in range(60, 140):
        ledger = Ledger()
        ledger.apply(1, "open", 1000, AccountOpened("a"))
        ledger.apply(2, "grant", 1000, CreditsGranted("a", 10_000))
        for i in range(submits):
            ledger.apply(3 + i, f"s{i}", 1000, JobSubmitted("a", f"j{i}", 1, i))
        assert sum(map(len, ledger.heads.values())) <= 2 * len(ledger.accounts) + 64 + 1, \
            submits
        job = ledger.next_job(1000)
        assert job is not None and job.id == f"j{submits - 1}", submits
