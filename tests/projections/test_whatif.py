"""What-if folds: what a policy changes, and what it names that the journal lacks."""

from __future__ import annotations

from typing import Any

import pytest

from eventstore import MemoryJournal, NewEvent
from projections.policy import Policy
from projections.queries import whatif


def test_a_policy_capping_an_account_the_journal_lacks_names_it() -> None:
    journal = _journal(NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 10}))
    result = whatif(journal, Policy.from_json({"max_running": {"a": 1, "nobody": 1}}))
    assert result.unknown_accounts == ["nobody"]
    assert not result.changed
    assert whatif(journal, Policy.from_json({"max_running": {"a": 1}})).unknown_accounts == []


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 10_000])
def test_a_policy_capping_a_name_no_account_can_have_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="an account of max_running"):
        Policy.from_json({"max_running": {name: 1}})


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Policy(refund_fraction=2), "refund_fraction must be in [0, 1], got 2"),
    (lambda: Policy(grant_order="newest"),
     "grant_order must be one of priority, expiry, got 'newest'"),
    (lambda: Policy(max_running={"a": 0}), "max_running['a'] must be a positive integer, got 0"),
    (lambda: Policy(max_running=[("a", 1)]),
     "max_running must be an object of account to cap, got [('a', 1)]"),
])
def test_a_policy_made_in_python_is_checked_as_one_read_from_a_file(
        make: Any, message: str) -> None:
    """Validation lives with the value: not only `from_json` refuses a bad policy."""
    with pytest.raises(ValueError) as refused:
        make()
    assert str(refused.value) == message


@pytest.mark.parametrize("policy", [{"grant_order": "expiry"}, None])
def test_whatif_names_a_policy_that_is_not_one(policy: object) -> None:
    journal = _journal(NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 10}))
    with pytest.raises(TypeError, match=r"^policy must be a projections.policy.Policy "
                                        r"\(Policy.from_json\(data\) reads a policy "
                                        r"file's JSON\), got "):
        whatif(journal, policy)  # type: ignore[arg-type]


def _journal(*events: NewEvent) -> MemoryJournal:
    """A memory journal holding `events`, appended together."""
    journal = MemoryJournal()
    journal.append(list(events))
    return journal


def _two_jobs_started(*more: NewEvent) -> MemoryJournal:
    """Account a with 100 credits starts j0 (cost 10), then j1 (cost 30), then `more`."""
    return _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 100}),
        NewEvent("s0", "a", "submit", 1, {"account": "a", "job": "j0", "cost": 10,
                                          "priority": 1}),
        NewEvent("t0", "job:j0", "start", 2, {"job": "j0"}),
        NewEvent("s1", "a", "submit", 3, {"account": "a", "job": "j1", "cost": 30,
                                          "priority": 1}),
        NewEvent("t1", "job:j1", "start", 4, {"job": "j1"}),
        *more)


def test_an_account_whose_reserved_credits_alone_differ_is_listed() -> None:
    # Under a cap of one running job the second start is an anomaly, so the job is still
    # pending when the cancel comes and the cancel releases its credits; as recorded the
    # job runs and the cancel is the anomaly. The balance, debt and pools agree both
    # ways (held credits count in the balance): only reserved and available differ.
    journal = _two_jobs_started(NewEvent("c1", "job:j1", "cancel", 5, {"job": "j1"}))
    result = whatif(journal, Policy.from_json({"max_running": {"a": 1}}))
    (change,) = result.accounts
    assert change.account == "a" and change.pools() == []
    assert change.difference == {"balance": 0, "reserved": -30, "available": 30, "debt": 0}
    assert [(j.job, j.actual_state, j.whatif_state) for j in result.jobs] == [
        ("j1", "running", "cancelled")]


def test_an_account_whose_pools_alone_differ_is_listed() -> None:
    # A consume in h100 draws the general grant first by its priority; ignoring
    # priorities, the h100 grant first (pool credits before general on an equal expiry).
    # The balance is 70 both ways; only the pools say where the credits are.
    journal = _journal(
        NewEvent("gp", "a", "grant", 0, {"account": "a", "amount": 50, "pool": "h100",
                                         "priority": 90}),
        NewEvent("gg", "a", "grant", 0, {"account": "a", "amount": 50, "priority": 10}),
        NewEvent("u", "a", "consume", 1, {"account": "a", "amount": 30, "pool": "h100"}))
    result = whatif(journal, Policy.from_json({"grant_order": "expiry"}))
    (change,) = result.accounts
    assert change.difference == {"balance": 0, "reserved": 0, "available": 0, "debt": 0}
    assert change.pool_changes == [
        {"pool": "general", "actual": 20, "whatif": 50, "difference": 30},
        {"pool": "h100", "actual": 50, "whatif": 20, "difference": -30}]
    assert result.changed and result.jobs == []


