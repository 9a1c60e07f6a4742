"""How the command line shows answers: Rich tables for people, JSON and CSV for scripts.

Nothing here computes a figure: every number comes from `projections.queries` (or the
replay report) and is only laid out. Times are shown with `format_time` (ISO-8601 when
they look like epoch seconds); JSON keeps them as integers.
"""

from __future__ import annotations

import codecs
import io
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from projections import csvcells
from projections.creditbook import Lineage
from projections.demo import DemoRun
from projections.events import GENERAL
from projections.queries import (
    AccountExplanation,
    AccountsReport,
    Audit,
    BalanceReport,
    ExpiringReport,
    Figures,
    ImportEffects,
    JobExplanation,
    JobsReport,
    Reconciliation,
    RevisionRow,
    Statement,
    StatementLine,
    Subtotals,
    WhatIf,
    json_time,
)
from projections.timefmt import format_time
from tools import tables, wording

PIPE_WIDTH = 100_000
"""Width of output written to a pipe or file without $COLUMNS: nothing wraps, so an id is
never split across lines and every row of a table is one line (for grep, cut, awk)."""

MIN_TEXT_WIDTH = 8
"""The narrowest a text column gets when a table must fit the screen."""

_FIGURE = re.compile(r"[-+]?[0-9][0-9,.]*|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]+Z", re.ASCII)
"""A figure or a time, as the tables write them: `-1,234`, `0.5`, `2026-11-01T00:00:00Z`."""

_AROUND = "()[]{},;:'\""
"""Punctuation a figure in a text cell may stand in: `(paid by g1 1,000)`."""


class _Console(Console):
    """A Rich console whose broken pipe is the command line's to answer, as any other's.

    Rich's own answer to a reader gone (`balance acme | head -0`) is to point stdout at
    /dev/null and exit 1, where the same command with `--json` exits 0: the command line
    answers every broken stdout pipe the same way (`tools.cli._Group.invoke`)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError("the reader of stdout went away")


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) for this call: plain when not a terminal.

    Markup and emoji codes are off: every string printed is shown as written, so a name
    read from the journal (an account `team[/red]`, a pool `[bold]h100`) can neither
    crash a command nor restyle its output. Style goes through `Text` and `style=`.
    """
    made = _Console(stderr=stderr, highlight=False, markup=False, emoji=False)
    if not made.is_terminal and "COLUMNS" not in os.environ:
        made = _Console(stderr=stderr, highlight=False, markup=False, emoji=False,
                       width=PIPE_WIDTH)
    return made


_URL_PASSWORD = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)[^\s/]*@")


_QUERY_PASSWORD = re.compile(r"(?P<head>[?&]password=)[^&\s'\"]*", re.IGNORECASE)


_LINE_BREAK = re.compile(r"\s*[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]\s*")
"""A line break (any that `str.splitlines` breaks at) with the whitespace around it."""


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
"""A control character that is not a tab nor a line break: an escape sequence starts with
one (ESC, `\\x1b`), and a terminal acts on it rather than show it."""


