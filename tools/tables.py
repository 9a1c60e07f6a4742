"""Lay out a Rich table line by line when no cell of it wraps: the same text, sooner.

Rich measures and renders every cell as a renderable of its own (about a millisecond a
cell), so a report of a thousand accounts took seconds to print, longer than its answer
took to compute. When every cell is one line of text that fits its column (what `fit`
allows unless a text column must wrap), the layout is simple arithmetic: each column as
wide as its widest cell, justified, between the box's edges and dividers. `layout` does
that for the tables the command line builds (one style: `render._table`) and returns None
for anything else (a cell that wraps, a ratio column, another box or padding...), which
Rich then prints as before. A differential test holds the two to the same text.
"""

from __future__ import annotations

from rich.box import Box
from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text


def _cell_text(value: object) -> Text | None:
    """A cell as one line of Text, or None when it could be anything else."""
    if isinstance(value, str):
        text = Text(value)
    elif isinstance(value, Text):
        if value.justify is not None or value.overflow is not None or value.no_wrap is not None:
            return None
        text = value
    else:
        return None
    plain = text.plain
    if "\n" in plain or "\t" in plain or "\r" in plain:
        return None
    return text


def _eligible(table: Table) -> bool:
    """Whether the table is drawn the one simple way `layout` knows."""
    return (table.box is not None and table.show_header and table.show_edge and not table.show_lines
            and not table.leading and not table.show_footer and table.caption is None
            and not table.expand and table.width is None and table.min_width is None
            and Padding.unpack(table.padding) == (0, 1, 0, 1) and not table.pad_edge
            and not table.collapse_padding and not table.row_styles
            and table.style in (None, "", "none") and not table.border_style
            and table.title_justify == "left" and isinstance(table.title, str | None)
            and all(c.justify in ("left", "right") and c.ratio is None and c.width is None
                    and c.max_width is None and not c.style and not c.header_style
                    and not c.highlight for c in table.columns)
            and all(row.style is None for row in table.rows))


def layout(table: Table, out: Console) -> tuple[list[Text], int] | None:
    """The table's lines (title first) and its width, when nothing in it wraps at the
    console's width (or only numbers make it wider, as `render.fit` prints it); else None.
    """
    if not table.columns or not _eligible(table):
        return None
    columns: list[list[Text]] = []
    widths: list[int] = []
    flexible = fixed = 0
    for index, column in enumerate(table.columns):
        texts: list[Text] = []
        for value in (column.header, *column._cells):
            text = _cell_text(value)
            if text is None:
                return None
            texts.append(text)
        widest = max((cell_len(t.plain) for t in texts), default=0)
        if column.min_width is not None:
            widest = max(widest, column.min_width)
        width = max(widest + table._get_padding_width(index), 1)
        if column.no_wrap:
            fixed += width
        else:
            flexible += width
        columns.append(texts)
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
    lines: list[Text] = []
    if title is not None:
        lines.append(Text(title, style=table.title_style or "table.title"))
    lines.append(Text(the_box.get_top(widths)))
    rows: list[tuple[Text, ...]] = list(zip(*columns, strict=True))
    last_row = len(rows) - 1
    ends = [False, *[row.end_section for row in table.rows]]
    for number, cells in enumerate(rows):
        if number == 0:
            left, right, divider = the_box.head_left, the_box.head_right, the_box.head_vertical
        elif number == last_row:
            left, right, divider = the_box.foot_left, the_box.foot_right, the_box.foot_vertical
        else:
            left, right, divider = the_box.mid_left, the_box.mid_right, the_box.mid_vertical
        line = Text(left)
        for index, (column, cell) in enumerate(zip(table.columns, cells, strict=True)):
            if index:
                line.append(divider)
            pad_left, pad_right = _padding(table, index)
            room = widths[index] - pad_left - pad_right - cell_len(cell.plain)
            line.append(" " * pad_left)
            if column.justify == "right":
                line.append(" " * room)
            if number == 0:
                line.append_text(Text(cell.plain, style=table.header_style or "table.header"))
            else:
                line.append_text(cell)
            if column.justify == "left":
                line.append(" " * room)
            line.append(" " * pad_right)
        line.append(right)
        lines.append(line)
        if number == 0:
            lines.append(Text(the_box.get_row(widths, "head", edge=True)))
        elif ends[number] and number != last_row:
            lines.append(Text(the_box.get_row(widths, "row", edge=True)))
    lines.append(Text(the_box.get_bottom(widths)))
    return lines, total


def _padding(table: Table, index: int) -> tuple[int, int]:
    """(left, right) padding of a column: none at the table's outer edges (pad_edge off)."""
    last = len(table.columns) - 1
    return (0 if index == 0 else 1), (0 if index == last else 1)
