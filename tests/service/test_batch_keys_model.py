"""Keyed requests against a plain model, through the service's own writer on one
journal, with restarts (a new service process on the journal) and commits that fail:
batches of events, usage reports and starts that find nothing to start, under a few
shared keys. Every key answers what it answered first, another request under it is 409
(whichever kinds the two are), and the journal holds each record once."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import IdempotencyConflict, Journal, JournalLike, MemoryJournal
from projections.errors import UnknownAccount
from tools.service import commands, writes
from tools.service.groupcommit import Command
from tools.service.ledger import LedgerService
from tools.service.problems import ServiceProblem
from tools.sim.service import commit_in_turn, failing_commit, failure_of, open_service

# A few bodies that share records (the same id and content), so that a batch may find
# some of its records already present; some records take their id from the key.
_RECORDS = [{"type": "grant", "account": "a", "amount": 5 + i, "time": 10 - i, "id": f"r{i}"}
            for i in range(5)]
_BODIES = [[_RECORDS[0]], [_RECORDS[0], _RECORDS[1]], [_RECORDS[2]],
           [_RECORDS[3], {"type": "consume", "account": "a", "amount": 3, "time": 4}],
           [{"type": "grant", "account": "a", "amount": 9, "time": 2}], [_RECORDS[4]]]
# The requests: each batch of events, then a usage report of 2 or 3 credits and a start
# (no job is ever submitted, so it finds nothing), all on the service's clock.
_REQUESTS: list[tuple[str, Any]] = [*(("events", body) for body in _BODIES),
                                    ("usage", 2), ("usage", 3), ("start", None)]
_STEPS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, len(_REQUESTS) - 1),
                            st.sampled_from(["none", "none", "restart", "commit-fails",
                                             "commit-lost"])), min_size=1, max_size=20)


def _refused(answer: Any) -> bool:
    """A 409: the service's own, or the journal's refusal of another event under an id."""
    return isinstance(answer, IdempotencyConflict) or (
        isinstance(answer, ServiceProblem) and answer.status == 409)


def _command(key: str, request: tuple[str, Any]) -> Command:
    """The command the route of this request makes of it under this key."""
    kind, body = request
    if kind == "usage":
        return commands.Usage(key, "a", body, None, None, None)
    if kind == "start":
        return commands.StartNext(key, None)
    entries, keyed, problems = writes._checked(body, key, allow_far=False)
    assert problems == []
    fingerprint = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return commands.AppendEvents(key, tuple(entries), keyed, fingerprint)


@settings(max_examples=30, deadline=None)
@given(_STEPS)
def test_every_key_answers_as_it_first_did(steps: list[tuple[int, int, str]]) -> None:
    _check(MemoryJournal(), steps)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_STEPS)
def test_every_key_answers_as_it_first_did_on_sqlite(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int, str]]) -> None:
    """On a SQL journal the writer decides a plain batch ahead of its transaction and
    binds its key in the events' own write (`append_at`)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('keys') / 'journal.db'}"
    with Journal(url) as journal:
        _check(journal, steps)


def _check(journal: JournalLike, steps: list[tuple[int, int, str]]) -> None:
    # Each service's writer keeps a committer thread (and on SQLite one of the journal's
    # connections) until it is stopped: stopped at the end, not left to the test process
    # (a hundred examples left a hundred threads in the worker).
    services = [open_service(journal, lambda: 100)]
    try:
        _check_with(journal, steps, services)
    finally:
        for service in services:
            service.writer.stop()


def _check_with(journal: JournalLike, steps: list[tuple[int, int, str]],
                services: list[LedgerService]) -> None:
    service = services[0]
    first: dict[str, tuple[int, Any]] = {}  # key -> (request, answer)
    for key_index, request_index, fault in steps:
        key, request = f"k{key_index}", _REQUESTS[request_index]
        if fault == "restart":
            service = open_service(journal, lambda: 100)  # what it remembered is gone
            services.append(service)
        command = _command(key, request)
        head = journal.head()
        if fault in ("commit-fails", "commit-lost"):
            with failing_commit(journal, failure_of(fault)):
                (answer,), _ = commit_in_turn(service, [command])
            # (A key bound already is answered from its binding, on a SQL journal without
            # opening a transaction for the failure to strike.)
            if isinstance(answer, BaseException) and not _refusal(answer):
                assert journal.head() == head
                if key not in first:
                    assert journal.request(key) is None  # it went with the events
                # The caller got an error: it retries, with the same key.
                (answer,), _ = commit_in_turn(service, [command])
        else:
            (answer,), _ = commit_in_turn(service, [command])
        if key in first and first[key][0] != request_index:
            assert _refused(answer), answer
            assert journal.head() == head
            continue
        if key not in first and isinstance(answer, UnknownAccount):
            assert journal.head() == head  # a usage report before any grant: refused,
            continue  # and its key is still free
        assert not isinstance(answer, BaseException), answer
        if key in first:
            assert answer == first[key][1]
        else:
            first[key] = (request_index, answer)
            if request[0] == "events":
                assert len(answer["positions"]) == len(request[1])
        recorded = {rec.id for rec in journal.read(order="position")}
        assert len(recorded) == journal.head()  # each record once
    for key, (request_index, answer) in first.items():
        kind = _REQUESTS[request_index][0]
        bound = journal.request(key)
        if kind == "usage":
            assert bound is None and journal.get(key) is not None
        else:  # a batch's answer, or a start's 204
            assert bound is not None and json.loads(bound.answer) == answer
    assert journal.verify() is None


def _refusal(answer: BaseException) -> bool:
    """An answer the request was refused with (a 4xx), not the commit's failure."""
    return _refused(answer) or isinstance(answer, UnknownAccount)
