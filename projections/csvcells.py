"""CSV cells a spreadsheet shows as text and never runs as a formula.

A spreadsheet that opens a CSV file runs a cell starting with `=`, `+`, `-` or `@` as a
formula (and some start one after a tab or a carriage return): an account, job id, memo
or reason chosen by whoever fed the ledger could then compute, fetch a URL or start a
program on the auditor's machine. Every CSV this project writes passes its cells through
`guard` (docs/operations.md, "CSV files and spreadsheets"):

- a text cell starting with one of `FORMULA_STARTS` (the OWASP list, plus the full-width
  forms some spreadsheets also accept) gets a leading apostrophe, which spreadsheets show
  as text; so does a text cell that already starts with an apostrophe, which keeps the
  rule reversible (`unguard` gives back exactly the original text);
- numbers are written as they are, whether int and float values or text that is exactly
  a decimal number (`-25`, `-0.5`, `1e6`): -25 stays the number -25, so amounts,
  balances and times still add up in the spreadsheet.

`gpu-credits import` reads an exported CSV back through `unguard` on its text columns.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import Any, TextIO

FORMULA_STARTS = frozenset("=+-@\t\r\uff1d\uff0b\uff0d\uff20")
"""First characters that make a spreadsheet read a cell as a formula: = + - @ tab CR,
and the full-width = + - @."""

ESCAPE = "'"
"""Put before a text cell that would start a formula: spreadsheets show what follows as text."""

# A plain decimal number: a spreadsheet reads it as a number, never as a formula.
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?", re.ASCII)


def guard(value: Any) -> Any:
    """`value` as a CSV cell no spreadsheet runs: a str starting a formula (or with the
    escape character) gets `ESCAPE` before it, unless it is a plain number; anything
    else, numbers included, as is."""
    if (type(value) is str and value and (value[0] in FORMULA_STARTS or value[0] == ESCAPE)
            and not _NUMBER.fullmatch(value)):
        return ESCAPE + value
    return value


def unguard(text: str) -> str:
    """The text `guard` was given: one leading `ESCAPE` removed, when there is one."""
    return text[1:] if text.startswith(ESCAPE) else text


class SafeWriter:
    """`csv.writer` whose every cell goes through `guard`."""

    def __init__(self, out: TextIO, **options: Any) -> None:
        self._writer = csv.writer(out, lineterminator="\n", **options)

    def writerow(self, row: Iterable[Any]) -> None:
        """Write one row, each cell guarded."""
        self._writer.writerow([guard(cell) for cell in row])


def writer(out: TextIO) -> SafeWriter:
    """A CSV writer (lines end in \\n) that never writes a formula for a spreadsheet."""
    return SafeWriter(out)