def shown(text: str) -> str:
    """`text` with each control character (not a tab, not a line break) written as its
    escape (`\\x1b`), as `repr` writes it: a file name or a database's message a line
    quotes as it was given cannot recolour, retitle or rewrite the user's terminal."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def one_line(text: str) -> str:
    """`text` on one line: each line break, with the indentation around it, becomes one
    space, the ends lose their whitespace, and a control character is escaped (`shown`).
    Every other character stays as it is, so a value a message quotes (`'team  a'`,
    `'   '`, `' pad'`) is shown as it was given."""
    return shown(_LINE_BREAK.sub(" ", text).strip())


def redact(text: str) -> str:
    """`text` with the password of every `scheme://user:password@` URL in it replaced by
    `***`: what the command line shows or logs never carries a secret."""
    return _QUERY_PASSWORD.sub(r"\g<head>***", _URL_PASSWORD.sub(r"\g<head>***@", text))


def fit(table: Table, out: Console) -> int:
    """Give the table's text columns widths that fit `out`, numbers keeping theirs.

    Numeric and time columns (no_wrap) keep their full width; text columns share what is
    left, never below `MIN_TEXT_WIDTH` nor below the widest figure or time in them
    (`_widest_figure`: a figure split over two lines reads as two figures), and wrap
    between words, folding a word (an id) longer than the column. Returns the width the
    table needs: more than the console's only when its numbers alone do not fit, and then
    the table is printed wider rather than cropping a number.
    """
    options = out.options
    measures = [table._measure_column(out, options.update_width(PIPE_WIDTH), column)
                for column in table.columns]
    fixed = sum(m.maximum for m, c in zip(measures, table.columns, strict=True)
                if c.no_wrap or c.width is not None)
    flexible = [(i, m.maximum) for i, (m, c) in enumerate(zip(measures, table.columns,
                                                             strict=True))
                if not (c.no_wrap or c.width is not None)]
    budget = out.width - table._extra_width - fixed
    if sum(width for _, width in flexible) <= budget:
        return max(out.width, fixed + table._extra_width)
    # Water-filling: narrow columns keep their width, the rest share what remains evenly.
    assigned: dict[int, int] = {}
    left = budget
    pending = sorted(flexible, key=lambda item: item[1])
    while pending:
        share = left // len(pending)
        index, natural = pending[0]
        padding = table._get_padding_width(index)
        floor = max(MIN_TEXT_WIDTH, _widest_figure(table.columns[index]._cells))
        width = max(min(natural, share), floor + padding)
        assigned[index] = width
        left -= width
        pending.pop(0)
    for index, width in assigned.items():
        table.columns[index].width = width - table._get_padding_width(index)
    return fixed + sum(assigned.values()) + table._extra_width


def _widest_figure(cells: Sequence[Any]) -> int:
    """The width of the widest word of `cells` that holds a figure or a time (with the
    punctuation around it, which wraps with it), 0 when none does."""
    widest = 0
    for cell in cells:
        text = cell if isinstance(cell, str) else cell.plain if isinstance(cell, Text) else ""
        for word in text.split():
            if len(word) > widest and _FIGURE.fullmatch(word.strip(_AROUND)):
                widest = cell_len(word)
    return widest


def print_table(table: Table, out: Console | None = None) -> None:
    """Print a table that never crops a number (see `fit`)."""
    out = out or console()
    _encodable(table, out.encoding)
    simple = tables.layout(table, out)
    if simple is not None:  # nothing wraps: the same text without Rich's per-cell work
        lines, width = simple
        if out.is_terminal:
            out.width = max(out.width, width)
            for line in lines:
                out.print(Text.assemble(*line), no_wrap=True, overflow="ignore", crop=False)
        else:
            out.file.write("".join(tables.plain(line).rstrip() + "\n" for line in lines))
            out.file.flush()
        return
    needed = fit(table, out)
    if needed > out.width:
        out.width = needed
    if out.is_terminal:
        out.print(table)
        return
    # To a pipe or file: the same text without the padding Rich adds to every row.
    with out.capture() as captured:
        out.print(table)
    text = "\n".join(line.rstrip() for line in captured.get().splitlines())
    out.file.write(text + "\n")
    out.file.flush()


def _encodable(table: Table, encoding: str) -> None:
    """Write each character of the table's text cells that `encoding` lacks as its escape
    (`\\U0001f680`) before the columns are measured: the stream would escape it anyway
    (`tolerant_streams`), and escaped after the layout a row would stand out of line.
    A cell so escaped keeps its style, not the styles of its parts."""
    if encoding.startswith("utf"):
        return

    def escaped(value: Any) -> Any:
        plain = value if isinstance(value, str) else value.plain \
            if isinstance(value, Text) else None
        if plain is None:
            return value
        text = plain.encode(encoding, "backslashreplace").decode(encoding)
        if text == plain:
            return value
        return text if isinstance(value, str) else Text(text, style=value.style)

    for column in table.columns:
        column.header = escaped(column.header)
        column._cells = [escaped(cell) for cell in column._cells]


def warn(message: str) -> None:
    """One warning line on stderr: the answer stands, but something deserves a look. A
    database's message it quotes loses its line breaks and its passwords (`redact`)."""
    sys.stderr.write(f"gpu-credits: warning: {redact(one_line(message))}\n")
    sys.stderr.flush()


def script_stdout() -> TextIO:
    """stdout for what scripts read (JSON, CSV, JSON Lines): UTF-8 whatever the locale or
    $PYTHONIOENCODING says, so a name or memo in any script is written, never refused by an
    ASCII or Latin-1 stdout, and the bytes are those `export --out` writes on any machine."""
    out = sys.stdout
    if isinstance(out, io.TextIOWrapper) and codecs.lookup(out.encoding).name != "utf-8":
        out.flush()
        out.reconfigure(encoding="utf-8", errors="strict")
    return out


class _ClosedStdout(io.TextIOBase):
    """stdout of a process started without one (`gpu-credits export >&-`): writing the
    answer is an error the user can act on (exit 2, one line), as `ls >&-` reports it,
    not an internal error on `None`."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError("cannot write the answer: stdout is closed (give the command a "
                      "stdout, e.g. > FILE or > /dev/null)")


class _DroppingStderr(io.TextIOBase):
    """The process's stderr, which drops what is said there once it cannot take it (its
    reader gone, `2> >(head -0)`; a full disk), as a closed stderr does: the answer on
    stdout and the exit status stand. Left to raise, a warning's BrokenPipeError would
    read as stdout's reader gone (the answer dropped, exit 0), and an error's would end
    the process with exit 1 instead of the error's status."""

    def __init__(self, inner: TextIO) -> None:
        super().__init__()
        self._inner = inner
        self._dropping = False

    @property
    def encoding(self) -> str:  # type: ignore[override]  # the stream's, read-only
        return self._inner.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self._inner.errors

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return not self._dropping and self._inner.isatty()

    def fileno(self) -> int:
        return self._inner.fileno()

    def write(self, text: str) -> int:
        if not self._dropping:
            try:
                self._inner.write(text)
            except OSError:
                self._drop()
        return len(text)

    def flush(self) -> None:
        if not self._dropping:
            try:
                self._inner.flush()
            except OSError:
                self._drop()

    def _drop(self) -> None:
        self._dropping = True
        # What the stream still buffers goes to /dev/null when the interpreter flushes it
        # at exit, not to an error that would change the exit status.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._inner.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass


