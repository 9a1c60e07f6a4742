"""The one way an answer becomes JSON: `to_dict`, driven by what each answer declares.

An answer is a dataclass. By default its JSON object holds every field under its own
name, in field order. An answer whose JSON differs (other key names, times, figures
spread in, a computed value, a key left out when empty) says so in `json_keys`, a tuple
of entries read by `to_dict` and nothing else:

- `"name"`: the attribute (a field or a property) under its own name; `"key=attr"`: under
  another key. A method is called.
- `":time"` after it: an event time (`json_time`: None for an event without time);
  `":recorded"`: a recorded-at time (µs) as ISO-8601 UTC, None stays None.
- `"*attr"`: the attribute's own object spread into this one (an account's figures).
- `"?"` at the end: the key is left out when the value is None.

Values are converted the same way everywhere: an answer inside an answer by its own
declaration, a named tuple as an object, other tuples and lists as lists (lineage is
`[[grant, amount], ...]`), mappings as objects. What a value means in words (what an
event did, why a job waits, why a finding is what it is) is the caller's: `words` maps
such a value's type to the function that words it (`tools.wording` gives the command
line, the service and the web view the same one). Without `words`, those values are
converted like any other, as their codes and figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from projections.queries.common import json_time, recorded_text

Words = Mapping[type, Callable[[Any], Any]]
"""Value type -> the function that words a value of it (for JSON, a str)."""


def _recorded(value: int | None) -> str | None:
    return None if value is None else recorded_text(value)


_CONVERT: dict[str, Callable[[Any], Any]] = {"time": json_time, "recorded": _recorded}


def _entries(kind: type) -> tuple[tuple[str, str, str | None, bool, bool], ...]:
    """(key, attribute, conversion, spread, omit when None) of each entry of an answer
    type, parsed once per type."""
    found = _PARSED.get(kind)
    if found is not None:
        return found
    declared = getattr(kind, "json_keys", None)
    if declared is None:
        declared = tuple(f.name for f in dataclasses.fields(kind))
    parsed = []
    for entry in declared:
        optional = entry.endswith("?")
        entry = entry.removesuffix("?")
        spread = entry.startswith("*")
        entry = entry.removeprefix("*")
        entry, _, conversion = entry.partition(":")
        key, _, attr = entry.partition("=")
        if conversion and conversion not in _CONVERT:
            raise ValueError(f"{kind.__name__}.json_keys: unknown conversion {conversion!r} "
                             f"(known: {', '.join(_CONVERT)})")
        parsed.append((key, attr or key, conversion or None, spread, optional))
    _PARSED[kind] = result = tuple(parsed)
    return result


_PARSED: dict[type, tuple[tuple[str, str, str | None, bool, bool], ...]] = {}


def to_dict(answer: Any, words: Words | None = None) -> dict[str, Any]:
    """The JSON-ready object of an answer (a dataclass), as its `json_keys` declare."""
    out: dict[str, Any] = {}
    for key, attr, conversion, spread, optional in _entries(type(answer)):
        value = getattr(answer, attr)
        if callable(value):
            value = value()
        if conversion is not None:
            value = _CONVERT[conversion](value)
        if spread:
            out.update(to_dict(value, words))
        elif value is not None or not optional:
            out[key] = _value(value, words)
    return out


def _value(value: Any, words: Words | None) -> Any:
    if value is None or isinstance(value, str | int | float):
        return value
    if words is not None:
        say = words.get(type(value))
        if say is not None:
            return say(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value, words)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return {k: _value(v, words) for k, v in zip(value._fields, value, strict=True)}
    if isinstance(value, list | tuple):
        return [_value(v, words) for v in value]
    if isinstance(value, Mapping):
        return {k: _value(v, words) for k, v in value.items()}
    raise TypeError(f"to_dict: no JSON form for a {type(value).__name__} ({value!r}); "
                    "expected an answer, a number, text, a list or a mapping")
