"""The Jinja2 environment of the web view and the filters its templates use.

Numbers are shown with thousands separators, times as ISO-8601 UTC; every value is
escaped (autoescape), so an account name or a memo is shown, never run.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from projections.timefmt import format_time
from tools import wording


def num(value: Any) -> str:
    """`1,234,567`; a float (a refund fraction) as the journal and export spell it;
    `-` for None."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        # Its shortest exact spelling, the one a charge is computed from: rounded to two
        # places, a refund of 0.999 would read as 1.00, a full refund, beside a charge.
        return repr(value)
    return str(value)


def signed(value: int | None) -> str:
    """`+1,000`, `-250`, `0`."""
    if value is None:
        return "-"
    return f"{value:+,}" if value else "0"


def when(value: int | None) -> str:
    """An event time: ISO-8601 UTC for epoch seconds, the integer otherwise."""
    return format_time(value)


def micros(value: int | None) -> str:
    """A recorded-at time (microseconds since the epoch) as ISO-8601 UTC."""
    if value is None:
        return "-"
    moment = datetime.fromtimestamp(value / 1_000_000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def wallclock(value: float | None) -> str:
    """A wall-clock time in seconds as ISO-8601 UTC."""
    if value is None:
        return "-"
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def seg(value: Any) -> str:
    """One URL path segment: every reserved character escaped."""
    return quote(str(value), safe="")


def query(params: dict[str, Any], **changes: Any) -> str:
    """`?a=1&b=2` from `params` with `changes` applied; empty values left out."""
    merged = {**params, **changes}
    kept = {k: v for k, v in merged.items() if v not in (None, "")}
    return "?" + urlencode(kept) if kept else ""


def figure_rows(names: list[str], rows: list[tuple[int, list[int | None]]]) -> Markup:
    """The body rows of a chart's figures table (`pages.FiguresTable`): the time as a row
    header, then each line's value (blank where it is not drawn), each cell labelled by
    its column for the stacked narrow layout. Built here rather than by a template loop:
    a chart of 1,200 times and 8 lines took 50 to 150 ms through Jinja, 13 ms this way."""
    labels = [f' data-label="{escape(name)}"' for name in names]
    return Markup("".join(
        f'<tr><th scope="row" class="time" data-label="Time (UTC)">{escape(format_time(time))}</th>'
        + "".join(f'<td class="num"{label}>{"" if v is None else f"{v:,}"}</td>'
                  for label, v in zip(labels, values, strict=True))
        + "</tr>\n" for time, values in rows))


def environment() -> Environment:
    """The environment loading `tools/web/templates`, with the filters above."""
    env = Environment(loader=PackageLoader("tools.web", "templates"),
                      autoescape=select_autoescape(["html", "xml"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters.update(num=num, signed=signed, when=when, micros=micros,
                       wallclock=wallclock, seg=seg, figure_rows=figure_rows,
                       describe=wording.reported_text, words=wording.text)
    env.globals.update(query=query)
    return env