class AnswerNotWritten(OSError):
    """stdout refused the answer (`> /dev/full`, a full disk, an I/O error): said as what
    could not be written, as `--out FILE` names its file."""

    def __str__(self) -> str:
        return f"cannot write the answer to stdout: {self.strerror}"


class _StdoutFile(io.FileIO):
    """The process's stdout, whose refusal names it (`AnswerNotWritten`), once: what is
    still buffered then is dropped, not refused again by the interpreter's last flush
    (exit 120 and a traceback after the error was said). A reader gone stays a
    BrokenPipeError, which the command line answers on its own."""

    refused = False

    def write(self, data: Any) -> int:
        if self.refused:
            return len(data)
        try:
            return super().write(data)
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.refused = True
            raise AnswerNotWritten(exc.errno, exc.strerror) from None


def _named_stdout(stream: io.TextIOWrapper) -> io.TextIOWrapper:
    """`stream` (the process's own stdout) over a `_StdoutFile`: the same descriptor,
    encoding and buffering."""
    stream.flush()
    raw = _StdoutFile(stream.fileno(), "w", closefd=False)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding=stream.encoding,
                            errors=stream.errors, line_buffering=stream.line_buffering,
                            write_through=stream.write_through)


def tolerant_streams() -> None:
    """Let stdout and stderr show, not refuse, what their encoding lacks.

    Under an ASCII or Latin-1 locale (or $PYTHONIOENCODING) a table or message naming an
    account `Ünïcödé 🚀` would stop half-printed at its first such character; the
    character is written as its escape (`\\U0001f680`) instead. UTF-8 streams are left
    as they are; what scripts read goes through `script_stdout`. A closed stdout refuses
    every write with an error, and one that refuses a write (a full disk) says it was
    stdout (`AnswerNotWritten`); a closed stderr, or one that stops taking what is said
    there (`_DroppingStderr`), swallows it (the exit status still tells).
    """
    if sys.stdout is None:
        sys.stdout = _ClosedStdout()
    elif sys.stdout is sys.__stdout__ and isinstance(sys.stdout, io.TextIOWrapper):
        # The process's own, not a test's capture; without a descriptor, left as it is.
        with suppress(OSError, ValueError):
            sys.stdout = _named_stdout(sys.stdout)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - until exit
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and \
                codecs.lookup(stream.encoding).name != "utf-8":
            stream.reconfigure(errors="backslashreplace")
    own = sys.__stderr__
    if own is not None and sys.stderr is own:  # the process's own, not a test's capture
        sys.stderr = _DroppingStderr(own)


def silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (tests capture stdout)
        pass


@contextmanager
def check_answer() -> Iterator[None]:
    """Around what a check (`verify`, `reconcile`, a statement that must add up) prints
    before its verdict: a reader that goes away (`| head -1`) has what it wanted, and the
    command goes on to give its verdict (exit 1 and its stderr line when the check failed)
    rather than the 0 of an answer cut short, so `set -o pipefail` sees a failed check."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


def print_json(value: Any) -> None:
    """One JSON document on stdout, in UTF-8 (see `script_stdout`)."""
    script_stdout().write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def _progress(show: bool) -> Progress:
    err = console(stderr=True)
    # markup=False: the description may carry a file name or an account.
    # A dumb terminal cannot redraw a line: no bar there (Rich left a blank line behind).
    return Progress(TextColumn("{task.description}", markup=False), BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(), console=err, transient=True,
                    disable=not (show and err.is_terminal and not err.is_dumb_terminal))


@contextmanager
def progress_bar(description: str, *, show: bool = True) -> Iterator[Any]:
    """A Rich progress bar on stderr (only on a terminal, and never when `show` is False:
    a `--json` answer is for a script); yields progress(done, total)."""
    with _progress(show) as bar:
        task = bar.add_task(shown(description), total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


class Stages:
    """Progress through named stages, one bar at a time: `stage(name)` ends the current
    stage's bar, and the object itself is `progress(done, total)` for the current stage.
    A stage's bar appears with its first count, so it never shows an unknown total."""

    def __init__(self, bar: Progress) -> None:
        self._bar = bar
        self._description = "working"
        self._task: TaskID | None = None

    def stage(self, description: str) -> None:
        """Start the next stage: its bar shows from its first count."""
        if self._task is not None:
            self._bar.remove_task(self._task)
            self._task = None
        self._description = description

    def __call__(self, done: int, total: int) -> None:
        if self._task is None:
            self._task = self._bar.add_task(self._description, total=total, completed=done)
        else:
            self._bar.update(self._task, completed=done, total=total)


