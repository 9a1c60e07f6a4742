"""The quick table layout prints exactly what Rich prints, or leaves the table to Rich."""

from __future__ import annotations

import copy
import io
import re

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table
from rich.text import Text

from projections.queries import Figures
from tools import render, tables

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

words = st.text(alphabet=st.sampled_from([*"abc-_:.019 ", "é", "界"]), max_size=30)


@st.composite
def report_tables(draw: st.DrawFn) -> Table:
    """Tables built the way the reports build theirs: text, numeric and time columns."""
    table = render._table(draw(st.text(alphabet="Accounts at:0123 ", max_size=60)))
    kinds = draw(st.lists(st.sampled_from(["text", "number", "time"]), min_size=1,
                          max_size=7))
    for i, kind in enumerate(kinds):
        name = f"c{i}" + draw(st.sampled_from(["", "olumn", " name"]))
        if kind == "number":
            render._number_column(table, name)
        elif kind == "time":
            render._time_column(table, name)
        else:
            # The statement's columns: a folding id with a maximum width, a detail with a
            # ratio (inert unless the table expands) and a minimum width.
            table.add_column(name, overflow="fold",
                             max_width=draw(st.sampled_from([None, 3, 22])),
                             min_width=draw(st.sampled_from([None, 20])),
                             ratio=draw(st.sampled_from([None, 1])))
    for _ in range(draw(st.integers(0, 6))):
        cells: list[Text | str] = []
        for kind in kinds:
            if kind == "number":
                cells.append(render._n(draw(st.integers(-(10**9), 10**12))))
            elif kind == "time":
                cells.append(Text(draw(st.sampled_from(["2026-11-03T12:00:00Z", "5", "-"]))))
            else:
                value = draw(words)
                cells.append(value if draw(st.booleans()) else Text(value, style="bold"))
        if draw(st.booleans()):
            table.add_row(*cells)
        else:  # the bulk way the long reports add theirs
            tables.add_rows(table, [cells])
        if draw(st.integers(0, 4)) == 0:
            table.add_section()
    return table


def _printed(table: Table, width: int, *, terminal: bool, quick: bool) -> str:
    table = copy.deepcopy(table)  # Rich's path (`fit`) narrows the columns it wraps
    screen = io.StringIO()
    out = Console(file=screen, width=width, force_terminal=terminal, highlight=False,
                  markup=False, emoji=False, color_system="standard" if terminal else None)
    with pytest.MonkeyPatch.context() as patch:
        if not quick:
            patch.setattr(tables, "layout", lambda table, out: None)
        render.print_table(table, out)
    lines = ANSI.sub("", screen.getvalue()).splitlines()
    return "\n".join(line.rstrip() for line in lines)


@settings(max_examples=75, deadline=None)
@given(table=report_tables(), width=st.sampled_from([40, 80, 120, 100_000]),
       terminal=st.booleans())
def test_the_quick_layout_prints_what_rich_prints(table: Table, width: int,
                                                   terminal: bool) -> None:
    quick = tables.layout(copy.deepcopy(table), Console(file=io.StringIO(), width=width))
    event("quick" if quick is not None else "left to Rich")
    expected = _printed(table, width, terminal=terminal, quick=False)
    got = _printed(table, width, terminal=terminal, quick=True)
    assert got == expected


def test_the_quick_layout_is_taken_for_a_long_report() -> None:
    table = render._table("Accounts")
    table.add_column("account", overflow="fold")
    render._number_column(table, "balance")
    for i in range(1000):
        table.add_row(Text(f"acct-{i:05d}"), render._n(i * 1000 - 5))
    out = Console(file=io.StringIO(), width=80)
    laid = tables.layout(table, out)
    assert laid is not None
    lines, width = laid
    assert len(lines) == 1 + 1 + 1 + 1 + 1000 + 1  # title, top, header, rule, rows, bottom
    assert width == len(" acct-00999   999,995 ")
    for terminal in (False, True):
        assert _printed(table, 80, terminal=terminal, quick=True) == _printed(
            table, 80, terminal=terminal, quick=False)


def test_a_cell_that_must_wrap_is_left_to_rich() -> None:
    table = render._table("Statement")
    table.add_column("detail", overflow="fold")
    table.add_row("a long sentence " * 10)
    assert tables.layout(table, Console(file=io.StringIO(), width=40)) is None
    assert tables.layout(table, Console(file=io.StringIO(), width=400)) is not None


def test_a_long_statement_takes_the_quick_layout_when_piped() -> None:
    table = render._table("Statement of acct-00000 to 2026-11-03T12:00:00Z")
    render._time_column(table)
    render._number_column(table, "pos")
    table.add_column("event", overflow="fold", max_width=22)
    table.add_column("detail", ratio=1, min_width=20)
    for i in range(2000):
        table.add_row("2026-11-03T12:00:00Z", str(i + 1), Text(f"ev-{i}"),
                      Text(f"consumed {i}, paid by ev-0 {i}"))
    assert tables.layout(table, Console(file=io.StringIO(), width=render.PIPE_WIDTH)) is not None
    assert _printed(table, render.PIPE_WIDTH, terminal=False, quick=True) == _printed(
        table, render.PIPE_WIDTH, terminal=False, quick=False)


def test_an_id_wider_than_its_column_maximum_is_left_to_rich() -> None:
    table = render._table("Statement")
    table.add_column("event", overflow="fold", max_width=22)
    table.add_row("an-event-id-longer-than-twenty-two")
    assert tables.layout(table, Console(file=io.StringIO(), width=400)) is None


def test_rows_added_in_bulk_are_the_rows_add_row_adds() -> None:
    one, bulk = render._table("Jobs"), render._table("Jobs")
    for table in (one, bulk):
        table.add_column("job", overflow="fold")
        render._number_column(table, "cost")
    rows: list[list[str | Text]] = [["j1", render._n(5)], [Text("j2", style="red"), "7"]]
    for row in rows:
        one.add_row(*row)
    tables.add_rows(bulk, rows)
    assert [c._cells for c in one.columns] == [c._cells for c in bulk.columns]
    assert [(r.style, r.end_section) for r in one.rows] == \
        [(r.style, r.end_section) for r in bulk.rows]
    with pytest.raises(ValueError, match="a row of 1 cells for a table of 2 columns"):
        tables.add_rows(bulk, [["j3"]])
    assert len(bulk.rows) == 2  # a bad row adds nothing


def test_the_balances_table_totals_each_column() -> None:
    # The demo's first table: its total row adds up every account's figures per column.
    rows = [("a", Figures(100, 10, 90, 0, {"general": 60, "h100": 40})),
            ("b", Figures(-5, 0, -5, 5, {"general": -5}))]
    out = io.StringIO()
    render.print_table(render.balances_table(rows, 7),
                       Console(file=out, width=200, color_system=None))
    lines = [line.split() for line in out.getvalue().splitlines()]
    assert lines[2] == ["account", "h100", "general", "balance", "reserved", "available",
                        "debt"]
    assert ["total", "40", "55", "95", "10", "85", "5"] in lines
