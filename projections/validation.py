"""One definition of a valid value: every entry point (facades, import, CLI, HTTP) checks here.

The bounds are chosen so that what one path accepts, every other path accepts too, and
so that every figure survives a round trip through any JSON reader:

* every integer of the ledger (amounts, costs, priorities, times, expiries, counts) lies
  within +-(2**53 - 1), the integers a JSON reader using doubles (JavaScript, many
  spreadsheets) reads exactly; a sum of two such values still fits a 64-bit column;
* amounts are at least 1; costs at least 0; a grant's priority is 0-100;
* names (accounts, jobs, pools, ids) are non-empty printable text of at most
  `MAX_NAME_LENGTH` characters (`str.isprintable`: letters, marks, numbers, punctuation,
  symbols and the plain space; no control or format character, no space but U+0020, no
  line break, no private-use, surrogate or unassigned code point);
* free text (memos, reasons) is printable text of at most `MAX_TEXT_LENGTH` characters;
* fractions are finite numbers in [0, 1].

Every check returns the value it accepted and raises `ValueError` naming the field, the
offending value and what would be valid.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Annotated, Any

import msgspec

MAX_SAFE_INT = 2**53 - 1
"""The largest integer every JSON reader reads exactly (JavaScript's MAX_SAFE_INTEGER)."""

MIN_INT = -MAX_SAFE_INT
MAX_INT = MAX_SAFE_INT

MIN_TIME = -MAX_SAFE_INT
"""The earliest event time or expiry any path accepts."""

MAX_TIME = MAX_SAFE_INT
"""The latest event time or expiry any path accepts (event times also meet the far-time rule)."""

MAX_AMOUNT = MAX_SAFE_INT
"""The largest amount or cost: 9,007,199,254,740,991 credits."""

MIN_GRANT_PRIORITY = 0
MAX_GRANT_PRIORITY = 100

MAX_NAME_LENGTH = 200
"""Accounts, jobs, pools and event ids: at most this many characters."""

MAX_ID_LENGTH = MAX_NAME_LENGTH

MAX_TEXT_LENGTH = 1000
"""Memos and reasons: at most this many characters."""

# The same bounds as types, for the event dataclasses' fields: what each field is, said
# once where the field is declared. msgspec reads them to check a stored payload in C
# (`projections.decoding`); a type checker reads them as the plain types. Names and texts
# are counted in characters (code points), as `len` counts them.
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
"""An account, job, pool or event id (printable: checked by `require_name`)."""
Text = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT_LENGTH)]
"""A memo or a reason (printable, not blank: checked by `require_text`)."""
Int = Annotated[int, msgspec.Meta(ge=MIN_INT, le=MAX_INT)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1, le=MAX_INT)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
GrantPriority = Annotated[int, msgspec.Meta(ge=MIN_GRANT_PRIORITY, le=MAX_GRANT_PRIORITY)]
UnitFraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
"""A number in [0, 1] (a refund fraction)."""

_SHOWN_DIGITS = 40


