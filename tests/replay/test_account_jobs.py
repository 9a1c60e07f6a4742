"""An account's jobs read from a checkpoint's job index and the account's own events are
the projection's, and statements that check their job ids that way are those a fold
gives: with job ids two accounts submitted, job events in either submitter's stream, and
events arriving after the newest checkpoint, late ones among them."""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import queries
from projections.events import from_payload, to_payload
from projections.partial import account_jobs_at
from projections.replay import fold_canonical, replay
from tools import wording

ACCOUNTS = ("a", "b")
JOBS = tuple(f"j{i}" for i in range(8))  # few ids: accounts often share one
Event = tuple[str, str, str, int, dict[str, Any]]  # (id, stream, type, time, payload)


@st.composite
def shared_job_histories(draw: st.DrawFn) -> list[Event]:
    """Events as the facades and an import record them: each in its account's stream, a
    job's events in the stream of an account that submitted the job (the later
    submitter's, when an imported file named the id twice)."""
    n = draw(st.integers(1, 30))
    times = draw(st.permutations(range(1, n + 1)))
    submitters: dict[str, list[str]] = {}
    events: list[Event] = []
    for i in range(n):
        kind = draw(st.sampled_from(["account", "grant", "grant", "consume", "submit",
                                     "submit", "start", "start", "complete", "cancel"]))
        account = draw(st.sampled_from(ACCOUNTS))
        payload: dict[str, Any]
        if kind == "account":
            payload = {"account": account, "max_running": draw(st.sampled_from([None, 1]))}
        elif kind == "grant":
            payload = {"account": account, "amount": draw(st.integers(1, 20)),
                       "expiry": times[i] + draw(st.integers(1, 15))}
        elif kind == "consume":
            payload = {"account": account, "amount": draw(st.integers(1, 20))}
        elif kind == "submit":
            job = draw(st.sampled_from(JOBS))
            submitters.setdefault(job, []).append(account)
            payload = {"account": account, "job": job, "cost": draw(st.integers(0, 12)),
                       "priority": draw(st.integers(0, 2))}
        elif not submitters:
            continue
        else:
            job = draw(st.sampled_from(sorted(submitters)))
            account = draw(st.sampled_from(submitters[job]))  # the stream it lands in
            payload = {"job": job}
            if kind == "complete":
                payload["success"] = draw(st.booleans())
        events.append((f"e{i}", account, kind, times[i], to_payload(from_payload(kind,
                                                                                 payload))))
    return events


def _arrival(events: list[Event], data: st.DataObject) -> list[Event]:
    """The events in an arrival order: on the timeline, with a few arriving late, or
    shuffled."""
    if data.draw(st.integers(0, 3), label="shuffled") == 0:
        return list(data.draw(st.permutations(events), label="arrival order"))
    order = sorted(events, key=lambda e: e[3])
    for _ in range(data.draw(st.integers(0, 2), label="late ones")):
        if order:
            late = order.pop(data.draw(st.integers(0, len(order) - 1)))
            order.insert(data.draw(st.integers(0, len(order))), late)
    return order


def _arrival_and_cut(events: list[Event], data: st.DataObject) -> tuple[list[Event], int]:
    """An arrival order of `events` (`_arrival`), and how many of them come before the
    newest checkpoint."""
    order = _arrival(events, data)
    return order, data.draw(st.integers(0, len(order)), label="checkpointed prefix")


def _recorded(events: list[Event], cut: int, every: int | None) -> MemoryJournal:
    """`events[:cut]` appended, checkpointed when `every` is given, then the rest."""
    journal = MemoryJournal()
    for event_id, stream, kind, time, payload in events[:cut]:
        journal.append([NewEvent(event_id, stream, kind, time, payload)])
    if every is not None:
        replay(journal, checkpoint=True, checkpoint_every=every)
    for event_id, stream, kind, time, payload in events[cut:]:
        journal.append([NewEvent(event_id, stream, kind, time, payload)])
    return journal


@settings(max_examples=75, deadline=None)
@given(shared_job_histories(), st.data())
def test_an_accounts_jobs_from_the_job_index_are_the_folds(
        events: list[Event], data: st.DataObject) -> None:
    order, cut = _arrival_and_cut(events, data)
    journal = _recorded(order, cut, data.draw(st.integers(1, 5)))
    position = data.draw(st.integers(0, journal.head()), label="as known at")
    fold = fold_canonical(journal, to_position=position)
    for account in ACCOUNTS:
        # What a statement asks (the ids the account submitted), or not, and maybe others.
        named = {e[4]["job"] for e in events if e[2] == "submit" and e[1] == account
                 } if data.draw(st.booleans(), label="its own ids asked") else set()
        named |= set(data.draw(st.lists(st.sampled_from(JOBS), max_size=2),
                               label="other ids asked"))
        got = account_jobs_at(journal, account, named, to_position=position)
        event("left to the projection" if got is None else "from the job index")
        if got is None:
            continue
        assert got == {job: (j.account, j.state, j.charge) for job, j in fold.jobs.items()
                       if j.account == account or job in named}


