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
import inspect
import operator
from collections.abc import Callable, Mapping
from typing import Any

from projections.queries.common import json_time, recorded_text

Words = Mapping[type, Callable[[Any], Any]]
"""Value type -> the function that words a value of it (for JSON, a str)."""


def _recorded(value: int | None) -> str | None:
    return None if value is None else recorded_text(value)


_CONVERT: dict[str, Callable[[Any], Any]] = {"time": json_time, "recorded": _recorded}


Fix = Callable[[Any, "Words | None"], Any]
"""What one key's value needs on its way to JSON (a call, a conversion, nested answers)."""

_PLAIN = frozenset({int, str, bool, float})
_PLAIN_TYPES = frozenset({f"{t}{none}" for t in ("int", "str", "bool", "float")
                          for none in ("", " | None")})
"""Annotations of values that are JSON as they are: they need no conversion."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """How an answer type becomes JSON, worked out once per type from its declaration:
    every attribute read in one call, and only the values that need it converted."""

    keys: tuple[str, ...]
    get: Callable[[Any], tuple[Any, ...]]
    fixes: tuple[tuple[int, Fix], ...]  # (index, what its value needs)
    optional: frozenset[int]  # indices left out when None
    spread: frozenset[int]  # indices whose object is spread in


_PLANS: dict[type, _Plan] = {}


def _annotation(kind: type, attr: str) -> str | None:
    """The declared type of an attribute (a field, a property, a method's return), as
    written, or None."""
    fields = {f.name: f.type for f in dataclasses.fields(kind)}
    if attr in fields:
        declared = fields[attr]
        return declared if isinstance(declared, str) else getattr(declared, "__name__", None)
    member = getattr(kind, attr, None)
    function = member.fget if isinstance(member, property) else member
    returns = getattr(function, "__annotations__", {}).get("return")
    return returns if isinstance(returns, str) else None


def _fix(call: bool, conversion: Callable[[Any], Any] | None, plain: bool) -> Fix | None:
    if not call and conversion is None:
        return None if plain else _value
    if conversion is None:
        return (lambda v, _w: v()) if plain else (lambda v, w: _value(v(), w))
    if call:
        return lambda v, _w: conversion(v())
    return lambda v, _w: conversion(v)  # a conversion gives plain values


def _plan(kind: type) -> _Plan:
    """The plan of an answer type (parsed from `json_keys` once per type)."""
    found = _PLANS.get(kind)
    if found is not None:
        return found
    declared = getattr(kind, "json_keys", None)
    if declared is None:
        declared = tuple(f.name for f in dataclasses.fields(kind))
    keys: list[str] = []
    attrs: list[str] = []
    fixes: list[tuple[int, Fix]] = []
    optional: set[int] = set()
    spread: set[int] = set()
    for index, entry in enumerate(declared):
        if entry.endswith("?"):
            optional.add(index)
            entry = entry.removesuffix("?")
        if entry.startswith("*"):
            spread.add(index)
            entry = entry.removeprefix("*")
        entry, _, conversion = entry.partition(":")
        key, _, attr = entry.partition("=")
        if conversion and conversion not in _CONVERT:
            raise ValueError(f"{kind.__name__}.json_keys: unknown conversion {conversion!r} "
                             f"(known: {', '.join(_CONVERT)})")
        attr = attr or key
        keys.append(key)
        attrs.append(attr)
        call = inspect.isfunction(getattr(kind, attr, None))  # a method, not a field
        plain = _annotation(kind, attr) in _PLAIN_TYPES or index in spread
        fix = _fix(call, _CONVERT[conversion] if conversion else None, plain)
        if fix is not None:
            fixes.append((index, fix))
    many = operator.attrgetter(*attrs)
    get = many if len(attrs) > 1 else (lambda answer: (many(answer),))
    _PLANS[kind] = plan = _Plan(tuple(keys), get, tuple(fixes), frozenset(optional),
                                frozenset(spread))
    return plan


def to_dict(answer: Any, words: Words | None = None) -> dict[str, Any]:
    """The JSON-ready object of an answer (a dataclass), as its `json_keys` declare."""
    plan = _plan(type(answer))
    values = list(plan.get(answer))
    for index, fix in plan.fixes:
        values[index] = fix(values[index], words)
    if not plan.optional and not plan.spread:
        return dict(zip(plan.keys, values, strict=True))
    out: dict[str, Any] = {}
    for index, (key, value) in enumerate(zip(plan.keys, values, strict=True)):
        if index in plan.spread:
            out.update(to_dict(value, words))
        elif value is not None or index not in plan.optional:
            out[key] = value
    return out


def _value(value: Any, words: Words | None) -> Any:
    kind = type(value)
    if kind in _PLAIN or value is None:
        return value
    if kind is list or kind is tuple:  # lineage: a tuple of (grant, credits) tuples
        plain = _PLAIN
        return [v if type(v) in plain else _value(v, words) for v in value]
    if words is not None:
        say = words.get(kind)
        if say is not None:
            return say(value)
    if kind in _PLANS or (dataclasses.is_dataclass(value) and not isinstance(value, type)):
        return to_dict(value, words)
    if isinstance(value, tuple):  # a named tuple
        fields = getattr(value, "_fields", None)
        if fields is not None:
            return {k: _value(v, words) for k, v in zip(fields, value, strict=True)}
        return [_value(v, words) for v in value]
    if isinstance(value, list):
        return [_value(v, words) for v in value]
    if isinstance(value, Mapping):
        return {k: _value(v, words) for k, v in value.items()}
    raise TypeError(f"to_dict: no JSON form for a {kind.__name__} ({value!r}); "
                    "expected an answer, a number, text, a list or a mapping")