@contextmanager
def progress_stages(*, show: bool = True) -> Iterator[Stages]:
    """Progress bars on stderr for a command that works in stages; only on a terminal,
    and never when `show` is False (a `--json` answer is for a script)."""
    with _progress(show) as bar:
        yield Stages(bar)


def _table(title: str, *, show_header: bool = True) -> Table:
    """The one table style: a bold title, a rule under the header, no outer frame."""
    return Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD,
                 pad_edge=False, show_header=show_header)


def _time_column(table: Table, name: str = "time") -> None:
    table.add_column(name, no_wrap=True, min_width=20)


def _number_column(table: Table, name: str) -> None:
    table.add_column(name, justify="right", no_wrap=True, min_width=len(name))


def _n(value: int) -> Text | str:
    # A number cannot carry markup, so only a negative one (red) needs a Text: a plain
    # str spares the long tables a Text per cell.
    return Text(f"{value:,}", style="red") if value < 0 else f"{value:,}"


def _pools_text(pools: dict[str, int]) -> str:
    shown = [f"{pool} {amount:,}" for pool, amount in sorted(pools.items()) if amount]
    return " · ".join(shown) or "-"


def _lineage(lineage: Lineage) -> str:
    return wording.lineage_text(lineage) if lineage else "-"


# -- balances and the demo ----------------------------------------------------------------


def balance_report(report: BalanceReport) -> None:
    """The human answer of `balance`."""
    out = console()
    f = report.figures
    out.print(Text.assemble((report.account, "bold"),
                            f" at {format_time(report.at)}, as known at position "
                            f"{report.as_known_at}"))
    if report.pool is not None:
        out.print(f"  {report.pool:<10} {report.figures.pools.get(report.pool, 0):>12,}")
        out.print(f"  (all pools: balance {f.balance:,}, available {f.available:,})")
        return
    for label, value in (("balance", f.balance), ("reserved", f.reserved),
                         ("available", f.available), ("debt", f.debt)):
        out.print(f"  {label:<10} {value:>12,}")
    out.print(f"  {'pools':<10} {_pools_text(f.pools)}")


def _pool_columns(rows: Sequence[tuple[str, Figures]]) -> list[str]:
    pools = sorted({p for _, f in rows for p in f.pools if p != GENERAL})
    return [*pools, GENERAL]


def balances_table(rows: Sequence[tuple[str, Figures]], at: int) -> Table:
    """Per account: each pool's balance, then balance, reserved, available and debt."""
    pools = _pool_columns(rows)
    table = _table(f"Balances at {format_time(at)}")
    table.add_column("account", no_wrap=True)
    for pool in pools:
        _number_column(table, pool)
    for name in ("balance", "reserved", "available", "debt"):
        _number_column(table, name)
    totals = Figures(0, 0, 0, 0, {})
    for account, f in rows:
        cells = [_n(f.pools[p]) if f.pools.get(p) else Text("") for p in pools]
        debt = Text(f"{f.debt:,}", style="red") if f.debt else Text("")
        table.add_row(Text(account), *cells, _n(f.balance), _n(f.reserved), _n(f.available),
                      debt)
        totals = Figures(totals.balance + f.balance, totals.reserved + f.reserved,
                         totals.available + f.available, totals.debt + f.debt,
                         {p: totals.pools.get(p, 0) + f.pools.get(p, 0) for p in pools})
    table.add_section()
    table.add_row(Text("total", style="bold"), *[_n(totals.pools[p]) for p in pools],
                  _n(totals.balance), _n(totals.reserved), _n(totals.available),
                  _n(totals.debt))
    return table


def audit_table(audit: Audit, run: DemoRun | None = None) -> Table:
    """The audit summary: events, credits granted and expired, debt, rejections, revisions."""
    table = _table("Audit summary", show_header=False)
    table.add_column("what", overflow="fold")
    table.add_column("value", justify="right")
    table.add_column("note", overflow="fold", style="dim")
    rows: list[tuple[str, str, str]] = []
    if run is not None:
        plan = run.plan
        present = run.already_present - plan.duplicates
        note = f"of {plan.events:,}, sent in {len(plan.batches)} daily batches"
        if present > 0:
            note += f"; {present:,} were already in the database"
        rows.append(("events appended", f"{run.appended:,}", note))
        rows.append(("duplicates sent", f"{plan.duplicates:,}",
                     "same id, same content: appended nothing"))
        rows.append(("late events", f"{plan.late:,}",
                     "event time earlier than events already recorded"))
    rows += [
        ("events in the journal", f"{audit.events:,}", ""),
        ("accounts", f"{audit.accounts:,}", ""),
        ("jobs", f"{audit.jobs:,}", ""),
        ("credits granted", f"{audit.granted:,}", ""),
        ("credits expired unused", f"{audit.expired:,}", ""),
        ("outstanding debt", f"{audit.debt:,}", ""),
        ("rejected submits", f"{audit.rejected:,}", "the account could not pay"),
        ("anomalies", f"{audit.anomalies:,}", "kept in the journal, no effect"),
        ("revisions by late events", f"{audit.revisions:,}",
         "outcomes a late event or reversal changed: gpu-credits revisions"),
    ]
    for what, value, note in rows:
        table.add_row(what, value, note)
    return table


