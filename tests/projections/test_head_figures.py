"""Figures read at times after an account's last event keep what expired since while the
state stays the same (`projections.figures.HeadFigures`): the same figures as
`Figures.of`, at every time, through every kind of change, without walking every batch
expired by then at each read."""

from __future__ import annotations

import random

import pytest

from eventstore import MemoryJournal
from projections import GPUCreditTracker, Scheduler
from projections.creditbook import CreditBook
from projections.figures import Figures, HeadFigures

POOLS = (None, "h100", "a100")


def _check_reads(scheduler: Scheduler, rng: random.Random, names: list[str]) -> None:
    session = scheduler._session
    with session.reading() as ledger:
        for name in names:
            account = ledger.accounts.get(name)
            if account is None:
                continue
            last = max(account.last_time, 0)
            # Repeated, at times before, at and after expiries, and ever later ones.
            times = [last + rng.randint(0, 60) for _ in range(12)]
            times += [*sorted(times), last, 10**12, last + 1]
            for t in times:
                assert session.figures(account, t) == Figures.of(account, t), (name, t)


@pytest.mark.parametrize("seed", range(12))
def test_head_figures_are_the_figures_at_every_time(seed: int) -> None:
    rng = random.Random(seed)
    journal = MemoryJournal()
    clock = [0]
    scheduler = Scheduler(journal, clock=lambda: clock[0])
    names = ["a", "b"]
    trackers = {name: GPUCreditTracker(journal, account=name) for name in names}
    for name in names:
        scheduler.open_account(name, 0, max_running=2)
    jobs: list[str] = []
    for step in range(150):
        clock[0] += rng.randint(0, 3)
        now = clock[0]
        name = rng.choice(names)
        tracker = trackers[name]
        roll = rng.random()
        if roll < 0.35:
            tracker.grant(rng.randint(1, 30), now, now + rng.randint(1, 40),
                          pool=rng.choice(POOLS), priority=rng.choice((50, 50, 10)))
        elif roll < 0.5:
            tracker.consume(rng.randint(1, 40), now, pool=rng.choice(POOLS))
        elif roll < 0.7:
            job = f"j{step}"
            if scheduler.submit(job, name, rng.randint(0, 20), rng.randint(0, 3)):
                jobs.append(job)
        elif roll < 0.8:
            scheduler.start_next()
        elif jobs:
            job = jobs.pop(rng.randrange(len(jobs)))
            state = scheduler.job_state(job)
            if state == "running":
                scheduler.complete(job, rng.random() < 0.7, refund_fraction=0.5)
            elif state == "pending":
                scheduler.cancel(job)
        if step % 10 == 0:
            _check_reads(scheduler, rng, names)
    _check_reads(scheduler, rng, names)


@pytest.mark.pure_python
def test_reads_of_an_unchanged_state_walk_its_expired_batches_only_at_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Each read walked every batch expired since the last event: 100,000 reads after
    # 50,000 grants had expired took 8 ms each.
    tracker = GPUCreditTracker(account="a")
    for i in range(200):
        tracker.grant(1, i, 300 + i % 7)
    walks = 0
    walk = CreditBook.expiring_by

    def counted(book: CreditBook, time: int) -> dict[str, int]:
        nonlocal walks
        walks += 1
        return walk(book, time)

    monkeypatch.setattr(CreditBook, "expiring_by", counted)
    assert [tracker.get_balance(400 + i) for i in range(50)] == [0] * 50
    assert tracker.get_balance(303) == 200 - 116  # i % 7 in 0..3 expired by 303
    assert walks == HeadFigures.WALKS
