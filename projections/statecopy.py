"""Copying and encoding projection state explicitly: data in, data out, never code.

A projection's state is a graph of a few known classes (`Ledger`, `AccountState`,
`CreditBook`, `Batch`, `Hold`, `Totals`, `JobState`) holding scalars, tuples, lists and
dicts. Some objects are shared (a hold's portions point at the batches they came from, a
job sits in both the job index and the live jobs), so both functions here keep identity:
an object reached twice is copied or encoded once and referred to after that.

- `StateCodec.copy` makes an independent copy (the projector's in-memory snapshots).
- `StateCodec.encode` turns the state into a tree of plain values (None, bool, int,
  float, str and lists) that msgpack or JSON can hold; `StateCodec.decode` builds the
  state back from such a tree. Decoding creates only instances of the classes the codec
  was given (by the class's `__new__` and plain attribute assignment: no constructor, no
  `__reduce__`, no import by name), so a crafted tree can at worst make a wrong state,
  never run code. A tree that does not fit (unknown tag or class, wrong field count)
  raises `StateFormatError`.

The tree format, every container a list whose first element is a tag:

    [0, item, ...]                 a list
    [1, item, ...]                 a tuple
    [2, key, value, key, value...] a dict, in insertion order
    [3, class index, field...]     a new object; fields in the order of `schema()`
    [4, object index]              an object seen before (indices count the 3s, from 0)
    [5, item, ...]                 a frozenset
    [6, item, ...]                 a set

Scalars stand for themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from projections.copying import SCALARS, Copier

_LIST, _TUPLE, _DICT, _NEW, _REF, _FROZENSET, _SET = range(7)


class StateFormatError(ValueError):
    """A state tree that does not describe a state of the known classes."""


def _fields(cls: type) -> tuple[str, ...]:
    # A dataclass's fields, else the class's STATE_FIELDS, else its __slots__. A class
    # compiled by mypyc (see projections.native) keeps no __slots__, so a plain class
    # names its fields in STATE_FIELDS, and that one declaration is the encoding order
    # compiled or not: a tree encoded by one build decodes in the other (a checkpoint's
    # schema is the same). Its __slots__, where the class keeps them, must name the same
    # fields, in any order.
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    declared = cls.__dict__.get("STATE_FIELDS")
    slots = cls.__dict__.get("__slots__")
    if isinstance(slots, str):
        slots = (slots,)
    if declared is None:
        if slots is None:
            raise TypeError(f"{cls.__name__} has no __slots__: its fields cannot be listed")
        return tuple(slots)
    fields = tuple(declared)
    if slots is not None and set(slots) != set(fields):
        raise TypeError(f"{cls.__name__}.STATE_FIELDS names other fields than its __slots__")
    return fields


class StateCodec:
    """Copies, encodes and decodes state made of `classes` (slotted classes only)."""

    def __init__(self, classes: Sequence[type],
                 blanks: Mapping[type, Callable[[], Any]] | None = None,
                 fields: Mapping[type, Sequence[str]] | None = None) -> None:
        """`blanks`: for a class whose `__new__` runs its constructor (a plain class
        compiled by mypyc), or whose fields cannot be set on a bare instance, a function
        making an instance to fill in; the others are made by their `__new__` alone (not
        `object.__new__`, which a compiled class refuses), no constructor run.

        `fields`: for a class whose state is not its own fields (one held through a
        property, say), the attribute names to copy and encode, in order."""
        self._classes = tuple(classes)
        self._blanks: dict[type, Callable[[], Any]] = dict(blanks or {})
        self._index = {cls: i for i, cls in enumerate(self._classes)}
        given = dict(fields or {})
        self._fields = {cls: tuple(given[cls]) if cls in given else _fields(cls)
                        for cls in self._classes}

    def _blank(self, cls: Any) -> Any:
        make = self._blanks.get(cls)
        return cls.__new__(cls) if make is None else make()

    def schema(self) -> dict[str, list[str]]:
        """Each class's name and its fields in encoding order: what a tree depends on."""
        return {cls.__name__: list(self._fields[cls]) for cls in self._classes}

    # -- copy ------------------------------------------------------------------------

    def copy(self, value: Any) -> Any:
        """An independent deep copy of `value`, sharing only immutable scalars."""
        # The walk is `projections.copying` (compiled where the fold is). A new copier
        # each time: its memo goes with it, nothing held after the copy.
        return Copier(self._fields, self._blank).copy(value)

    # -- encode / decode -------------------------------------------------------------

    def encode(self, value: Any) -> Any:
        """`value` as a tree of plain values (see the module's docstring)."""
        memo: dict[int, int] = {}
        fields = self._fields
        index = self._index
        scalars = SCALARS
        # Objects being encoded stay referenced here, so no id() is reused meanwhile.
        keep: list[Any] = []

        def enc(v: Any) -> Any:
            t = type(v)
            if t in scalars:
                return v
            if t is tuple:
                return [_TUPLE, *[enc(x) for x in v]]
            if t is list:
                return [_LIST, *[x if type(x) in scalars else enc(x) for x in v]]
            if t is dict:
                out: list[Any] = [_DICT]
                for k, x in v.items():
                    out.append(enc(k))
                    out.append(enc(x))
                return out
            if t is frozenset:
                return [_FROZENSET, *[enc(x) for x in v]]
            if t is set:
                return [_SET, *[enc(x) for x in v]]
            names = fields.get(t)
            if names is None:
                raise TypeError(f"cannot encode a {t.__name__}: not a state class")
            seen = memo.get(id(v))
            if seen is not None:
                return [_REF, seen]
            memo[id(v)] = len(keep)
            keep.append(v)
            out = [_NEW, index[t]]
            for name in names:
                x = getattr(v, name)
                out.append(x if type(x) in scalars else enc(x))
            return out

        try:
            return enc(value)
        finally:
            memo.clear()  # held by a reference cycle (see `copy`)
            keep.clear()

    def decode(self, tree: Any) -> Any:
        """The state a tree from `encode` describes; `StateFormatError` if it is not one."""
        objects: list[Any] = []
        classes = self._classes
        fields = self._fields
        scalars = SCALARS
        blank = self._blank

        def dec(v: Any) -> Any:
            # Called on containers only: every caller passes a scalar through itself, as
            # in `copy` (most of a tree is scalars, and a call per scalar would cost more
            # than the decoding).
            if type(v) is not list or not v or type(v[0]) is not int:
                raise StateFormatError(f"unexpected {type(v).__name__} in a state tree")
            tag = v[0]
            if tag == _LIST:
                return [x if type(x) in scalars else dec(x) for x in v[1:]]
            if tag == _TUPLE:
                return tuple([x if type(x) in scalars else dec(x) for x in v[1:]])
            if tag == _DICT:
                if len(v) % 2 != 1:
                    raise StateFormatError("a dict with a key but no value")
                out: dict[Any, Any] = {}
                for i in range(1, len(v), 2):
                    key = v[i] if type(v[i]) in scalars else dec(v[i])
                    x = v[i + 1]
                    try:
                        out[key] = x if type(x) in scalars else dec(x)
                    except TypeError as exc:  # an unhashable key
                        raise StateFormatError(f"bad dict key: {exc}") from None
                return out
            if tag in (_FROZENSET, _SET):
                try:
                    members = [x if type(x) in scalars else dec(x) for x in v[1:]]
                    return frozenset(members) if tag == _FROZENSET else set(members)
                except TypeError as exc:  # an unhashable member
                    raise StateFormatError(f"bad set member: {exc}") from None
            if tag == _REF:
                if len(v) != 2 or type(v[1]) is not int or not 0 <= v[1] < len(objects):
                    raise StateFormatError(f"reference to an unknown object: {v[1:]!r}")
                return objects[v[1]]
            if tag == _NEW:
                if len(v) < 2 or type(v[1]) is not int or not 0 <= v[1] < len(classes):
                    raise StateFormatError(f"unknown class index {v[1:2]!r}")
                cls = classes[v[1]]
                names = fields[cls]
                if len(v) != 2 + len(names):
                    raise StateFormatError(f"{cls.__name__} needs {len(names)} fields, "
                                           f"got {len(v) - 2}")
                new: Any = blank(cls)
                objects.append(new)
                for name, x in zip(names, v[2:], strict=True):
                    try:
                        setattr(new, name, x if type(x) in scalars else dec(x))
                    except TypeError as exc:  # a compiled class checks each field's type
                        raise StateFormatError(f"{cls.__name__}.{name}: {exc}") from None
                return new
            raise StateFormatError(f"unknown tag {tag!r} in a state tree")

        try:
            return tree if type(tree) in scalars else dec(tree)
        except RecursionError:
            raise StateFormatError("state tree nested too deeply") from None
        finally:
            objects.clear()  # held by a reference cycle (see `copy`)