# -- statement ------------------------------------------------------------------------------


STATEMENT_COLUMNS = ("time", "time_utc", "position", "event_id", "type", "status", "change",
                     "balance", "reserved", "job", "pool", "grants", "debt_paid",
                     "debt_created", "detail")
"""Columns of `statement --csv`: times empty for an event without time (an account opened
from the start of the timeline) and for lines that are not events (expiries)."""


def statement_table(st: Statement) -> Table:
    """A statement as a table: one row per change, with the running balance."""
    span = f"from {format_time(st.from_time)} " if st.from_time is not None else ""
    table = _table(f"Statement of {st.account} {span}to {format_time(st.to_time)}")
    _time_column(table)
    _number_column(table, "pos")
    table.add_column("event", overflow="fold", max_width=22)
    table.add_column("type", no_wrap=True)
    for name in ("change", "balance", "reserved"):
        _number_column(table, name)
    table.add_column("detail", overflow="fold", ratio=1, min_width=20)
    lines = [st.opening] if st.opening is not None else []
    for line in [*lines, *st.lines]:
        style = {"rejected": "yellow", "anomaly": "magenta"}.get(line.status, "")
        change = Text("") if line.type == "opening" else _n(line.change)
        table.add_row(format_time(line.time),
                      "" if line.position is None else str(line.position),
                      Text(line.event_id or ""), Text(line.type, style=style), change,
                      _n(line.balance), _n(line.reserved),
                      Text(_statement_detail(line), style=style))
    balance_, reserved = st.closing
    table.add_section()
    table.add_row("", "", "", Text("closing", style="bold"), "", _n(balance_), _n(reserved),
                  "")
    return table


def statement_csv(st: Statement, out: TextIO) -> None:
    """A statement as CSV, for spreadsheets and reconciliation (opening line first)."""
    writer = csvcells.writer(out)
    writer.writerow(STATEMENT_COLUMNS)
    lines = [st.opening] if st.opening is not None else []
    for line in [*lines, *st.lines]:
        time = json_time(line.time)
        writer.writerow([
            "" if time is None else time, "" if time is None else format_time(time),
            "" if line.position is None else line.position,
            line.event_id or "", line.type, line.status, line.change, line.balance,
            line.reserved, line.job or "", line.pool or "",
            grants_cell(line.grants), line.debt_paid, line.debt_created,
            _statement_detail(line),
        ])


_QUOTED_ID = re.compile(r"[ \"'\\]")
"""What makes a grant id in a `grants` cell a JSON string: a space separates the pairs,
and a quote or a backslash would be read as quoting by a shell-style split."""


def grants_cell(grants: Sequence[tuple[str, int]]) -> str:
    """A statement line's `grants` as one cell: `grant:credits` pairs separated by spaces.
    An id is any printable text, so one holding a space, a quote or a backslash is written
    as a JSON string (`"PO 4411":500`), which a shell-style split (Python's
    `shlex.split`) reads back as it was; the credits follow the last colon."""
    return " ".join(f"{json.dumps(g, ensure_ascii=False) if _QUOTED_ID.search(g) else g}:{a}"
                    for g, a in grants)


def _statement_detail(line: StatementLine) -> str:
    return wording.line_detail(line.effect, line.memo)


# -- explain --------------------------------------------------------------------------------


def explain_account(ex: AccountExplanation) -> None:
    """Where an account's credits came from and went."""
    out = console()
    f = ex.figures
    out.print(Text.assemble((ex.account, "bold"), f" at {format_time(ex.at)}: balance "
                            f"{f.balance:,}, reserved {f.reserved:,}, available "
                            f"{f.available:,}, debt {f.debt:,}"))
    grants = _table("Grants and what became of them")
    grants.add_column("grant", overflow="fold", min_width=12)
    grants.add_column("pool", no_wrap=True)
    _time_column(grants, "expiry")
    for name in ("amount", "paid debt", "used", "expired", "held", "remaining"):
        _number_column(grants, name)
    for g in ex.grants:
        held = sum(a for _, a in g.held)
        name = f"{g.grant_id} (refill)" if g.refill else g.grant_id
        expiry = format_time(g.expiry) if g.expiry is not None else "never"
        grants.add_row(Text(name), g.pool, expiry, f"{g.amount:,}",
                       f"{g.debt_paid:,}",
                       f"{g.used:,}", Text(f"{g.expired:,}", style="yellow" if g.expired else ""),
                       f"{held:,}", f"{g.remaining:,}")
    print_table(grants, out)
    spends = _table("Consumption and job charges, and the grants that paid")
    _time_column(spends)
    spends.add_column("event", overflow="fold", max_width=22)
    spends.add_column("what", overflow="fold", ratio=1)
    _number_column(spends, "amount")
    spends.add_column("paid by", overflow="fold", ratio=1)
    _number_column(spends, "debt created")
    for s in ex.spends:
        if s.kind == "job" and not s.amount:
            continue  # a failed job refunded in full: nothing was paid
        what = f"job {s.job}" if s.kind == "job" else "consume"
        if s.pool != GENERAL:
            what += f" ({s.pool})"
        spends.add_row(format_time(s.time), Text(s.event_id), Text(what), f"{s.amount:,}",
                       Text(_lineage(s.paid_by)),
                       Text(f"{s.debt_created:,}", style="red") if s.debt_created else "")
    print_table(spends, out)
    releases = _released_to_debt(ex)
    if releases:
        out.print(Text("Released credits that paid debt (cancels, completions)", style="bold"))
        for (time, _, event_id, job), paid in releases:
            out.print(Text(f"  {format_time(time)}  {event_id}  job {job}: "
                           f"{sum(a for _, a in paid):,} paid debt first ({_lineage(paid)})"))
    if ex.rejections:
        out.print(Text("Rejected submits", style="bold"))
        for r in ex.rejections:
            out.print(Text(f"  {format_time(r.time)}  {r.job}: {r.reason}"))
    if ex.anomalies:
        out.print(Text("Anomalies (kept in the journal, no effect)", style="bold"))
        for time, event_id, why in ex.anomalies:
            out.print(Text(f"  {format_time(time)}  {event_id}: {why}"))
    if ex.debt:
        out.print(Text(f"Outstanding debt: {_pools_text(ex.debt)}", style="red"))


