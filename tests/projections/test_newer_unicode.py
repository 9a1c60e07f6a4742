"""A journal folds alike under every Python: a name or memo holding a character of a later
Unicode than this Python's (an emoji added since: Python 3.11 knows Unicode 14, 3.12
knows 15) is read as written, not turned into an anomaly, while what is written here is
still held to the Unicode this Python knows."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator

import pytest

from eventstore import JournalLike, NewEvent
from eventstore.testing import open_journal
from projections import GPUCreditTracker
from projections.decoding import decode_event
from projections.queries.balance import account_figures
from projections.replay import replay
from projections.validation import is_noncharacter, may_be_newer, require_name, require_text

# U+1FAE8 SHAKING FACE (Unicode 15): unassigned to Python 3.11, an emoji to 3.12. Under a
# Python that knows it, the next code point its Unicode leaves unassigned stands in.
NEWER = next(chr(c) for c in range(0x1FAE8, 0x110000)
             if unicodedata.category(chr(c)) == "Cn" and not is_noncharacter(chr(c)))
KNOWN = "\U0001f680"  # ROCKET, in every Unicode Python knows


def history(char: str) -> list[NewEvent]:
    """Grants and usage whose account, pool and memos hold `char`, as an install whose
    Unicode knows it records them (the payloads are appended as they are, unchecked)."""
    team = f"team {char}"
    return [
        NewEvent("g1", "a", "grant", 1, {"account": "a", "amount": 10}),
        NewEvent("g2", team, "grant", 2, {"account": team, "amount": 10,
                                          "memo": f"welcome {char}"}),
        NewEvent("u1", "a", "consume", 3, {"account": "a", "amount": 3,
                                           "memo": f"usage {char}"}),
        NewEvent("g3", "a", "grant", 4, {"account": "a", "amount": 5, "pool": f"p{char}"}),
        NewEvent("u2", team, "consume", 5, {"account": team, "amount": 4}),
    ]


@pytest.fixture
def journals(journal_url: str) -> Iterator[tuple[JournalLike, JournalLike]]:
    """The history with NEWER on the backend of the test, and with KNOWN in its place
    (in memory)."""
    newer, known = open_journal(journal_url), open_journal("memory")
    newer.append(history(NEWER))
    known.append(history(KNOWN))
    yield newer, known
    newer.close()
    known.close()


def test_the_stand_in_is_unassigned_here_and_not_a_noncharacter() -> None:
    assert unicodedata.category(NEWER) == "Cn" and may_be_newer(NEWER)
    assert not may_be_newer("\uffff") and not may_be_newer("\ufdd0")
    assert not may_be_newer("a") and not may_be_newer("\x07")


def test_a_character_of_a_later_unicode_is_folded_as_written(
        journals: tuple[JournalLike, JournalLike]) -> None:
    newer, known = journals
    folded = {char: replay(journal) for char, journal in zip((NEWER, KNOWN), journals,
                                                             strict=True)}
    assert folded[NEWER].anomalies == [] and folded[KNOWN].anomalies == []

    def figures(char: str) -> dict[str, tuple[int, dict[str, int]]]:
        listed = account_figures(folded[char].ledger, 5)
        return {name.replace(char, "*"): (f.balance, {p.replace(char, "*"): n
                                                     for p, n in f.pools.items()})
                for name, f in listed}

    assert figures(NEWER) == figures(KNOWN)
    assert figures(NEWER)["a"][0] == 12 and figures(NEWER)["team *"][0] == 6
    # A facade opened on the journal answers from the same fold.
    assert GPUCreditTracker(newer, account="a").get_balance(5) == 12
    assert GPUCreditTracker(known, account="a").get_balance(5) == 12


def test_what_is_written_here_is_still_held_to_this_pythons_unicode(
        journal_url: str) -> None:
    journal = open_journal(journal_url)
    try:
        with pytest.raises(ValueError, match="unassigned code point"):
            GPUCreditTracker(journal, account=f"team {NEWER}").grant(5, 1, 10)
        assert journal.head() == 0
        # Reading a stored event did not leave the check relaxed behind it.
        journal.append(history(NEWER))
        assert replay(journal).anomalies == []
        with pytest.raises(ValueError, match="unassigned code point"):
            require_name("account", f"team {NEWER}")
        with pytest.raises(ValueError, match="unassigned code point"):
            require_text("memo", f"usage {NEWER}")
    finally:
        journal.close()


@pytest.mark.parametrize("char", ["\x07", "\u200b", "\ue000", "\uffff", "\u2028"],
                         ids=["control", "format", "private-use", "noncharacter",
                              "line-separator"])
def test_a_stored_character_no_unicode_makes_printable_is_still_an_anomaly(
        char: str) -> None:
    with pytest.raises(ValueError, match="must be printable"):
        decode_event("consume", json.dumps({"account": "a", "amount": 3,
                                            "memo": f"x{char}{NEWER}"}))
    with pytest.raises(ValueError, match="must be printable"):
        decode_event("grant", {"account": f"a{char}{NEWER}", "amount": 3})


def test_a_stored_payload_that_is_not_an_object_is_still_refused_as_a_value() -> None:
    """What the fold makes an anomaly of (a ValueError), not an error that stops it."""
    with pytest.raises(ValueError, match="missing account, amount"):
        decode_event("grant", f'"{NEWER}"')
