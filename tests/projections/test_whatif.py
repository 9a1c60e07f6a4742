"""What-if folds: what a policy changes, and what it names that the journal lacks."""

from __future__ import annotations

import pytest

from eventstore import MemoryJournal, NewEvent
from projections.policy import Policy
from projections.queries import whatif


def test_a_policy_capping_an_account_the_journal_lacks_names_it() -> None:
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 10})])
    result = whatif(journal, Policy.from_json({"max_running": {"a": 1, "nobody": 1}}))
    assert result.unknown_accounts == ["nobody"]
    assert not result.changed
    assert whatif(journal, Policy.from_json({"max_running": {"a": 1}})).unknown_accounts == []


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 10_000])
def test_a_policy_capping_a_name_no_account_can_have_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="an account of max_running"):
        Policy.from_json({"max_running": {name: 1}})