def show(value: object) -> str:
    """`repr(value)`, shortened for huge integers and long strings (an error stays one line)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        sign = "-" if value < 0 else ""
        return f"{sign}an integer of about 2**{value.bit_length() - 1}"
    text = repr(value)
    if len(text) > _SHOWN_DIGITS * 2:
        # A string's own length, not its spelling's (quotes and escapes): the count is
        # compared with a limit in characters (a name of 201 beside "at most 200").
        length = len(value) if isinstance(value, str) else len(text)
        return f"{text[:_SHOWN_DIGITS]}... ({length} characters)"
    return text


def show_name(name: str) -> str:
    """A name as a list of names shows it: as written when that reads unambiguously, else
    quoted like `show` (an empty name; leading, trailing or doubled spaces; a comma, which
    separates the list; a leading quote; anything not printable), and a name not in
    Unicode's composed form (NFC) quoted with its characters beyond ASCII escaped, so it
    is told apart from the composed name it looks exactly like."""
    plain = (name != "" and name == name.strip() and name.isprintable() and "  " not in name
             and "," not in name and name[0] not in "'\"")
    composed = unicodedata.is_normalized("NFC", name)
    return name if plain and composed else show(name) if composed else spelling(name)


def spelling(name: str) -> str:
    """`repr(name)`, except that a name not in NFC has its characters beyond ASCII
    escaped (`'cafe\\u0301'`, not `'café'`): it looks exactly like its composed form."""
    if unicodedata.is_normalized("NFC", name):
        return show(name)
    text = escaped(name)
    if len(text) > _SHOWN_DIGITS * 2:
        return f"{text[:_SHOWN_DIGITS]}... ({len(name)} characters)"
    return text


def escaped(text: str, quote: str = "'") -> str:
    """`text` in `quote`s, each character beyond printable ASCII written as its Python
    escape (`\\u0301`), the quote and the backslash escaped: the spelling that tells two
    look-alike names apart."""
    return quote + "".join(
        "\\" + c if c in quote + "\\" else c if c.isascii() and c.isprintable()
        else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
        for c in text) + quote


def loose(name: str) -> str:
    """`name` with letter case, runs of spaces and Unicode form set aside: two names with
    the same `loose` look alike, or nearly, yet are compared exactly."""
    return " ".join(unicodedata.normalize("NFKC", name).casefold().split())


def spelled_like(name: str, names: Iterable[str]) -> list[str]:
    """The `names` other than `name` that differ from it only in letter case, spaces or
    Unicode form, sorted."""
    key = loose(name)
    return sorted(n for n in names if n != name and loose(n) == key)


def show_keys(keys: Iterable[str]) -> str:
    """Keys of a JSON object as an error lists them (unknown fields): each like
    `show_name`, and one longer than `show` keeps shortened like `show`. A key is the
    input's own text: a line break or thousands of characters in it must not break the
    error's one line."""
    return ", ".join(show_name(k) if len(k) <= _SHOWN_DIGITS * 2 else show(k) for k in keys)


def require_int(name: str, value: object, low: int = MIN_INT, high: int = MAX_INT) -> int:
    """Return `value` if it is an `int` (not a `bool`) with low <= value <= high."""
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "float" if isinstance(value, float) else type(value).__name__
        raise ValueError(f"{name} must be an integer, got {show(value)} ({kind})")
    if value < low:
        raise ValueError(f"{name} must be {_at_least(low, high)}, got {show(value)}")
    if value > high:
        within = f"an integer in {low}..{high}" if high < MAX_INT else f"at most {high}"
        raise ValueError(f"{name} must be {within}, got {show(value)}")
    return value


def clock_time(clock: Callable[[], object]) -> int:
    """What `clock()` returns, which must be an integer event time (`require_int`): a
    clock of `time.time`, the first one many would pass, is refused saying how to give
    whole seconds instead."""
    value = clock()
    if isinstance(value, float):
        raise ValueError(f"clock() must return an integer event time, got {show(value)} "
                         "(float): for the wall clock in whole seconds pass "
                         "clock=lambda: int(time.time()), or no clock")
    return require_int("clock()", value)


def require_clock(clock: object) -> Callable[[], int] | None:
    """A facade's `clock` argument: None (the wall clock) or a zero-argument callable,
    refused when the facade is made rather than at its first decision."""
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be a zero-argument callable returning an integer "
                        f"event time, such as lambda: int(time.time()), or None for the "
                        f"wall clock; got {show(clock)}")
    return clock  # what it returns is checked at each decision (clock_time)


def _at_least(low: int, high: int) -> str:
    if high < MAX_INT:  # a bound of its own (a priority's 100): both ends are news
        return f"an integer in {low}..{high}"
    if low == 1:
        return "a positive integer"
    if low == 0:
        return "a non-negative integer"
    return f"an integer in {low}..{high}"


def require_positive_int(name: str, value: object, high: int = MAX_INT) -> int:
    """Return `value` if it is an `int` in 1..high (not a `bool`)."""
    return require_int(name, value, 1, high)


def require_non_negative_int(name: str, value: object, high: int = MAX_INT) -> int:
    """Return `value` if it is an `int` in 0..high (not a `bool`)."""
    return require_int(name, value, 0, high)


def require_amount(name: str, value: object) -> int:
    """An amount of credits: an `int` in 1..MAX_AMOUNT."""
    return require_int(name, value, 1, MAX_AMOUNT)


def require_signed_amount(name: str, value: object) -> int:
    """A manual credit or debit: a non-zero `int` within +-MAX_AMOUNT."""
    require_int(name, value, -MAX_AMOUNT, MAX_AMOUNT)
    if value == 0:
        raise ValueError(f"{name} must not be 0: a positive amount credits, "
                         "a negative one debits")
    assert isinstance(value, int)
    return value


