"""Account policies over scripted scenarios whose expected results are computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from eventstore import MemoryJournal, NewEvent
from projections import Scheduler
from projections.ledger import refill_due
from projections.queries import explain_job
from projections.replay import replay

HOUR = 3600
DAY = 24 * HOUR
WEEK = 7 * DAY


def _clock(start: int = 1_000) -> tuple[list[int], Scheduler]:
    now = [start]
    return now, Scheduler(clock=lambda: now[0])


def _refilling(rate: int, cap: int, *uses: tuple[str, int, int]) -> MemoryJournal:
    """Account a, refilled `rate` credits an hour up to `cap` from time 0, and the usage
    reports `uses` (id, time, amount), appended with it in one append."""
    journal = MemoryJournal()
    journal.append([
        NewEvent("open", "a", "account", 0, {"account": "a", "refill_rate": rate,
                                              "refill_cap": cap}),
        *(NewEvent(i, "a", "consume", t, {"account": "a", "amount": n}) for i, t, n in uses),
    ])
    return journal


def test_fair_share_prefers_the_account_with_least_decayed_usage_per_share() -> None:
    _now, s = _clock()
    # a has twice b's share. Usage: a is charged 300, b 100, c (no share) 500.
    s.open_account("a", 10_000, share=2)
    s.open_account("b", 10_000, share=1)
    s.open_account("c", 10_000)
    for job, account, cost in [("a0", "a", 300), ("b0", "b", 100), ("c0", "c", 500)]:
        assert s.submit(job, account, cost, priority=0)
        assert s.start_next() is not None
        s.complete(job, True)
    # By hand: a 300/2 = 150 per share, b 100/1 = 100; c has no share so it is never held back.
    # Equal priority, submitted a, b, c: c first, then b (100 < 150), then a.
    for job, account in [("a1", "a"), ("b1", "b"), ("c1", "c")]:
        assert s.submit(job, account, 1, priority=0)
    # A higher priority still wins outright.
    assert s.submit("a2", "a", 1, priority=5)
    order = [s.start_next() for _ in range(4)]
    assert [j.id for j in order if j is not None] == ["a2", "c1", "b1", "a1"]


def _charged(s: Scheduler, account: str, *costs: int) -> None:
    """Run one job per cost on `account` to success: each charges its cost."""
    for n, cost in enumerate(costs):
        job = f"{account}-used-{n}"
        assert s.submit(job, account, cost, priority=0)
        started = s.start_next()
        assert started is not None and started.id == job
        s.complete(job, True)


def test_fair_share_divides_usage_by_the_share() -> None:
    now, s = _clock()
    s.open_account("a", 10_000, share=4)
    s.open_account("b", 10_000, share=1)
    _charged(s, "a", 300)                # 300 / 4 = 75 per share
    _charged(s, "b", 100)                # 100 / 1 = 100 per share
    assert s.submit("b1", "b", 1, priority=0)
    now[0] += 60                         # a1 a minute younger: usage decays alike for both
    assert s.submit("a1", "a", 1, priority=0)
    first = s.start_next()
    assert first is not None and first.id == "a1"   # 75 < 100, though b1 is older


def test_fair_share_counts_every_charge_of_an_account() -> None:
    _now, s = _clock()
    s.open_account("a", 10_000, share=1)
    s.open_account("b", 10_000, share=1)
    _charged(s, "a", 100, 100)           # 200 in all (at the same time: no decay between)
    _charged(s, "b", 150)
    assert s.submit("a1", "a", 1, priority=0)
    assert s.submit("b1", "b", 1, priority=0)
    first = s.start_next()
    assert first is not None and first.id == "b1"   # 150 < 200, though a1 is older


def test_fair_share_usage_decays_with_the_half_life() -> None:
    now, s = _clock()
    s.open_account("a", 10_000, share=1, half_life=DAY)
    s.open_account("b", 10_000, share=1, half_life=DAY)
    s.submit("a0", "a", 400, 0)
    s.start_next()
    s.complete("a0", True)             # a: 400 at t=1000
    now[0] += 2 * DAY
    s.submit("b0", "b", 150, 0)
    s.start_next()
    s.complete("b0", True)             # b: 150 at t=1000+2d; a has decayed to 400/4 = 100
    s.submit("a1", "a", 1, 0)
    s.submit("b1", "b", 1, 0)
    first = s.start_next()
    assert first is not None and first.id == "a1"   # 100 < 150
    ledger = s.ledger()
    assert round(ledger.accounts["a"].decayed_usage(now[0])) == 100
    assert round(ledger.accounts["b"].decayed_usage(now[0])) == 150


def test_refill_accrues_exactly_and_stops_at_the_cap() -> None:
    # 10 credits per hour: by 1.5 h, 15 credits.
    journal = _refilling(10, 25, ("c1", 5400, 4))
    ledger = replay(journal).ledger
    assert ledger.accounts["a"].balance == 11
    # By 1.5 h + 3 h: +30, but the bucket holds at most 25.
    journal.append([NewEvent("c2", "a", "consume", 5400 + 3 * HOUR,
                             {"account": "a", "amount": 1})])
    ledger = replay(journal).ledger
    assert ledger.accounts["a"].balance == 24


def test_refill_in_a_million_small_steps_equals_one_big_step() -> None:
    ledger = replay(_refilling(7, 10**9)).ledger
    account = ledger.accounts["a"]
    total = 0
    for t in range(1, 1_000_001):      # one step per second for a million seconds
        add, carry = refill_due(account, t)
        account.refill_anchor, account.refill_carry = t, carry
        total += add
    assert total == 7 * 1_000_000 // 3600


def test_a_full_bucket_drops_the_part_of_a_credit_accrued_meanwhile() -> None:
    # 1 credit an hour, cap 1: by 1.5 h the bucket is full (1) and the half hour past it
    # is dropped, so the next half hour makes no credit: c2 is owed.
    journal = _refilling(1, 1, ("c1", 5400, 1), ("c2", 7200, 1))
    assert replay(journal).ledger.accounts["a"].balance == -1


def test_refill_pays_debt_first() -> None:
    ledger = replay(_refilling(3600, 100, ("c1", 0, 30), ("c2", 40, 1))).ledger
    # 1 credit per second: 40 by t=40, 30 pay the debt, 10 stay, then 1 is consumed.
    book = ledger.accounts["a"].book
    assert (book.active_total, book.debt_total) == (9, 0)


def test_balance_between_events_counts_what_the_bucket_has_accrued() -> None:
    now, s = _clock(start=0)
    s.open_account("a", 0, refill_rate=60, refill_cap=100)   # one credit a minute
    now[0] = 30 * 60
    assert s.accounts["a"].balance == 30
    now[0] = 10 * HOUR
    assert s.accounts["a"].balance == 100                     # the cap
    from projections import GPUCreditTracker

    t = GPUCreditTracker(s._session.journal, account="a")
    assert t.get_balance(45 * 60) == 45


def _assert_the_older_submit_starts(s: Scheduler, first: tuple[int, int],
                                    second: tuple[int, int], older: str,
                                    **account: Any) -> None:
    """Accounts "first" and "second", each charged `used` on its `share` (the pairs
    `first` and `second`: equal usage per share), one job each, `older`'s submitted
    first: `older`'s starts. `account`: more of `open_account`'s arguments."""
    for name, (used, share) in (("first", first), ("second", second)):
        s.open_account(name, 10_000, share=share, **account)
        _charged(s, name, used)
    younger = "second" if older == "first" else "first"
    assert s.submit(f"{older}-job", older, 1, priority=0)
    assert s.submit(f"{younger}-job", younger, 1, priority=0)
    started = s.start_next()
    assert started is not None and started.id == f"{older}-job"


@pytest.mark.parametrize(("first", "second"), [((6, 3), (2, 1)), ((2, 2), (1, 1)),
                                               ((3, 3), (1, 1)), ((4, 4), (1, 1))])
@pytest.mark.parametrize("older", ["first", "second"])
def test_fair_share_equal_usage_per_share_starts_the_older_submit(
        first: tuple[int, int], second: tuple[int, int], older: str) -> None:
    # Each pair is one usage per share (6/3 = 2/1), but the logarithms of equal ratios can
    # differ in their last bits, one way or the other: rounding, not age, chose the job.
    _now, s = _clock()
    _assert_the_older_submit_starts(s, first, second, older)


@pytest.mark.parametrize(("first", "second"), [((6, 3), (2, 1)), ((9, 3), (3, 1)),
                                               ((10, 5), (2, 1)), ((21, 7), (3, 1))])
@pytest.mark.parametrize("half_life", [60, HOUR, WEEK])
@pytest.mark.parametrize("start", [1_000, 1_700_000_000])
@pytest.mark.parametrize("older", ["first", "second"])
def test_equal_usage_per_share_ties_at_unix_times_and_short_half_lives(
        first: tuple[int, int], second: tuple[int, int], half_life: int, start: int,
        older: str) -> None:
    # Projected back to time 0, a minute's half-life at Unix-scale times scales usage by
    # 2**28,000,000: a float of that size is 3.7e-9 apart from the next one, coarser than
    # the grain equal keys are rounded to, so 9 on a share of 3 and 3 on a share of 1
    # came out as different keys and the younger submit could start first.
    _now, s = _clock(start)
    _assert_the_older_submit_starts(s, first, second, older, half_life=half_life)


@pytest.mark.parametrize("half_life", [60, HOUR, WEEK])
@pytest.mark.parametrize("start", [1_000, 1_700_000_000])
def test_equal_usage_from_charges_half_a_life_apart_ties(half_life: int, start: int) -> None:
    # a charged 2 one half-life before b is charged 1: from then on both have used the
    # same, decayed, so the older submit (a's) starts first.
    now, s = _clock(start)
    s.open_account("a", 10_000, share=1, half_life=half_life)
    s.open_account("b", 10_000, share=1, half_life=half_life)
    _charged(s, "a", 2)
    now[0] += half_life
    _charged(s, "b", 1)
    now[0] += 7
    assert s.submit("a-job", "a", 1, priority=0)
    assert s.submit("b-job", "b", 1, priority=0)
    started = s.start_next()
    assert started is not None and started.id == "a-job"


def test_a_new_half_life_keeps_the_usage_so_far_and_decays_it_from_then_on() -> None:
    # Usage is kept as log2 of sum(charge * 2**(t/H)): read under another H it was scaled
    # out of all proportion (400 charged a minute before read as about 2**16,000).
    now, s = _clock(1_000_000)
    s.open_account("a", 10_000, share=1, half_life=60)
    _charged(s, "a", 400)
    now[0] += 60                                         # one half-life: 200 left
    s.journal.append([NewEvent("a-again", "a", "account", now[0],  # as an import does
                               {"account": "a", "share": 1, "half_life": DAY})])
    assert round(s.ledger().accounts["a"].decayed_usage(now[0])) == 200
    now[0] += DAY
    assert round(s.ledger().accounts["a"].decayed_usage(now[0])) == 100
    assert s.submit("a-more", "a", 50, priority=0)
    assert s.start_next() is not None
    s.complete("a-more", True)
    assert round(s.ledger().accounts["a"].decayed_usage(now[0])) == 150
    # And the queue orders by it: b has used 120 under the default half-life (a week).
    s.open_account("b", 10_000, share=1)
    _charged(s, "b", 120)
    assert s.submit("a1", "a", 1, priority=0)
    assert s.submit("b1", "b", 1, priority=0)
    first = s.start_next()
    assert first is not None and first.id == "b1"        # 120 < 150, though a1 is older


def test_accounts_of_different_half_lives_compare_their_usage_now() -> None:
    # Unix-scale times: projected back to time 0, as each account's key is kept, an
    # hour's half-life scales usage by 2**472,222 and a day's by 2**19,675, so a queue
    # comparing those keys put every job of a after b's, whatever a had used.
    now, s = _clock(1_700_000_000)
    s.open_account("a", 10_000, share=1, half_life=HOUR)
    s.open_account("b", 10_000, share=1, half_life=DAY)
    _charged(s, "a", 10)
    _charged(s, "b", 1000)

    def first(*jobs: tuple[str, str]) -> str:
        for job, account in jobs:
            assert s.submit(job, account, 1, priority=0)
        # `explain` counts the jobs ahead by the same order, at the last event's time.
        ahead = {job: explain_job(s.journal, job).ahead for job, _ in jobs}
        started = s.start_next()
        assert started is not None
        for job, _ in jobs:
            if job != started.id:
                s.cancel(job)
        s.complete(started.id, True)
        assert ahead == {job: int(job != started.id) for job, _ in jobs}
        return started.id

    assert first(("b1", "b"), ("a1", "a")) == "a1"       # 10 < 1,000, though b1 is older
    # a is now at 11, b at 1,000: a charge of 2,000 puts a ahead, but the same time
    # decays it 32-fold in five hours, b's not even 1.2-fold: the order turns with time.
    assert s.submit("a-big", "a", 2000, priority=0)
    assert s.start_next() is not None
    s.complete("a-big", True)
    assert first(("a2", "a"), ("b2", "b")) == "b2"       # 2,011 > 1,000
    now[0] += 5 * HOUR
    assert first(("b3", "b"), ("a3", "a")) == "a3"       # about 63 < 867
    explained = s.ledger()
    assert round(explained.accounts["a"].decayed_usage(now[0])) == 64
    assert round(explained.accounts["b"].decayed_usage(now[0])) == 866