def _released_to_debt(ex: AccountExplanation
                      ) -> list[tuple[tuple[int, int, str, str | None], Lineage]]:
    """Each release (a cancel, a completion) whose credits paid debt, in timeline order:
    (time, position, event id, job), and the grants whose credits paid it."""
    by_release: dict[tuple[int, int, str, str | None], list[tuple[str, int]]] = {}
    for g in ex.grants:
        for use in g.released_to_debt:
            key = (use.time, use.position, use.event_id, use.job)
            by_release.setdefault(key, []).append((g.grant_id, use.amount))
    return [(key, tuple(paid)) for key, paid in sorted(by_release.items())]


def _released(ex: JobExplanation) -> str:
    """`released 10 (6 lapsed: their grant had ended)`: released credits of a grant that
    expired or was voided meanwhile never became usable again."""
    text = f"released {ex.released or 0:,}"
    if ex.lapsed:
        text += f" ({ex.lapsed:,} lapsed: their grant had expired or was voided)"
    return text


def explain_job(ex: JobExplanation) -> None:
    """A job's life and the reasons behind it."""
    out = console()
    out.print(Text.assemble(("job ", ""), (ex.job, "bold"), f" of {ex.account or '?'}: ",
                            (ex.state, "bold")))
    if ex.cost is not None:
        pool = "" if ex.pool in (None, GENERAL) else f", pool {ex.pool}"
        out.print(f"  cost {ex.cost:,}, priority {ex.priority}{pool}, submitted "
                  f"{format_time(ex.submitted_at)}")
    if ex.accepted is False:
        later = "" if ex.account_opened_at is None else (
            f"; the account is opened later, at {format_time(ex.account_opened_at)}")
        out.print(Text(f"  rejected at submit: {ex.reason}{later}", style="yellow"))
    elif ex.accepted:
        out.print(Text(f"  accepted: reserved {ex.cost:,} from {_lineage(ex.held_from)}"))
    if ex.charge is not None:
        out.print(Text(f"  charged {ex.charge:,}, paid by {_lineage(ex.paid_by)}"
                       + (f"; {_released(ex)}" if ex.released else "")))
    elif ex.state == "cancelled" and ex.released is not None:
        out.print(f"  cancelled: {_released(ex)}")
    if ex.waiting:
        out.print(Text(f"  {wording.text(ex.waiting)}"))
    table = _table("Events")
    _time_column(table)
    _number_column(table, "pos")
    table.add_column("event", overflow="fold", max_width=22)
    table.add_column("type", no_wrap=True)
    table.add_column("detail", overflow="fold", ratio=1, min_width=20)
    for e in ex.events:
        table.add_row(format_time(e.time), str(e.position), Text(e.event_id), e.type,
                      Text(wording.text(e.effect), style="" if e.ok else "yellow"))
    print_table(table, out)


# -- revisions --------------------------------------------------------------------------------


def revisions_table(rows: Sequence[RevisionRow]) -> Table:
    """What each late event changed: the event it changed, before and after."""
    table = _table(f"Revisions by late events ({len(rows)})")
    for name in ("late event", "changed event", "before", "after"):
        table.add_column(name, overflow="fold", ratio=1)
    for row in rows:
        r = row.revision
        late = Text(f"#{r.late_position} {row.late_type or ''} {r.late_event_id}\n"
                    f"at {format_time(row.late_time)}")
        changed = Text(f"#{r.position} {r.type} {r.event_id}\nat {format_time(row.time)}")
        table.add_row(late, changed, Text(wording.reported_text(r.before)),
                      Text(wording.reported_text(r.after)))
    return table


# -- import -----------------------------------------------------------------------------------


