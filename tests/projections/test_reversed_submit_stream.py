"""An account whose events submit a job id that every submit of was reversed (so no
account holds the job) is still told from its own stream: its statement and explanation
are those of the whole fold, and reading them does not read the rest of the journal.
A job id another account holds still sends the account to the whole fold."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import queries
from projections.errors import LedgerError
from projections.queries import to_dict
from projections.replay import replay

statement_module = importlib.import_module("projections.queries.statement")
explain_module = importlib.import_module("projections.queries.explain")

ACCOUNTS = ["a", "b", "c", "d"]  # d is never granted: it may exist only by its submits
GRANTED = ["a", "b", "c"]
JOBS = ["j1", "j2", "j3"]
STEPS = ("start", "complete", "cancel")


@st.composite
def journals(draw: st.DrawFn) -> MemoryJournal:
    """Grants, submits of a few shared job ids by any account, their starts, completions
    and cancels filed in the submitter's stream or another one, consumes, and reversals
    of submits (filed in the reversed event's stream, as the service files them), with
    a checkpoint now and then."""
    journal = MemoryJournal()
    journal.append([NewEvent(f"g-{a}", a, "grant", 1, {"account": a, "amount": 100})
                    for a in GRANTED])
    submits: list[tuple[str, str]] = []  # (event id, stream)
    reversals: list[tuple[str, str]] = []
    for index in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["submit", "submit", "submit", "start", "complete",
                                     "cancel", "consume", "reverse", "reverse",
                                     "checkpoint"]))
        event_id, time = f"e{index}", draw(st.integers(2, 12))
        account = draw(st.sampled_from(ACCOUNTS))
        job = draw(st.sampled_from(JOBS))
        if kind == "submit":
            journal.append([NewEvent(event_id, account, "submit", time, {
                "account": account, "job": job, "cost": draw(st.integers(1, 60)),
                "priority": 1})])
            submits.append((event_id, account))
        elif kind in ("start", "cancel"):
            journal.append([NewEvent(event_id, account, kind, time, {"job": job})])
        elif kind == "complete":
            journal.append([NewEvent(event_id, account, kind, time,
                                     {"job": job, "success": draw(st.booleans())})])
        elif kind == "consume":
            journal.append([NewEvent(event_id, account, "consume", time,
                                     {"account": account, "amount": draw(st.integers(1, 30))})])
        elif kind == "reverse" and (submits or reversals):
            target, stream = draw(st.sampled_from(submits + reversals))
            journal.append([NewEvent(event_id, stream, "reverse", time,
                                     {"event": target, "reason": "entered twice"})])
            reversals.append((event_id, stream))
        elif kind == "checkpoint":
            replay(journal, checkpoint=True)
    return journal


@contextmanager
def folding_whole() -> Iterator[None]:
    """Statements and explanations that fold the whole journal, as when the account's
    stream cannot tell its jobs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(statement_module, "own_jobs", lambda *args: None)
        patch.setattr(explain_module, "own_jobs", lambda *args: None)
        yield


def steps_elsewhere_unseen(journal: MemoryJournal, statements: dict[str, Any]) -> bool:
    """Whether an account's statement (`to_dict` of the whole fold's) holds a step of its
    job filed in another stream that its own stream cannot tell: one that changed nothing
    (an anomaly, a second cancel), or one of a kind the stream records for the job too
    (the stream's own step then takes its place). Left out of these tests: nothing short
    of reading the other streams sees it, with or without a reversed submit; a step filed
    elsewhere that took effect is seen, as the job's state needs it."""
    recs = {rec.id: rec for rec in journal.read(order="position")}
    for account, statement in statements.items():
        own_steps = {(rec.payload.get("job"), rec.type) for rec in recs.values()
                     if rec.stream == account and rec.type in STEPS}
        for line in statement["lines"]:
            rec = recs[line["event_id"]]
            if line["type"] in STEPS and rec.stream != account and (
                    line["status"] == "anomaly" or line["detail"]["reason"]
                    or (rec.payload.get("job"), rec.type) in own_steps):
                return True
    return False


def _answers(journal: MemoryJournal, account: str) -> tuple[Any, ...]:
    """The account's statement and explanation, or the error that says it is unknown."""
    try:
        return (to_dict(queries.statement(journal, account)),
                to_dict(queries.explain_account(journal, account)))
    except LedgerError as exc:
        return (str(exc),)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journal=journals())
def test_the_streams_answer_is_the_whole_folds(journal: MemoryJournal) -> None:
    own = {account: _answers(journal, account) for account in ACCOUNTS}
    with folding_whole():
        whole = {account: _answers(journal, account) for account in ACCOUNTS}
    assume(not steps_elsewhere_unseen(journal, {a: w[0] for a, w in whole.items()
                                                if len(w) == 2}))
    assert own == whole


def _big(reused: bool) -> MemoryJournal:
    """a submits job ja and that submit is reversed; b consumes many times. With
    `reused`, c submitted ja first (a's submit was an anomaly; c holds the job)."""
    journal = MemoryJournal()
    journal.append([NewEvent(f"g-{a}", a, "grant", 1, {"account": a, "amount": 10**6})
                    for a in GRANTED])
    if reused:
        journal.append([NewEvent("sc", "c", "submit", 2, {"account": "c", "job": "ja",
                                                          "cost": 7, "priority": 1})])
    journal.append([NewEvent("sa", "a", "submit", 3, {"account": "a", "job": "ja",
                                                      "cost": 5, "priority": 1})])
    journal.append([NewEvent(f"u{i}", "b", "consume", 10 + i, {"account": "b", "amount": 1})
                    for i in range(500)])
    journal.append([NewEvent("r1", "a", "reverse", 600, {"event": "sa", "reason": "twice"})])
    return journal


def _read_counted(journal: MemoryJournal, patch: pytest.MonkeyPatch) -> list[int]:
    count = [0]
    original = journal.read

    def counting(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for rec in original(*args, **kwargs):
            count[0] += 1
            yield rec

    patch.setattr(journal, "read", counting)
    return count


def test_a_reversed_submit_does_not_make_the_statement_read_the_journal() -> None:
    journal = _big(reused=False)
    with pytest.MonkeyPatch.context() as patch:
        count = _read_counted(journal, patch)
        st = queries.statement(journal, "a")
        queries.explain_account(journal, "a")
    assert count[0] < 50, count[0]
    assert st.closing == (10**6, 0)
    assert [line.event_id for line in st.lines if line.type == "submit"] == ["sa"]


def test_a_reversed_submit_of_a_job_id_another_account_holds_is_the_whole_folds() -> None:
    journal = _big(reused=True)
    own = _answers(journal, "a"), _answers(journal, "c")
    with folding_whole():
        assert own == (_answers(journal, "a"), _answers(journal, "c"))
    # a's submit is no anomaly any more once reversed; c's job holds its cost
    assert queries.statement(journal, "c").closing == (10**6, 7)