def require_cost(name: str, value: object) -> int:
    """A job's cost: an `int` in 0..MAX_AMOUNT (a negative cost is an error)."""
    return require_int(name, value, 0, MAX_AMOUNT)


def require_job_priority(name: str, value: object) -> int:
    """A job's priority: any `int` within +-(2**53 - 1); higher starts first."""
    return require_int(name, value, MIN_INT, MAX_INT)


def require_grant_priority(name: str, value: object) -> int:
    """A grant's priority: an `int` in 0..100; lower is used first."""
    return require_int(name, value, MIN_GRANT_PRIORITY, MAX_GRANT_PRIORITY)


def require_time(name: str, value: object) -> int:
    """An event time or expiry: an `int` in MIN_TIME..MAX_TIME."""
    return require_int(name, value, MIN_TIME, MAX_TIME)


def require_expiry_after(expiry: int, time: int, time_name: str = "time") -> None:
    """A grant's expiry after its time: one wording wherever a grant is made."""
    if expiry <= time:
        raise ValueError(f"grant expiry {expiry} must be after its {time_name} {time}: "
                         "credits count from the grant's time up to, not including, "
                         "their expiry")


PRINTABLE_RULE = ("printable text: letters, marks, numbers, punctuation, symbols and the "
                  "plain space U+0020; no control or format character, no other space or "
                  "line break, no private-use, surrogate or unassigned code point")
"""What `str.isprintable` accepts, the rule every name, memo and reason is held to, in words."""

_KINDS = {"Cc": "a control character", "Cf": "an invisible format character",
          "Cs": "a surrogate", "Co": "a private-use character", "Cn": "an unassigned code point",
          "Zs": "a space other than U+0020", "Zl": "a line separator",
          "Zp": "a paragraph separator"}


def unprintable(value: str) -> str:
    """The first character of `value` that `str.isprintable` refuses, described: its
    position (from 1), its code point and name, and what kind of character it is."""
    for index, char in enumerate(value, 1):
        if not char.isprintable():
            category = unicodedata.category(char)
            kind = "a line break" if char in "\n\r" else _KINDS.get(category, category)
            label = unicodedata.name(char, "")
            named = f" {label}" if label else ""
            return f"character {index} is U+{ord(char):04X}{named}, {kind}"
    return "every character is printable"


def is_noncharacter(char: str) -> bool:
    """Whether `char` is one of Unicode's 66 noncharacters (U+FDD0..U+FDEF and the last
    two code points of every plane): unassigned for good, never a character to write."""
    code = ord(char)
    return 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE


def may_be_newer(char: str) -> bool:
    """Whether `char` is unassigned in this Python's Unicode database
    (`unicodedata.unidata_version`) but may be a character of a later Unicode: an
    unassigned code point that is not a noncharacter. A journal another install wrote,
    its Python knowing a later Unicode, may name it (an emoji added since)."""
    return unicodedata.category(char) == "Cn" and not is_noncharacter(char)


_STORED: ContextVar[bool] = ContextVar("stored", default=False)
"""True while `stored_text` reads what a journal holds (this thread or task only)."""


@contextlib.contextmanager
def stored_text() -> Iterator[None]:
    """Within the block, names and free text are checked as a journal holds them: a code
    point unassigned in this Python's Unicode (`may_be_newer`) passes as printable.

    Whether a character is printable is the Unicode database's answer, and Python 3.11
    knows Unicode 14 while 3.12 knows 15: a memo with an emoji added in 15 is recorded
    by an install on 3.12 and was, on 3.11, a payload no fold could read, an anomaly, so
    the same journal gave other balances and another digest there. What was checked when
    it was written is folded as written, by every install; what is written is still
    checked against the Unicode this Python knows (`require_name`, `require_text`)."""
    token = _STORED.set(True)
    try:
        yield
    finally:
        _STORED.reset(token)


def _printable(value: str) -> bool:
    """`str.isprintable`, and inside `stored_text` also a code point this Python's
    Unicode does not know yet (`may_be_newer`)."""
    if value.isprintable():
        return True
    return _STORED.get() and all(c.isprintable() or may_be_newer(c) for c in value)


