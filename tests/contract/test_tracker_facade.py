"""The credit tracker facade as the public contract states it."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import Journal
from projections import GPUCreditTracker


def test_default_journal_is_in_memory_and_account_is_default() -> None:
    t = GPUCreditTracker()
    assert t.grant(100, 0, 10) is None  # type: ignore[func-returns-value]
    assert t.get_balance(0) == 100


def test_credits_are_valid_from_timestamp_until_just_before_expiry() -> None:
    t = GPUCreditTracker()
    t.grant(100, 5, 10)
    assert t.get_balance(4) == 0
    assert t.get_balance(5) == 100
    assert t.get_balance(9) == 100
    assert t.get_balance(10) == 0


def test_earliest_expiry_is_consumed_first_and_debt_is_returned() -> None:
    t = GPUCreditTracker()
    t.grant(100, 0, 20)
    t.grant(50, 0, 10)
    assert t.consume(60, 1) == 0
    # The 50 expiring at 10 went first; 90 of the later batch remain.
    assert t.get_balance(10) == 90
    assert t.consume(100, 11) == 10
    assert t.get_balance(11) == -10


def test_a_later_grant_pays_debt_first_and_only_the_rest_expires() -> None:
    t = GPUCreditTracker()
    assert t.consume(30, 0) == 30
    assert t.get_balance(0) == -30
    t.grant(100, 1, 5)
    assert t.get_balance(1) == 70
    assert t.get_balance(5) == 0


def test_a_grant_swallowed_by_debt_never_expires_anything() -> None:
    t = GPUCreditTracker()
    t.consume(100, 0)
    t.grant(40, 1, 3)
    assert t.get_balance(2) == -60
    assert t.get_balance(3) == -60


@pytest.mark.parametrize("amount", [0, -1, True, 1.5, "3"])
def test_bad_amounts_raise_value_error_and_append_nothing(amount: object) -> None:
    journal = Journal()
    t = GPUCreditTracker(journal, account="a")
    before = journal.head()
    with pytest.raises(ValueError):
        t.grant(amount, 0, 10)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        t.consume(amount, 0)  # type: ignore[arg-type]
    assert journal.head() == before


@pytest.mark.parametrize("expiry", [5, 4])
def test_expiry_not_after_timestamp_is_a_value_error(expiry: int) -> None:
    journal = Journal()
    t = GPUCreditTracker(journal)
    with pytest.raises(ValueError):
        t.grant(10, 5, expiry)
    assert journal.head() == 0


def test_a_late_consume_returns_debt_on_the_corrected_timeline() -> None:
    t = GPUCreditTracker()
    t.grant(100, 0, 10)
    t.grant(50, 20, 30)
    assert t.consume(30, 25) == 0
    # Late: at 12 nothing is active, so all of it is debt right after.
    assert t.consume(40, 12) == 40
    # The grant at 20 paid the debt; the consume at 25 then ate 10 of the last 10.
    assert t.get_balance(25) == -20
    assert t.get_balance(12) == -40
    assert t.get_balance(5) == 100


def test_get_balance_only_sees_events_up_to_t() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 100)
    t.consume(4, 50)
    assert t.get_balance(49) == 10
    assert t.get_balance(50) == 6


def test_reopening_on_the_same_database_gives_the_same_answers(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    t = GPUCreditTracker(url, account="a")
    t.grant(100, 0, 10)
    t.consume(30, 3)
    t.consume(5, 1)
    answers = [t.get_balance(x) for x in range(12)]
    again = GPUCreditTracker(url, account="a")
    assert [again.get_balance(x) for x in range(12)] == answers
    assert GPUCreditTracker(Journal(url), account="b").get_balance(5) == 0


def test_accounts_on_one_journal_are_separate() -> None:
    journal = Journal()
    a = GPUCreditTracker(journal, account="a")
    b = GPUCreditTracker(journal, account="b")
    a.grant(10, 0, 10)
    assert b.get_balance(1) == 0
    assert b.consume(3, 1) == 3
    assert a.get_balance(1) == 10


def test_reopening_gives_the_same_answers_on_every_backend(journal_url: str) -> None:
    if journal_url == "memory":
        pytest.skip("an in-memory journal cannot be reopened")
    t = GPUCreditTracker(journal_url, account="a")
    t.grant(100, 0, 10)
    t.consume(120, 5)
    assert t.consume(5, 2) == 0  # late: placed before the big consume
    answers = [t.get_balance(x) for x in range(12)]
    again = GPUCreditTracker(journal_url, account="a")
    assert [again.get_balance(x) for x in range(12)] == answers
    assert again.get_balance(5) == -25
