"""The account page of an account with a reversed submit (a job id no account holds) is
read from the account's stream: the same statement and lineage as the whole journal's
fold, without reading the rest of the journal; a job id another account holds still
sends the page to the whole fold."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings

from eventstore import MemoryJournal
from projections.errors import LedgerError
from projections.queries import to_dict
from tests.projections.test_reversed_submit_stream import (
    ACCOUNTS,
    _answers,
    _big,
    _read_counted,
    folding_whole,
    journals,
    steps_elsewhere_unseen,
)
from tools.web.pages import account_history
from tools.web.source import AuditSource


def _page(journal: MemoryJournal, account: str) -> tuple[Any, ...]:
    try:
        history = account_history(AuditSource(journal), account, journal.head())
    except LedgerError as exc:
        return (str(exc),)
    return to_dict(history.statement), to_dict(history.explanation)


def _whole(journal: MemoryJournal, account: str) -> tuple[Any, ...]:
    with folding_whole():
        return _answers(journal, account)


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journal=journals())
def test_the_account_page_answers_as_the_whole_fold(journal: MemoryJournal) -> None:
    whole = {account: _whole(journal, account) for account in ACCOUNTS}
    # Left out, as for statements: a step filed in another stream the stream can't tell.
    assume(not steps_elsewhere_unseen(journal, {a: w[0] for a, w in whole.items()
                                                if len(w) == 2}))
    assert {account: _page(journal, account) for account in ACCOUNTS} == whole


def test_the_account_page_of_a_reversed_submit_reads_only_its_stream() -> None:
    for reused, most in ((False, 50), (True, None)):
        journal = _big(reused=reused)
        source = AuditSource(journal)
        with source.reading():  # the whole ledger, as a service's live projection holds it
            pass
        with pytest.MonkeyPatch.context() as patch:
            count = _read_counted(journal, patch)
            history = account_history(source, "a", journal.head())
        if most is not None:
            assert count[0] < most, count[0]
        else:  # c holds the job id: only the whole fold tells a's submit
            assert count[0] > journal.head() // 2
        assert (to_dict(history.statement), to_dict(history.explanation)) == \
            _whole(journal, "a")
