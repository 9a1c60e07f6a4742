"""The stress test's checker must itself catch what it is there to catch."""

from __future__ import annotations

from concurrency_kit import check_linearizable

from eventstore import MemoryJournal, NewEvent

Raw = tuple[str, str, str, int, dict[str, object]]  # (id, stream, type, time, payload)


def _journal(*events: Raw) -> MemoryJournal:
    journal = MemoryJournal()
    journal.append([NewEvent(*e) for e in events])
    return journal


def _submit(event_id: str, time: int, job: str, cost: int, priority: int = 0) -> Raw:
    """A submit of `job` to account a."""
    return (event_id, "a", "submit", time,
            {"account": "a", "job": job, "cost": cost, "priority": priority})


OPEN = [
    ("o1", "a", "account", 0, {"account": "a", "max_running": 1}),
    ("g1", "a", "grant", 0, {"account": "a", "amount": 10}),
]


def test_a_clean_journal_passes() -> None:
    journal = _journal(*OPEN,
                       _submit("s1", 1, "j1", cost=10),
                       _submit("s2", 2, "j2", cost=1),
                       ("t1", "a", "start", 3, {"job": "j1"}),
                       ("c1", "a", "complete", 4, {"job": "j1", "success": True}))
    told = {"submits": {"j1": True, "j2": False}, "consumes": {}, "starts": {"t1": "j1"}}
    assert check_linearizable(journal, [told]) == []


def test_a_worker_told_otherwise_is_caught() -> None:
    journal = _journal(*OPEN, _submit("s1", 1, "j1", cost=11))
    told = {"submits": {"j1": True}, "consumes": {}, "starts": {}}
    (problem,) = check_linearizable(journal, [told])
    assert "told accepted=True" in problem


def test_a_start_out_of_priority_order_is_caught() -> None:
    journal = _journal(*OPEN,
                       _submit("s1", 1, "low", cost=1),
                       _submit("s2", 2, "high", cost=1, priority=5),
                       ("t1", "a", "start", 3, {"job": "low"}))
    (problem,) = check_linearizable(journal)
    assert "had to pick high" in problem


def test_a_decision_placed_before_an_earlier_one_is_caught() -> None:
    journal = _journal(*OPEN,
                       ("x1", "a", "consume", 5, {"account": "a", "amount": 1}),
                       ("x2", "a", "consume", 4, {"account": "a", "amount": 1}))
    problems = check_linearizable(journal)
    assert any("before position 3" in p for p in problems)


def test_a_double_completion_is_caught() -> None:
    journal = _journal(*OPEN,
                       _submit("s1", 1, "j1", cost=1),
                       ("t1", "a", "start", 2, {"job": "j1"}),
                       ("c1", "a", "complete", 3, {"job": "j1", "success": True}),
                       ("c2", "a", "complete", 4, {"job": "j1", "success": True}))
    problems = check_linearizable(journal)
    assert any("anomaly" in p for p in problems) and any("is done" in p for p in problems)