ANOMALIES_SHOWN = 5


def import_summary(source: str, appended: int, already_present: int,
                   effects: ImportEffects) -> None:
    """What an import did: appended, already present, late, revisions, anomalies, and
    where to look at them."""
    out = console()
    events = "event" if appended == 1 else "events"
    source = shown(source)
    out.print(Text(f"{source}: appended {appended:,} {events}, {already_present:,} "
                   f"already present; {effects.late:,} late, {effects.revisions:,} "
                   f"revision(s), {len(effects.anomalies):,} anomaly(ies)"))
    if effects.late:
        out.print(Text(f"  {effects.late:,} late: placed on the timeline before events "
                       "already recorded, and everything after them re-projected"))
    if effects.revisions:
        out.print(Text(f"  {effects.revisions:,} outcome(s) reported earlier changed: "
                       "gpu-credits revisions lists them"))
    if effects.anomalies:
        out.print(Text(f"  {len(effects.anomalies):,} anomaly(ies), kept in the journal "
                       "with no effect (gpu-credits statement ACCOUNT shows each in place):"))
        for time, event_id, why in effects.anomalies[:ANOMALIES_SHOWN]:
            out.print(Text(f"    {format_time(time)}  {event_id}: {why}"))
        more = len(effects.anomalies) - ANOMALIES_SHOWN
        if more > 0:
            out.print(Text(f"    and {more:,} more"))


# -- statement subtotals ----------------------------------------------------------------------


SUBTOTAL_LABELS = (("opening", "opening balance", 1), ("granted", "granted", 1),
                   ("used", "used", -1), ("refunded", "refunded", 1),
                   ("expired", "expired unused", -1), ("adjusted", "adjusted", 1),
                   ("voided", "voided", -1), ("closing", "closing balance", 0))
"""(field, label, sign in the sum: + adds, - subtracts, 0 is the result)."""