@settings(max_examples=50, deadline=None)
@given(shared_job_histories(), st.data())
def test_statements_checking_their_job_ids_in_the_index_are_those_of_a_fold(
        events: list[Event], data: st.DataObject) -> None:
    order, cut = _arrival_and_cut(events, data)
    every = data.draw(st.integers(1, 5))
    checkpointed = _recorded(order, cut, every)
    plain = _recorded(order, cut, None)  # no checkpoint: the jobs report's fold
    head = checkpointed.head()
    positions = [None, *([data.draw(st.integers(1, head), label="as known at")] if head
                         else [])]
    for account in ACCOUNTS:
        for position in positions:
            try:
                want = _statement(plain, account, position)
            except LookupError:
                continue
            assert _statement(checkpointed, account, position) == want


def _statement(journal: MemoryJournal, account: str, position: int | None) -> dict[str, Any]:
    """The statement's JSON, without the wall-clock times the two journals recorded."""
    out = wording.to_dict(queries.statement(journal, account, as_known_at=position))
    for line in out["lines"]:
        del line["recorded_at"]
    return out


def _one_by_one(events: list[NewEvent]) -> MemoryJournal:
    """A journal of `events`, each appended on its own (a batch is one step of knowledge:
    a checkpoint falls between batches)."""
    journal = MemoryJournal()
    for one in events:
        journal.append([one])
    return journal


def test_a_late_submit_of_the_same_job_id_by_another_account_takes_it() -> None:
    journal = _one_by_one([
        NewEvent("g-a", "a", "grant", 1, {"account": "a", "amount": 100}),
        NewEvent("g-b", "b", "grant", 1, {"account": "b", "amount": 100}),
        NewEvent("s-a", "a", "submit", 5, {"account": "a", "job": "j", "cost": 30,
                                           "priority": 1}),
        NewEvent("c-a", "a", "consume", 6, {"account": "a", "amount": 1}),
    ])
    replay(journal, checkpoint=True, checkpoint_every=2)
    # After the newest checkpoint: b submits the same id earlier on the timeline.
    journal.append([NewEvent("s-b", "b", "submit", 3, {"account": "b", "job": "j",
                                                       "cost": 50, "priority": 1})])
    assert account_jobs_at(journal, "a", {"j"}, to_position=journal.head()) is None
    a = queries.statement(journal, "a")
    submit = next(line for line in a.lines if line.event_id == "s-a")
    assert submit.status == "anomaly"
    assert a.closing == (99, 0)
    b = queries.statement(journal, "b")
    assert b.closing == (100, 50)
    # As known before b's submit, the id was a's.
    assert queries.statement(journal, "a", as_known_at=4).closing == (99, 30)
    assert account_jobs_at(journal, "a", {"j"}, to_position=4) == {"j": ("a", "pending", None)}


def test_a_late_usage_report_reads_the_accounts_jobs_from_an_older_checkpoint() -> None:
    journal = _one_by_one([
        NewEvent("g-a", "a", "grant", 1, {"account": "a", "amount": 100}),
        NewEvent("s-a", "a", "submit", 2, {"account": "a", "job": "j", "cost": 30,
                                           "priority": 1}),
        NewEvent("st-a", "a", "start", 3, {"job": "j"}),
        NewEvent("g-b", "b", "grant", 4, {"account": "b", "amount": 100}),
        NewEvent("c-a", "a", "complete", 5, {"job": "j", "success": True}),
        NewEvent("s-b", "b", "submit", 6, {"account": "b", "job": "k", "cost": 10,
                                           "priority": 1}),
    ])
    replay(journal, checkpoint=True, checkpoint_every=2)
    journal.append([NewEvent("late", "a", "consume", 4, {"account": "a", "amount": 5})])
    assert account_jobs_at(journal, "a", {"j"}, to_position=journal.head()) == {
        "j": ("a", "succeeded", 30)}
    st_ = queries.statement(journal, "a")
    assert st_.closing == (65, 0) and not st_.subtotals.problems
