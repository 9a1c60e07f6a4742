"""Lay out a Rich table line by line when no cell of it wraps: the same text, sooner.

Rich measures and renders every cell as a renderable of its own (about a millisecond a
cell), so a report of a thousand accounts took seconds to print, longer than its answer
took to compute. When every cell is one line of text that fits its column (what `fit`
allows unless a text column must wrap), the layout is simple arithmetic: each column as
wide as its widest cell, justified, between the box's edges and dividers. `layout` does
that for the tables the command line builds (one style: `render._table`) and returns None
for anything else (a cell that wraps or exceeds its column's maximum width, another box or
padding...), which Rich then prints as before. A column's `ratio` only matters to Rich in
an expanding table, which `layout` leaves to Rich. A differential test holds the two to the
same text.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.box import Box
from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.table import Row, Table
from rich.text import Text

Part = str | Text
"""A piece of a laid-out line: plain text, or text with a style."""


Cell = tuple[str, Text | None, int]
"""A cell laid out: its plain text, its Text when it carries a style, its width."""


def _cell(value: object) -> Cell | None:
    """A cell as one line of text, or None when it could be anything else."""
    if isinstance(value, str):
        if not value.isprintable():
            if "\n" in value or "\t" in value or "\r" in value:
                return None
            value = Text(value).plain  # Rich drops some control codes: let it say which
        return value, None, _width(value)
    if isinstance(value, Text):
        if value.justify is not None or value.overflow is not None or value.no_wrap is not None:
            return None
        plain = value.plain
        if "\n" in plain or "\t" in plain or "\r" in plain:
            return None
        styled = bool(value.style) or bool(value.spans)
        return plain, value if styled else None, _width(plain)
    return None


def _width(plain: str) -> int:
    return len(plain) if plain.isascii() else cell_len(plain)


def _eligible(table: Table) -> bool:
    """Whether the table is drawn the one simple way `layout` knows."""
    return (table.box is not None and table.show_header and table.show_edge and not table.show_lines
            and not table.leading and not table.show_footer and table.caption is None
            and not table.expand and table.width is None and table.min_width is None
            and Padding.unpack(table.padding) == (0, 1, 0, 1) and not table.pad_edge
            and not table.collapse_padding and not table.row_styles
            and table.style in (None, "", "none") and not table.border_style
            and table.title_justify == "left" and isinstance(table.title, str | None)
            and all(c.justify in ("left", "right") and c.width is None
                    and (c.max_width is None or c.min_width is None or c.min_width <= c.max_width)
                    and not c.style and not c.header_style
                    and not c.highlight for c in table.columns)
            and all(row.style is None for row in table.rows))


def layout(table: Table, out: Console) -> tuple[list[list[Part]], int] | None:
    """The table's lines (title first), each as its parts, and its width, when nothing in
    it wraps at the console's width (or only numbers make it wider, as `render.fit`
    prints it); else None. A line's plain text is its parts' plain texts joined.
    """
    if not table.columns or not _eligible(table):
        return None
    columns: list[list[Cell]] = []
    widths: list[int] = []
    flexible = fixed = 0
    for index, column in enumerate(table.columns):
        cells: list[Cell] = []
        widest = 0
        for value in (column.header, *column._cells):
            cell = _cell(value)
            if cell is None:
                return None
            cells.append(cell)
            if cell[2] > widest:
                widest = cell[2]
        if column.max_width is not None and widest > column.max_width:
            return None  # a cell folds at the column's maximum: Rich's layout
        if column.min_width is not None:
            widest = max(widest, column.min_width)
        width = max(widest + table._get_padding_width(index), 1)
        if column.no_wrap:
            fixed += width
        else:
            flexible += width
        columns.append(cells)
        widths.append(width)
    extra = table._extra_width
    if flexible > out.width - extra - fixed:
        return None  # a text column must wrap: Rich's layout (after `fit`) decides
    total = sum(widths) + extra
    title = table.title or None  # Rich shows no title line for an empty title
    if title is not None and (not isinstance(title, str) or cell_len(title) > total):
        return None  # the title wraps over the table's width
    assert table.box is not None  # see _eligible
    the_box: Box = table.box.substitute(out.options, safe=table.safe_box
                                        if table.safe_box is not None else out.safe_box)
    lines: list[list[Part]] = []
    if title is not None:
        lines.append([Text(title, style=table.title_style or "table.title")])
    lines.append([the_box.get_top(widths)])
    header_style = table.header_style or "table.header"
    # Per column: its padding and justification, fixed for every row.
    shapes = [(*_padding(table, index), column.justify == "right", widths[index])
              for index, column in enumerate(table.columns)]
    rows = list(zip(*columns, strict=True))
    last_row = len(rows) - 1
    ends = [False, *[row.end_section for row in table.rows]]
    for number, row in enumerate(rows):
        if number == 0:
            left, right, divider = the_box.head_left, the_box.head_right, the_box.head_vertical
        elif number == last_row:
            left, right, divider = the_box.foot_left, the_box.foot_right, the_box.foot_vertical
        else:
            left, right, divider = the_box.mid_left, the_box.mid_right, the_box.mid_vertical
        parts: list[Part] = []
        text = left  # plain text gathered until a styled cell needs a part of its own
        for index, ((plain, styled, used), (pad_left, pad_right, right_justified, width)) in \
                enumerate(zip(row, shapes, strict=True)):
            if index:
                text += divider
            room = width - pad_left - pad_right - used
            text += " " * (pad_left + (room if right_justified else 0))
            if number == 0:
                parts += [text, Text(plain, style=header_style)]
                text = ""
            elif styled is not None:
                parts += [text, styled]
                text = ""
            else:
                text += plain
            text += " " * ((0 if right_justified else room) + pad_right)
        parts.append(text + right)
        lines.append(parts)
        if number == 0:
            lines.append([the_box.get_row(widths, "head", edge=True)])
        elif ends[number] and number != last_row:
            lines.append([the_box.get_row(widths, "row", edge=True)])
    lines.append([the_box.get_bottom(widths)])
    return lines, total


def plain(line: list[Part]) -> str:
    """A laid-out line's text without its styles."""
    return "".join(part if isinstance(part, str) else part.plain for part in line)


def add_rows(table: Table, rows: Sequence[Sequence[str | Text]]) -> None:
    """`table.add_row(*row)` for each row, without its per-cell checks (a report of
    twenty thousand rows spent more time adding them than computing them): every row has
    one cell per column, each a string or a Text, which is all `add_row` would check."""
    width = len(table.columns)
    bad = next((row for row in rows if len(row) != width), None)
    if bad is not None:
        raise ValueError(f"a row of {len(bad)} cells for a table of {width} columns")
    if not rows:
        return
    for column, cells in zip(table.columns, zip(*rows, strict=True), strict=True):
        column._cells.extend(cells)
    table.rows.extend(Row() for _ in rows)


def _padding(table: Table, index: int) -> tuple[int, int]:
    """(left, right) padding of a column: none at the table's outer edges (pad_edge off)."""
    last = len(table.columns) - 1
    return (0 if index == 0 else 1), (0 if index == last else 1)