def require_name(name: str, value: object) -> str:
    """A name: a non-empty printable string of at most MAX_NAME_LENGTH characters."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty printable string, got {show(value)}")
    if len(value) > MAX_NAME_LENGTH:
        raise ValueError(f"{name} must be at most {MAX_NAME_LENGTH} characters, "
                         f"got {len(value)}")
    if not _printable(value):
        raise ValueError(f"{name} must be {PRINTABLE_RULE}; {unprintable(value)}, "
                         f"got {show(value)}")
    return value


def require_text(name: str, value: object) -> str:
    """Free text (a memo, a reason): printable, not blank, at most MAX_TEXT_LENGTH characters."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be text that is not blank (not empty, not only spaces), "
                         f"got {show(value)}")
    if not _printable(value):
        raise ValueError(f"{name} must be {PRINTABLE_RULE}; {unprintable(value)}, "
                         f"got {show(value)}")
    if len(value) > MAX_TEXT_LENGTH:
        raise ValueError(f"{name} must be at most {MAX_TEXT_LENGTH} characters, "
                         f"got {len(value)}")
    return value


def optional_text(name: str, value: object) -> str | None:
    """None, or `value` checked by `require_text`."""
    return None if value is None else require_text(name, value)


def require_fraction(name: str, value: object) -> float:
    """Return `value` as a float in [0, 1] (an int or a finite float, not a bool)."""
    if isinstance(value, numbers.Number) and not isinstance(value, bool | int | float):
        # A Fraction or Decimal would be stored as a float all the same: the caller
        # decides that rounding, not the ledger.
        raise ValueError(f"{name} must be an int or a float in [0, 1]: pass float({name}), "
                         f"got {show(value)}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number in [0, 1], got {show(value)}")
    try:
        as_float = float(value)
    except OverflowError:
        as_float = math.inf
    if not math.isfinite(as_float) or not 0.0 <= as_float <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {show(value)}")
    if as_float == 0.0:
        return 0.0  # not -0.0: the same fraction, and the same canonical JSON (a line's id)
    return as_float


def require_bool(name: str, value: object) -> bool:
    """Return `value` if it is `True` or `False` (not 0 or 1, not "true")."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {show(value)}")
    return value


FIELD_CHECKS: dict[Any, Callable[[str, Any], Any]] = {
    Name: require_name,
    Text: require_text,
    Int: require_int,
    PositiveInt: require_positive_int,
    NonNegativeInt: require_non_negative_int,
    GrantPriority: require_grant_priority,
    UnitFraction: require_fraction,
    bool: require_bool,
}
"""The check of each field type above: a field declared with the type is checked by it
(the event dataclasses run these from their annotations, in declaration order)."""


# -- JSON as a ledger reads it ----------------------------------------------------------


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all distinct (a repeated key would silently win)."""
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"key {show(key)} appears more than once")
            seen.add(key)
    return record


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number; use a finite number")


def _bounded_int(text: str) -> int:
    # Python refuses to read integers of more than 4300 digits with an unrelated message;
    # anything past 20 digits is far outside every bound of the ledger anyway.
    if len(text.lstrip("-")) > 20:
        raise ValueError(f"an integer of {len(text.lstrip('-'))} digits is out of range; "
                         f"integers lie within +-{MAX_SAFE_INT}")
    return int(text)


class WrittenFloat(float):
    """A number a double cannot hold (`1e400` reads as inf): the float it reads as, which
    remembers how it was written, so a check that refuses it shows what the input said
    rather than `inf`. Every check refuses it (no field takes an infinite number)."""

    __slots__ = ("written",)
    written: str

    def __new__(cls, written: str) -> WrittenFloat:
        number = super().__new__(cls, written)
        number.written = written
        return number

    def __repr__(self) -> str:
        return self.written

    __str__ = __repr__


def read_float(text: str) -> float:
    """`float(text)` for text already known to spell a number (JSON's, a CSV fraction's),
    but one that overflows to an infinity keeps its spelling for the error that refuses it."""
    number = float(text)
    return number if math.isfinite(number) else WrittenFloat(text)


_STRICT_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant,
                                parse_int=_bounded_int, parse_float=read_float)


def loads_strict(text: str) -> Any:
    """Parse one JSON document the way a ledger must: ValueError (one line) on a repeated
    key, NaN or Infinity, an integer of more than 20 digits, or nesting too deep for
    Python's parser, where `json.loads` would let the last key win, read NaN, or crash.
    """
    try:
        return _STRICT_JSON.decode(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply (an event's fields are strings, numbers "
                         "and booleans)") from None
