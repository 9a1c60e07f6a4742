"""The deep copy behind `StateCodec.copy`, apart from the codec so that it is compiled.

Snapshots and restores copy the whole live state (a replay of 10^6 events keeps a
restart point, a live projection restores after every failed commit): in Python the walk
cost about 4.5 us per object. Compiled (`projections.native`), it takes about half the
instructions.

Only the copy is here: it walks state this process built, a few levels deep. Decoding a
stored tree stays in Python (`projections.statecopy`), where a crafted tree nested too
deep is a RecursionError; compiled code recursing that deep would overflow the C stack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCALARS: frozenset[type] = frozenset({type(None), bool, int, float, str})
"""The types of the values a state holds as they are: immutable, never copied or tagged."""


class Copier:
    """One deep copy: objects of the state classes copied once each, by identity."""

    def __init__(self, fields: dict[type, tuple[str, ...]],
                 blank: Callable[[type], Any]) -> None:
        """`fields`: each state class's fields to copy; `blank(cls)`: a new instance to
        fill in, no constructor run."""
        self.fields = fields
        self.blank = blank
        self.memo: dict[int, Any] = {}

    def copy(self, v: Any) -> Any:
        """An independent deep copy of `v`, sharing only immutable scalars (and tuples
        and frozensets of them)."""
        # Scalars are tested inline at every level, by identity of their type: most
        # fields are scalars, and a call per field would cost more than the copy itself.
        t = type(v)
        if t in SCALARS:
            return v
        if t is tuple:
            for x in v:
                if type(x) not in SCALARS:
                    return tuple([self.copy(y) for y in v])
            return v  # immutable all the way down: share it
        if t is list:
            return [x if type(x) in SCALARS else self.copy(x) for x in v]
        if t is dict:
            return {k: x if type(x) in SCALARS else self.copy(x) for k, x in v.items()}
        if t is frozenset:
            return v  # hashable members: immutable all the way down
        if t is set:
            return set(v)
        names = self.fields.get(t)
        if names is None:
            raise TypeError(f"cannot copy a {t.__name__}: not a state class")
        seen = self.memo.get(id(v))
        if seen is not None:
            return seen
        new = self.blank(t)
        # Held until the copy is done: no id() is reused meanwhile (the source is held
        # by the caller, so its objects live on).
        self.memo[id(v)] = new
        for name in names:
            x = getattr(v, name)
            setattr(new, name, x if type(x) in SCALARS else self.copy(x))
        return new