def subtotals_table(sub: Subtotals) -> Table:
    """Opening, what came in and went out by kind, closing: the way they add up."""
    table = _table("Subtotals", show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("sign", no_wrap=True)
    _number_column(table, "credits")
    for name, label, sign in SUBTOTAL_LABELS:
        if name == "closing":
            table.add_section()
        mark = {1: "+", -1: "-", 0: "="}[sign] if name != "opening" else ""
        table.add_row(label, mark, _n(getattr(sub, name)))
    return table


# -- accounts, expiring, jobs -------------------------------------------------------------------


def accounts_table(report: AccountsReport) -> Table:
    """Every account: its balance per pool, then balance, reserved, available, debt."""
    pools = [p for p in report.pools if p != GENERAL] + [GENERAL]
    table = _table(f"Accounts at {format_time(report.at)}, as known at position "
                   f"{report.as_known_at}")
    table.add_column("account", overflow="fold")
    for name in ("balance", "reserved", "available", "debt"):
        _number_column(table, name)
    for pool in pools:
        _number_column(table, pool)
    for row in report.rows:
        f = row.figures
        name = row.account if row.opened else f"{row.account} (not opened)"
        table.add_row(Text(name), _n(f.balance), _n(f.reserved), _n(f.available),
                      Text(f"{f.debt:,}", style="red" if f.debt else ""),
                      *[_n(f.pools.get(p, 0)) for p in pools])
    t = report.totals
    table.add_section()
    table.add_row(Text("total", style="bold"), _n(t.balance), _n(t.reserved),
                  _n(t.available), _n(t.debt), *[_n(t.pools.get(p, 0)) for p in pools])
    return table


def expiring_tables(report: ExpiringReport) -> list[Table]:
    """The grants whose credits stop counting in the window, and the totals per account
    and pool."""
    span = f"{format_time(report.at)} to {format_time(report.until)}"
    detail = _table(f"Credits expiring from {span}")
    _time_column(detail, "expires")
    detail.add_column("account", overflow="fold")
    detail.add_column("pool", overflow="fold")
    detail.add_column("grant", overflow="fold")
    _number_column(detail, "unused")
    _number_column(detail, "held")
    # Names as plain strings: the console prints them as written (`console`: no markup).
    tables.add_rows(detail, [
        [format_time(c.ends) + (" (void)" if c.voided else ""), c.account, c.pool, c.grant,
         _n(c.amount), _n(c.held)] for c in report.credits])
    totals = _table("Per account and pool")
    totals.add_column("account", overflow="fold")
    totals.add_column("pool", overflow="fold")
    _number_column(totals, "unused")
    _number_column(totals, "held")
    tables.add_rows(totals, [[account, pool, _n(amount), _n(held)]
                             for account, pool, amount, held in report.totals()])
    return [detail, totals]


def jobs_table(report: JobsReport) -> Table:
    """Jobs with their account, state, cost and charge."""
    which = " ".join(part for part in (
        f"of {report.account}" if report.account else "",
        f"in state {report.state}" if report.state else "") if part)
    table = _table(f"Jobs {which}".rstrip() + f" ({len(report.rows):,})")
    table.add_column("job", overflow="fold")
    table.add_column("account", overflow="fold")
    table.add_column("state", no_wrap=True)
    _number_column(table, "cost")
    _number_column(table, "charged")
    _number_column(table, "priority")
    table.add_column("pool", overflow="fold")
    styles = {"rejected": "yellow", "failed": "red", "running": "cyan"}
    # One Text per styled state, shared by its rows (Rich never changes a cell it
    # renders); names as plain strings, which the console prints as written.
    states = {state: Text(state, style=style) for state, style in styles.items()}
    tables.add_rows(table, [
        [r.job, r.account, states.get(r.state, r.state), _n(r.cost),
         "" if r.charge is None else f"{r.charge:,}", str(r.priority), r.pool]
        for r in report.rows])
    return table


# -- reconcile --------------------------------------------------------------------------------


RECONCILE_COLUMNS = ("status", "line", "account", "job", "id", "time", "file_amount",
                     "ledger_amount", "difference", "note")
"""Columns of `reconcile --csv`."""

_STATUS_TEXT = {"matched": "matched", "amount_differs": "amount differs",
                "missing_from_ledger": "missing from the ledger",
                "duplicate": "duplicate in the file",
                "missing_from_file": "missing from the file"}


def reconcile_table(rec: Reconciliation) -> Table:
    """Every finding that is not a match (matches are only counted)."""
    table = _table(f"Differences between {shown(rec.source)} and the ledger")
    table.add_column("status", overflow="fold")
    _number_column(table, "line")
    table.add_column("account", overflow="fold")
    table.add_column("job or id", overflow="fold")
    _number_column(table, "file")
    _number_column(table, "ledger")
    _number_column(table, "diff")
    table.add_column("note", overflow="fold")
    for f in rec.findings:
        if f.status == "matched":
            continue
        diff = f.difference
        table.add_row(Text(_STATUS_TEXT[f.status], style="yellow"),
                      "" if f.line is None else str(f.line), Text(f.account),
                      Text(f.job or f.event_id or ""),
                      "" if f.file_amount is None else f"{f.file_amount:,}",
                      "" if f.ledger_amount is None else f"{f.ledger_amount:,}",
                      "" if diff is None else f"{diff:+,}", Text(wording.text(f.note)))
    return table


def reconcile_summary(rec: Reconciliation) -> str:
    """One line: how many rows of each kind."""
    counts = rec.counts()
    parts = [f"{counts[k]:,} {_STATUS_TEXT[k]}" for k in counts
             if counts[k] or k == "matched"]
    span = ("" if rec.time_range is None else
            f" between {format_time(rec.time_range[0])} and {format_time(rec.time_range[1])}")
    return (f"{shown(rec.source)}: " + ", ".join(parts)
            + f" (ledger charges compared for {len(rec.accounts)} account(s){span})")


def reconcile_csv(rec: Reconciliation, out: TextIO) -> None:
    """Every finding as CSV, matches included."""
    writer = csvcells.writer(out)
    writer.writerow(RECONCILE_COLUMNS)
    for f in rec.findings:
        d = wording.to_dict(f)
        writer.writerow(["" if d[c] is None else d[c] for c in RECONCILE_COLUMNS])


# -- what-if ----------------------------------------------------------------------------------


def whatif_tables(w: WhatIf) -> list[Table]:
    """What differs under the policy: totals, accounts and pools, jobs."""
    tables = []
    totals = _table("Totals: as recorded and under the policy")
    totals.add_column("what", no_wrap=True)
    for name in ("recorded", "policy", "difference"):
        _number_column(totals, name)
    for name, (a, b) in w.totals.items():
        totals.add_row(name, _n(a), _n(b), Text(f"{b - a:+,}" if b != a else ""))
    tables.append(totals)
    if w.accounts:
        accounts = _table("Accounts that differ")
        accounts.add_column("account", overflow="fold")
        accounts.add_column("figure", overflow="fold")
        for name in ("recorded", "policy", "difference"):
            _number_column(accounts, name)
        for change in w.accounts:
            rows = [(k, getattr(change.actual, k), getattr(change.whatif, k))
                    for k in ("balance", "reserved", "available", "debt")]
            rows += [(f"pool {p}", a, b) for p, a, b in change.pools()]
            for figure, a, b in rows:
                if a != b:
                    accounts.add_row(Text(change.account), Text(figure), _n(a), _n(b),
                                     Text(f"{b - a:+,}"))
        tables.append(accounts)
    if w.jobs:
        jobs = _table("Jobs that differ")
        jobs.add_column("job", overflow="fold")
        jobs.add_column("account", overflow="fold")
        jobs.add_column("recorded", overflow="fold")
        jobs.add_column("policy", overflow="fold")
        for j in w.jobs:
            def text(state: str | None, charge: int | None) -> str:
                if state is None:
                    return "-"
                return state + ("" if charge is None else f", charged {charge:,}")
            jobs.add_row(Text(j.job), Text(j.account),
                         Text(text(j.actual_state, j.actual_charge)),
                         Text(text(j.whatif_state, j.whatif_charge)))
        tables.append(jobs)
    return tables
