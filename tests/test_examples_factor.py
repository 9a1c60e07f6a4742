"""GPU_CREDITS_EXAMPLES: the factor on every property test's examples, for longer hunts
than `make test` has time for (docs/operations.md, "Running the tests")."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import EXAMPLES_ENV, examples_factor, pytest_collection_modifyitems


@pytest.mark.parametrize(("raw", "factor"), [(None, 1.0), ("", 1.0), ("3", 3.0),
                                             (" 0.5 ", 0.5)])
def test_the_factor_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                 raw: str | None, factor: float) -> None:
    if raw is None:
        monkeypatch.delenv(EXAMPLES_ENV, raising=False)
    else:
        monkeypatch.setenv(EXAMPLES_ENV, raw)
    assert examples_factor() == factor


@pytest.mark.parametrize("raw", ["0", "-2", "x", "inf", "nan"])
def test_a_factor_that_is_not_a_positive_number_stops_the_run(
        monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv(EXAMPLES_ENV, raw)
    with pytest.raises(pytest.UsageError, match=EXAMPLES_ENV):
        examples_factor()


class Item:
    """What the collection hook reads of a pytest item: the test it runs."""

    def __init__(self, obj: object) -> None:
        self.obj = obj


def test_each_property_test_runs_its_examples_times_the_factor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A test function's item holds the function; a test method's, the method bound."""
    drawn: list[int] = []

    @settings(max_examples=7, database=None)
    @given(st.integers())
    def prop(x: int) -> None:
        drawn.append(x)

    class Case:
        @settings(max_examples=5, database=None)
        @given(st.integers())
        def test_prop(self, x: int) -> None:
            drawn.append(x)

    case = Case()
    monkeypatch.setenv(EXAMPLES_ENV, "3")
    pytest_collection_modifyitems(None, [Item(prop), Item(case.test_prop)])  # type: ignore[arg-type,list-item]
    prop()
    assert len(drawn) == 21
    case.test_prop()
    assert len(drawn) == 21 + 15


def test_a_parametrized_property_test_is_scaled_once_whatever_its_cases(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case of a parametrized test holds the one function: scaled once per case,
    a test of four cases drew 30 * 0.5**4 = 2 examples in the pure-Python rerun, and
    30 * 10**4 under a hunt's factor of 10 (each case then ran out its time)."""
    drawn: list[int] = []

    @settings(max_examples=30, database=None)
    @given(st.integers())
    def prop(x: int) -> None:
        drawn.append(x)

    monkeypatch.setenv(EXAMPLES_ENV, "0.5")
    cases = [Item(prop) for _ in range(4)]
    pytest_collection_modifyitems(None, cases)  # type: ignore[arg-type]
    # A second collection in the same process (a session run again) scales from the
    # written count too, not from the last run's.
    pytest_collection_modifyitems(None, cases)  # type: ignore[arg-type]
    prop()
    assert len(drawn) == 15
