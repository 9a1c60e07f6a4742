"""`to_dict`: the one way an answer becomes JSON, driven by each answer's `json_keys`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest

from projections import queries
from projections.figures import Figures
from projections.outcomes import Revision
from projections.policy import Policy
from projections.queries import BalanceReport, Effect, to_dict
from projections.timeline import TimelinePoint
from tools import wording

ANSWERS = [v for v in vars(queries).values()
           if isinstance(v, type) and dataclasses.is_dataclass(v)] + [
    Figures, Policy, Revision, TimelinePoint]


@pytest.mark.parametrize("kind", ANSWERS, ids=lambda k: k.__name__)
def test_every_declared_key_names_an_attribute_of_its_answer(kind: type) -> None:
    fields = {f.name for f in dataclasses.fields(kind)}
    for entry in getattr(kind, "json_keys", ()):
        name = entry.removesuffix("?").removeprefix("*").partition(":")[0]
        attr = name.partition("=")[2] or name
        assert attr in fields or hasattr(kind, attr), f"{kind.__name__}: {entry!r}"


def test_a_key_marked_optional_is_left_out_when_empty() -> None:
    figures = Figures(5, 2, 3, 0, {"general": 5})
    whole = to_dict(BalanceReport("a", 7, 3, figures))
    assert whole == {"account": "a", "balance": 5, "reserved": 2, "available": 3, "debt": 0,
                     "pools": {"general": 5}, "at": 7, "as_known_at": 3}
    one = to_dict(BalanceReport("a", 7, 3, figures, pool="h100"))
    assert list(one)[-2:] == ["pool", "pool_balance"]
    assert (one["pool"], one["pool_balance"]) == ("h100", 0)


def test_worded_values_take_their_words_and_stay_values_without() -> None:
    effect = Effect("consume", 40, "h100", paid_by=(("g1", 30),), debt_created=10,
                    debt_after=10)
    assert wording.text(effect) == ("consumed 40 h100, paid by g1 30; 10 became debt "
                                    "(debt now 10)")

    @dataclass(frozen=True, slots=True)
    class Line:
        time: int
        effect: Effect
        json_keys: ClassVar[tuple[str, ...]] = ("time:time", "detail=effect")

    line = Line(3, effect)
    assert wording.to_dict(line) == {"time": 3, "detail": wording.text(effect)}
    plain = to_dict(line)["detail"]
    assert plain["kind"] == "consume" and plain["paid_by"] == [["g1", 30]]


def test_a_value_without_a_json_form_is_refused_with_what_would_do() -> None:
    @dataclass
    class Odd:
        when: object

    with pytest.raises(TypeError, match="no JSON form for a set"):
        to_dict(Odd({1, 2}))


def test_an_unknown_conversion_is_refused_naming_the_known_ones() -> None:
    @dataclass
    class Typo:
        at: int
        json_keys: ClassVar[tuple[str, ...]] = ("at:tiem",)

    with pytest.raises(ValueError, match=r"unknown conversion 'tiem'.*time, recorded"):
        to_dict(Typo(1))