def test_a_reversed_event_takes_no_part_in_the_policy_fold_either() -> None:
    journal = _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 100}),
        NewEvent("u", "a", "consume", 1, {"account": "a", "amount": 30}),
        NewEvent("r", "a", "reverse", 2, {"event": "u", "reason": "billed twice"}))
    result = whatif(journal, Policy.from_json({"refund_fraction": 0}))
    assert not result.changed
    assert result.totals["balance"] == (100, 100)
    # As known before the reversal, the consume counts both ways.
    before = whatif(journal, Policy.from_json({"refund_fraction": 0}), as_known_at=2)
    assert not before.changed and before.totals["balance"] == (70, 70)


def test_an_account_whose_debt_alone_differs_is_listed() -> None:
    # The h100 job holds the general grant by its priority, the h100 grant ignoring
    # priorities; a general consume then owes 15 in the one fold, 5 in the other. The
    # pools (credits, held ones too, minus debt), the balance and reserved agree.
    journal = _journal(
        NewEvent("gh", "a", "grant", 0, {"account": "a", "amount": 10, "pool": "h100",
                                         "priority": 90}),
        NewEvent("gg", "a", "grant", 0, {"account": "a", "amount": 10, "priority": 10}),
        NewEvent("s", "a", "submit", 1, {"account": "a", "job": "j", "cost": 10,
                                         "priority": 1, "pool": "h100"}),
        NewEvent("u", "a", "consume", 2, {"account": "a", "amount": 15}))
    result = whatif(journal, Policy.from_json({"grant_order": "expiry"}))
    (change,) = result.accounts
    assert change.pools() == []
    assert change.difference == {"balance": 0, "reserved": 0, "available": 0, "debt": -10}
    assert result.totals["debt"] == (15, 5) and result.jobs == []


def test_the_totals_count_both_folds() -> None:
    # Charged in full under the policy, the failed job leaves too little for the next
    # submit: rejected, its start an anomaly, and the consume owes more.
    journal = _journal(
        NewEvent("g", "a", "grant", 0, {"account": "a", "amount": 100}),
        NewEvent("s1", "a", "submit", 1, {"account": "a", "job": "j1", "cost": 60,
                                          "priority": 1}),
        NewEvent("t1", "job:j1", "start", 2, {"job": "j1"}),
        NewEvent("c1", "job:j1", "complete", 3, {"job": "j1", "success": False,
                                                 "refund_fraction": 1.0}),
        NewEvent("s2", "a", "submit", 4, {"account": "a", "job": "j2", "cost": 50,
                                          "priority": 1}),
        NewEvent("t2", "job:j2", "start", 5, {"job": "j2"}),
        NewEvent("u", "a", "consume", 6, {"account": "a", "amount": 70}))
    result = whatif(journal, Policy.from_json({"refund_fraction": 0}))
    assert result.total_changes == {
        "balance": {"actual": 30, "whatif": -30, "difference": -60},
        "debt": {"actual": 20, "whatif": 30, "difference": 10},
        "charged": {"actual": 0, "whatif": 60, "difference": 60},
        "rejected": {"actual": 0, "whatif": 1, "difference": 1},
        "anomalies": {"actual": 0, "whatif": 1, "difference": 1}}
    assert [(j.job, j.actual, j.whatif) for j in result.jobs] == [
        ("j1", {"state": "failed", "charged": 0}, {"state": "failed", "charged": 60}),
        ("j2", {"state": "running", "charged": None}, {"state": "rejected", "charged": None})]


def test_a_job_that_alone_differs_is_a_change() -> None:
    # Capped at one running job, the second start is an anomaly: the job stays pending,
    # holding what it held running, so no account's figures differ.
    journal = _two_jobs_started()
    result = whatif(journal, Policy.from_json({"max_running": {"a": 1}}))
    assert result.accounts == []
    assert [(j.job, j.actual_state, j.whatif_state) for j in result.jobs] == [
        ("j1", "running", "pending")]
    assert result.changed


def test_figures_compare_at_the_journals_latest_event_time() -> None:
    # By priority the consume draws the grant without expiry and the other expires at 10
    # unused; ignoring priorities it draws the expiring one. Both folds hold 50 until the
    # journal reaches the expiry: only a later event (b's grant at 20) shows it.
    events = [
        NewEvent("gE", "a", "grant", 0, {"account": "a", "amount": 50, "expiry": 10,
                                         "priority": 90}),
        NewEvent("gN", "a", "grant", 0, {"account": "a", "amount": 50, "priority": 10}),
        NewEvent("u", "a", "consume", 1, {"account": "a", "amount": 50})]
    policy = Policy.from_json({"grant_order": "expiry"})
    journal = _journal(*events)
    early = whatif(journal, policy)
    assert early.at == 1 and not early.changed
    journal.append([NewEvent("gb", "b", "grant", 20, {"account": "b", "amount": 1})])
    late = whatif(journal, policy)
    assert late.at == 20
    (change,) = late.accounts
    assert (change.account, change.actual.balance, change.whatif.balance) == ("a", 0, 50)


@pytest.mark.parametrize("key", ["grant_order", "refund_fraction", "max_running"])
def test_a_policy_key_given_as_null_is_the_key_left_out(key: str) -> None:
    # As an event's optional field is read by `import`: null is the field not given. Only
    # refund_fraction was read so; a null grant_order or max_running was refused.
    assert Policy.from_json({key: None}) == Policy.from_json({})
