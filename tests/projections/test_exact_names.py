"""A live decision refuses a new name padded with whitespace, and keeps old ones usable."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventstore import MemoryJournal
from projections import GPUCreditTracker, Scheduler
from projections.exactnames import padded
from projections.importing import import_file

# Only the ASCII space: every other whitespace character is refused as not printable.
SPACES = st.sampled_from([" ", "  "])
WORDS = st.text(st.sampled_from("ab-_.:19 "), min_size=1, max_size=6).filter(
    lambda w: not padded(w))


@st.composite
def padded_names(draw: st.DrawFn) -> str:
    """A name that is blank, or a word with whitespace before, after or on both sides."""
    word = draw(WORDS | st.just(""))
    before, after = draw(SPACES | st.just("")), draw(SPACES | st.just(""))
    if not (before or after):
        after = draw(SPACES)
    return before + word + after


@given(st.text(max_size=8))
def test_padded_means_not_equal_to_its_strip_or_blank(value: str) -> None:
    assert padded(value) == (value != value.strip() or (value != "" and not value.strip()))


LIVE_DECISIONS = ("grant", "consume", "open", "pool", "job", "user", "event id")
"""Where a live decision takes a new name (`_decide_naming`)."""


def _decide_naming(journal: MemoryJournal, where: str, name: str) -> None:
    """The live decision `where` taking `name` as its new name, on a journal that holds
    account `ok` (granted 100)."""
    scheduler = Scheduler(journal)
    tracker = GPUCreditTracker(journal, name if where in ("grant", "consume") else "ok")
    calls = {
        "grant": lambda: tracker.grant(5, 0, 10),
        "consume": lambda: tracker.consume(5, 0),
        "open": lambda: scheduler.open_account(name, 10),
        "pool": lambda: tracker.grant(5, 0, 10, pool=name),
        "job": lambda: scheduler.submit(name, "ok", 1, 0),
        "user": lambda: scheduler.submit("j", "ok", 1, 0, user=name),
        "event id": lambda: tracker.grant(5, 0, 10, event_id=name),
    }
    calls[where]()


def _with_account_ok() -> MemoryJournal:
    journal = MemoryJournal()
    Scheduler(journal).open_account("ok", 100)
    return journal


@given(padded_names(), st.sampled_from(LIVE_DECISIONS))
def test_every_live_decision_refuses_a_new_padded_name(name: str, where: str) -> None:
    journal = _with_account_ok()
    head = journal.head()
    with pytest.raises(ValueError, match="whitespace") as refused:
        _decide_naming(journal, where, name)
    assert repr(name) in str(refused.value)
    assert journal.head() == head  # nothing appended


@given(WORDS)
def test_whitespace_inside_a_name_is_a_name(word: str) -> None:
    name = f"x {word} y"
    journal = MemoryJournal()
    GPUCreditTracker(journal, name).grant(5, 0, 10, pool=name)
    Scheduler(journal).submit(name, name, 1, 0, at=1, pool=name, user=name)
    assert Scheduler(journal).job_state(name) == "pending"


def _imported(*records: dict[str, object]) -> MemoryJournal:
    journal = MemoryJournal()
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    import_file(journal, data, "old.jsonl")
    return journal


def test_names_a_journal_already_holds_stay_usable() -> None:
    # Written before the rule (or carried by a file): replay reads it, and live
    # decisions can go on naming what it holds.
    journal = _imported(
        {"type": "grant", "id": " g1", "account": " alice", "amount": 50, "time": 0,
         "pool": " a100", "expiry": 4_000_000_000},
        {"type": "submit", "id": "s1", "account": " alice", "job": " j1", "cost": 5,
         "priority": 0, "time": 1, "pool": " a100"})
    tracker = GPUCreditTracker(journal, " alice")
    tracker.consume(10, 2, pool=" a100")
    assert tracker.get_balance(3) == 40
    scheduler = Scheduler(journal)
    scheduler.submit("j2", " alice", 5, 0, pool=" a100")
    assert scheduler.start_next(at=4) is not None
    scheduler.complete(" j1", True, at=5)
    assert scheduler.job_state(" j1") == "succeeded"
    # A retry under the recorded id is answered as it was, padded or not.
    head = journal.head()
    tracker.grant(50, 0, 4_000_000_000, pool=" a100", event_id=" g1")
    assert journal.head() == head
    # What the journal does not hold in that role is still refused: a pool of another
    # account, a user, a new id.
    with pytest.raises(ValueError, match="pool ' a100'"):
        GPUCreditTracker(journal, "bob").grant(5, 6, 10, pool=" a100")
    with pytest.raises(ValueError, match="user ' alice'"):
        tracker.consume(1, 6, user=" alice")
    with pytest.raises(ValueError, match="event id ' g2'"):
        tracker.grant(5, 6, 10, event_id=" g2")
    assert journal.head() == head


def test_blank_names_say_so() -> None:
    with pytest.raises(ValueError, match=r"account '  ' is only whitespace: give a name"):
        GPUCreditTracker(MemoryJournal(), "  ").grant(5, 0, 10)


# "é" as one code point (NFC, what most keyboards type) and as "e" plus a combining
# acute accent (NFD, what some file systems and macOS text hand over): they look alike.
COMPOSED, DECOMPOSED = "caf\u00e9", "cafe\u0301"


@pytest.mark.parametrize("where", LIVE_DECISIONS)
def test_a_new_name_in_another_unicode_form_is_refused_and_says_how(where: str) -> None:
    # Two accounts that look alike in every table, list and page, told apart only by
    # their code points: a live decision refuses the decomposed spelling of a new name,
    # naming the composed one to write instead.
    journal = _with_account_ok()
    head = journal.head()
    with pytest.raises(ValueError, match="NFC") as refused:
        _decide_naming(journal, where, DECOMPOSED)
    assert f"write it as {COMPOSED!r}" in str(refused.value)
    assert journal.head() == head  # nothing appended
    GPUCreditTracker(journal, COMPOSED).grant(5, 0, 10, pool=COMPOSED, event_id=COMPOSED)


def test_a_name_the_journal_holds_in_another_unicode_form_stays_usable() -> None:
    journal = _imported({"type": "grant", "id": "g1", "account": DECOMPOSED, "amount": 50,
                         "time": 0, "pool": DECOMPOSED})
    tracker = GPUCreditTracker(journal, DECOMPOSED)
    tracker.consume(10, 2, pool=DECOMPOSED)
    assert tracker.get_balance(3) == 40
