"""GPU_CREDITS_FULL_MATRIX: the combinations of parameters the default run leaves out, and
that it takes every one of them when set (docs/operations.md, "Running the tests")."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from matrix import FULL_MATRIX_ENV, full_matrix

from tests.conftest import pytest_collection_modifyitems


@pytest.mark.parametrize(("raw", "full"), [(None, False), ("", False), ("0", False),
                                           (" 0 ", False), ("1", True), ("yes", True)])
def test_the_switch_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                 raw: str | None, full: bool) -> None:
    if raw is None:
        monkeypatch.delenv(FULL_MATRIX_ENV, raising=False)
    else:
        monkeypatch.setenv(FULL_MATRIX_ENV, raw)
    assert full_matrix() is full


class Item:
    def __init__(self, **params: Any) -> None:
        self.callspec = SimpleNamespace(params=params)
        self.obj = None

    def __repr__(self) -> str:
        return f"Item({self.callspec.params})"


ITEMS = {
    "python-postgres": Item(chain_check="python", kind="postgres", position=6),
    "python-sqlite": Item(chain_check="python", kind="sqlite", position=6),
    "python-memory": Item(chain_check="python", journal_url="memory"),
    "c-postgres": Item(chain_check="c", kind="postgres", position=6),
    "postgres-alone": Item(kind="postgres"),
    "no-parameters": SimpleNamespace(obj=None),
}


def _collect(monkeypatch: pytest.MonkeyPatch, full: str | None) -> tuple[list[str], list[str]]:
    if full is None:
        monkeypatch.delenv(FULL_MATRIX_ENV, raising=False)
    else:
        monkeypatch.setenv(FULL_MATRIX_ENV, full)
    monkeypatch.delenv("GPU_CREDITS_EXAMPLES", raising=False)
    deselected: list[Any] = []
    config = SimpleNamespace(hook=SimpleNamespace(
        pytest_deselected=lambda items: deselected.extend(items)))
    items = list(ITEMS.values())
    pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    names = {id(item): name for name, item in ITEMS.items()}
    return [names[id(i)] for i in items], [names[id(i)] for i in deselected]


def test_the_python_chain_check_on_postgresql_is_left_to_the_full_matrix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kept, deselected = _collect(monkeypatch, None)
    assert deselected == ["python-postgres"]  # reported as deselected, not dropped unseen
    assert kept == [name for name in ITEMS if name != "python-postgres"]


@pytest.mark.parametrize("full", ["1", "true"])
def test_the_full_matrix_keeps_every_combination(monkeypatch: pytest.MonkeyPatch,
                                                 full: str) -> None:
    kept, deselected = _collect(monkeypatch, full)
    assert (kept, deselected) == (list(ITEMS), [])
