"""The rules of an append, shared by every journal so they cannot drift apart.

A journal (memory or SQL) locks its head, asks this module to validate the batch,
tells it what is already recorded, and gets back the records to store. Only the
storage differs between backends; what an append means is decided here.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import IdempotencyConflict, VersionConflict
from .hashing import canonical_json, flat_json, load_canonical, load_json, record_hash_text, seal
from .records import ERASED_KEY, PRIVATE_KEY, NewEvent, RecordedEvent, RequestKey, StoredRow

_new_record = tuple.__new__

# Every integer the journal stores must fit a signed 64-bit column (BIGINT).
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def wall_clock_us() -> int:
    """Microseconds since the Unix epoch, from the wall clock (recorded_at)."""
    return time.time_ns() // 1000


@dataclass(frozen=True, slots=True)
class Candidate:
    """One distinct event of a batch, validated, with its canonical payload text."""

    event: NewEvent
    payload_text: str
    private_text: str | None = None  # canonical JSON of the private part, if any

    @classmethod
    def of(cls, event: NewEvent) -> Candidate:
        """`event` validated, with its canonical texts."""
        return cls(event, payload_text(event.id, event.payload),
                   private_text(event.id, event.payload, event.private))

    def is_same_event(self, other: Candidate) -> bool:
        """Whether two new events under one id are one event: the same stream, type,
        time, payload and private part (what a batch or a file may repeat)."""
        return (same_content(self.event, self.payload_text, other.event, other.payload_text)
                and self.private_text == other.private_text)


@dataclass(frozen=True, slots=True)
class Plan:
    """A validated batch: its distinct events and where each input lands among them."""

    candidates: list[Candidate]  # distinct ids, first occurrence order
    slots: list[int]  # for each input event, its index in candidates

    @property
    def ids(self) -> list[str]:
        """The distinct event ids of the batch."""
        return [c.event.id for c in self.candidates]


@dataclass(frozen=True, slots=True)
class Row:
    """A record to store: the recorded event and its canonical payload text."""

    event: RecordedEvent
    payload_text: str
    private: tuple[str, str] | None = None  # (salt, canonical private part), if any

    def stored(self) -> StoredRow:
        """The record as storage holds it: the payload as its canonical text."""
        e = self.event
        return (e.position, e.id, e.stream, e.version, e.type, e.time, e.recorded_at,
                self.payload_text, e.hash)

    def stored_private(self) -> PrivateRow | None:
        """The private part as storage holds it, beside the record: (position, salt, text)."""
        if self.private is None:
            return None
        return (self.event.position, self.private[0], self.private[1])


PrivateRow = tuple[int, str, str]
"""A private part as storage holds it: its record's position, the salt (hex) and the
part's canonical JSON."""


def require_int(name: str, value: object) -> int:
    """Return value if it is an int (not a bool) that fits 64 bits, else raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if not INT64_MIN <= value <= INT64_MAX:
        # Thousands of digits would bury the message: their count tells enough.
        shown = str(value) if value.bit_length() <= 128 else \
            f"an integer of {value.bit_length()} bits"
        raise ValueError(f"{name} must fit in 64 bits, got {shown}")
    return value


NUL = "\x00"


def encodes(text: str) -> bool:
    """Whether UTF-8 can encode `text`: not when it holds a lone surrogate (U+D800 to
    U+DFFF, which JSON's \\ud800 escapes and Python strings can carry), which no
    database's text column takes and the chain's hash cannot be computed over."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str) -> bool:
    """Whether every backend can hold and compare `text`: no NUL, no lone surrogate. A
    look-up by any other text finds nothing (none such can be recorded)."""
    return NUL not in text and encodes(text)


def _surrogate(text: str) -> str:
    """The first lone surrogate in `text`, as U+XXXX."""
    return next(f"U+{ord(c):04X}" for c in text if "\ud800" <= c <= "\udfff")


def require_text(name: str, value: object) -> str:
    """Return value if it is a non-empty str without NUL or a lone surrogate, else raise
    ValueError."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty str, got {value!r}")
    if NUL in value:
        raise ValueError(f"{name} must not contain a NUL character (\\x00), got {value!r}")
    if not encodes(value):
        raise ValueError(f"{name} must not contain a lone surrogate ({_surrogate(value)}), "
                         f"which UTF-8 cannot encode, got {value!r}")
    return value


def validate_request(key: object, fingerprint: object, answer: object,
                     positions: object) -> tuple[int | None, int | None]:
    """Raise ValueError unless a request key's binding can be stored as given; the span
    (first, last) of the positions it names, (None, None) when it names none."""
    require_text("request key", key)
    require_text("request fingerprint", fingerprint)
    if not isinstance(answer, str) or not storable(answer):
        raise ValueError("a request's answer must be a str without NUL or a lone surrogate, "
                         f"got {answer!r}")
    if isinstance(positions, str | bytes) or not isinstance(positions, Sequence):
        raise ValueError(f"a request's positions must be a sequence of ints, got {positions!r}")
    for position in positions:
        if type(position) is not int or position < 1:
            raise ValueError(f"a request's positions must be positive ints, got {position!r}")
        require_int("a request's position", position)
    return (min(positions), max(positions)) if positions else (None, None)


def spans_position(binding: RequestKey, positions: Sequence[int]) -> bool:
    """Whether a binding's span of positions holds any of `positions`."""
    first, last = binding.first_position, binding.last_position
    return first is not None and last is not None and any(
        first <= p <= last for p in positions)


def bound_already(bound: RequestKey, fingerprint: str) -> RequestKey:
    """`bound`, when a request with this fingerprint binds its key again; else raise."""
    if bound.fingerprint != fingerprint:
        raise IdempotencyConflict(
            f"request key {bound.key!r} is already bound to another request (bound at "
            f"position {bound.position}); a key names one request forever: use a new key "
            "for a different request")
    return bound


def _refuse_nul(event_id: str, obj: object, where: str = "payload") -> None:
    """Raise ValueError naming the first str (value or key) inside obj holding a NUL or
    a lone surrogate.

    PostgreSQL cannot store NUL in text, and a NUL cut by some reader (C strings)
    would make two different values look the same; no database stores a lone surrogate,
    nor can the chain's hash be computed over one: refused on every backend alike.
    """
    if isinstance(obj, str):
        if NUL in obj:
            raise ValueError(
                f"event {event_id!r}: {where} contains a NUL character (\\x00): {obj!r}; "
                "remove it"
            )
        if not encodes(obj):
            raise ValueError(
                f"event {event_id!r}: {where} contains a lone surrogate ({_surrogate(obj)}), "
                f"which UTF-8 cannot encode: {obj!r}; remove it"
            )
    elif isinstance(obj, Mapping):
        for key, value in obj.items():
            _refuse_nul(event_id, key, f"{where} key {key!r}")
            _refuse_nul(event_id, value, f"{where}[{key!r}]")
    elif isinstance(obj, list | tuple):
        for i, item in enumerate(obj):
            _refuse_nul(event_id, item, f"{where}[{i}]")


def snapshot_bounds(from_time: int | None, before_position: int | None,
                    through_id: int | None, from_id: int | None = None) -> None:
    """Raise ValueError unless drop_snapshots' bounds are each None or a 64-bit int."""
    for name, bound in (("from_time", from_time), ("before_position", before_position),
                        ("through_id", through_id), ("from_id", from_id)):
        if bound is not None:
            require_int(name, bound)


def snapshot_id(value: object) -> int | None:
    """`value` as a snapshot id, None when no snapshot can have it (not an int, or past
    64 bits): load_snapshot's KeyError, on every backend alike."""
    if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
        return None
    return value


def private_bounds(after_position: object, to_position: object, batch_size: object) -> None:
    """Raise ValueError unless private_parts' bounds are as `read`'s are."""
    require_int("after_position", after_position)
    if to_position is not None:
        require_int("to_position", to_position)
    if require_int("batch_size", batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")


def validate_snapshot(name: object, position: object, event_time: object, digest: object,
                      state: object) -> None:
    """Raise ValueError unless the arguments of save_snapshot are well formed."""
    require_text("snapshot name", name)
    require_int("snapshot position", position)
    require_int("snapshot event_time", event_time)
    require_text("snapshot digest", digest)
    if not isinstance(state, bytes | bytearray | memoryview):
        raise ValueError(f"snapshot state must be bytes, got {type(state).__name__}")


def payload_text(event_id: str, payload: object) -> str:
    """The canonical JSON of a payload, which must be a mapping with str keys."""
    # A dict first: the check against the abstract Mapping costs more than the encoding.
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise ValueError(
            f"event {event_id!r}: payload must be a JSON object (a mapping), "
            f"got {type(payload).__name__}"
        )
    text = flat_json(payload)
    if text is not None:  # its keys are all str: orjson writes no other
        if "\\u0000" in text:
            _refuse_nul(event_id, payload)
        return text
    try:
        # The encoder wants a dict; a Mapping that is not one is copied first.
        text = canonical_json(payload if type(payload) is dict else dict(payload))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"event {event_id!r}: payload is not JSON-serialisable: {exc}") from exc
    # json.dumps silently turns int/float/bool/None keys into strings: the stored
    # payload would not be the one given, so refuse them.
    _require_str_keys(event_id, payload)
    # The canonical text writes a NUL as the escape \u0000, and keeps a lone surrogate as
    # it is (orjson, which wrote the flat text above, refuses one): look closer only then.
    if "\\u0000" in text or not encodes(text):
        _refuse_nul(event_id, payload)
    return text


_SCALARS = (str, int, float, bool, type(None))


def _require_str_keys(event_id: str, obj: object) -> None:
    """Raise ValueError at the first mapping key inside obj that is not a str."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if type(item) in _SCALARS:
            continue
        if isinstance(item, Mapping):
            for key, value in item.items():
                if type(key) is not str and not isinstance(key, str):
                    raise ValueError(f"event {event_id!r}: payload keys must be str, got {key!r}")
                if type(value) not in _SCALARS:
                    stack.append(value)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def private_text(event_id: str, payload: Mapping[str, object],
                 private: object) -> str | None:
    """The canonical JSON of an event's private part; None when it has none (None or {}).

    Its fields must not also be payload fields, and the payload must not carry
    `PRIVATE_KEY` itself: the journal writes the seal there.
    """
    if PRIVATE_KEY in payload:
        raise ValueError(f"event {event_id!r}: payload key {PRIVATE_KEY!r} is the journal's "
                         "own (the seal of a private part); pass private fields as `private`")
    if private is None:
        return None
    if not isinstance(private, Mapping):
        raise ValueError(f"event {event_id!r}: private part must be a JSON object (a mapping), "
                         f"got {type(private).__name__}")
    if not private:
        return None
    both = sorted(set(private) & set(payload))
    if both:
        raise ValueError(f"event {event_id!r}: field(s) {', '.join(map(repr, both))} are in "
                         "both the payload and the private part; give each field once")
    return payload_text(event_id, private)


def describe(stream: str, type_: str, time: int, text: str) -> str:
    """One line naming an event's content, for error messages."""
    return f"stream={stream!r} type={type_!r} time={time} payload={text}"


def plan(events: Sequence[NewEvent]) -> Plan:
    """Validate a batch and fold repeated ids; raise before anything is stored.

    Raises ValueError for a malformed event and IdempotencyConflict when one id
    appears twice in the batch with different content.
    """
    if isinstance(events, NewEvent) or not isinstance(events, Sequence):
        raise ValueError("append takes a sequence of NewEvent (a list), not a single event")
    candidates: list[Candidate] = []
    slots: list[int] = []
    seen: dict[str, int] = {}
    for i, event in enumerate(events):
        # Fast path for the usual exact types; the slow path explains (or accepts
        # a subclass). Messages are built only on failure: batches are large.
        if type(event) is not NewEvent and not isinstance(event, NewEvent):
            raise ValueError(f"event #{i} must be a NewEvent, got {type(event).__name__}")
        t = event.time
        if not (
            type(event.id) is str
            and event.id
            and type(event.stream) is str
            and event.stream
            and type(event.type) is str
            and event.type
            and type(t) is int
            and INT64_MIN <= t <= INT64_MAX
            and NUL not in event.id
            and NUL not in event.stream
            and NUL not in event.type
            # Past ASCII, `_explain` looks for a lone surrogate (and returns without one).
            and event.id.isascii()
            and event.stream.isascii()
            and event.type.isascii()
        ):
            _explain(i, event)
        text = payload_text(event.id, event.payload)
        private = (None if event.private is None and PRIVATE_KEY not in text
                   else private_text(event.id, event.payload, event.private))
        first = seen.get(event.id)
        if first is None:
            seen[event.id] = len(candidates)
            slots.append(len(candidates))
            candidates.append(Candidate(event, text, private))
            continue
        other = candidates[first]
        first_e = other.event
        if not other.is_same_event(Candidate(event, text, private)):
            raise IdempotencyConflict(
                f"event id {event.id!r} appears twice in one batch with different content: "
                f"{describe(first_e.stream, first_e.type, first_e.time, other.payload_text)} "
                f"and {describe(event.stream, event.type, event.time, text)}; "
                "an id names one event: give the second a new id"
            )
        slots.append(first)
    return Plan(candidates, slots)


def _explain(i: int, event: NewEvent) -> None:
    """Raise the precise ValueError for a malformed event (return if it is valid)."""
    require_text(f"event #{i} id", event.id)
    require_text(f"event {event.id!r} stream", event.stream)
    require_text(f"event {event.id!r} type", event.type)
    require_int(f"event {event.id!r} time", event.time)


def same_content(a: NewEvent | RecordedEvent, a_text: str, b: NewEvent, b_text: str) -> bool:
    """Whether two events carry the same content (stream, type, time, payload)."""
    return a.stream == b.stream and a.type == b.type and a.time == b.time and a_text == b_text


def recorded_as(old: RecordedEvent, held: str | None, c: Candidate) -> bool:
    """Whether candidate `c` is the event recorded as `old`, whose private part is `held`
    (its canonical text; None when it has none or it was erased).

    A record without a seal compares with the candidate's payload and private part
    together (a record written before its fields were kept apart). A sealed record
    compares its payload without the seal, then its private part, unless that was
    erased: what is gone cannot be compared, and the id names that event forever.
    """
    if not (old.stream == c.event.stream and old.type == c.event.type
            and old.time == c.event.time):
        return False
    payload = old.payload
    if PRIVATE_KEY not in payload:
        if c.private_text is None:
            return canonical_json(payload) == c.payload_text
        merged = {**load_json(c.payload_text), **load_json(c.private_text)}
        return canonical_json(payload) == canonical_json(merged)
    public = {k: v for k, v in payload.items() if k != PRIVATE_KEY}
    if canonical_json(public) != c.payload_text:
        return False
    return held is None or held == c.private_text


def check_existing(batch: Plan, existing: Mapping[str, RecordedEvent],
                   held: Mapping[str, str] | None = None) -> list[Candidate]:
    """Return the candidates not yet recorded; raise if a recorded id has other content.

    `held`: the private parts still stored of the existing records that have one, by id
    (canonical text); a sealed record missing from it had its part erased.
    """
    if not existing:
        return list(batch.candidates)
    fresh: list[Candidate] = []
    for c in batch.candidates:
        old = existing.get(c.event.id)
        if old is None:
            fresh.append(c)
            continue
        old_text = canonical_json(old.payload)
        if not recorded_as(old, (held or {}).get(old.id), c):
            public = {k: v for k, v in old.payload.items() if k != PRIVATE_KEY}
            if PRIVATE_KEY in old.payload and canonical_json(public) == c.payload_text:
                old_text += " (the same payload, but another private part)"
            raise IdempotencyConflict(
                f"event id {c.event.id!r} is already recorded at position {old.position} with "
                f"{describe(old.stream, old.type, old.time, old_text)}; this append has "
                f"{describe(c.event.stream, c.event.type, c.event.time, c.payload_text)}; "
                "an id names one event forever: use a new id for a different event"
            )
    return fresh


def check_expected(expected: Mapping[str, int] | None, versions: Mapping[str, int]) -> None:
    """Raise VersionConflict unless each stream is at its expected version (0 = empty)."""
    if not expected:
        return
    wrong = {
        s: (v, versions.get(s, 0)) for s, v in sorted(expected.items()) if versions.get(s, 0) != v
    }
    if wrong:
        detail = ", ".join(f"{s!r} expected {e}, is at {a}" for s, (e, a) in wrong.items())
        raise VersionConflict(
            f"stream version mismatch: {detail}; another writer appended first: "
            "re-read the stream and decide again"
        )


def validate_expected(expected: Mapping[str, int] | None) -> None:
    """Raise ValueError unless expected_versions maps non-empty str to int >= 0."""
    if expected is None:
        return
    if not isinstance(expected, Mapping):
        raise ValueError("expected_versions must be a mapping {stream: version}")
    for stream, version in expected.items():
        require_text("expected_versions stream", stream)
        if require_int(f"expected version of {stream!r}", version) < 0:
            raise ValueError(f"expected version of {stream!r} must be >= 0, got {version}")


def streams_of(batch: Sequence[Candidate], expected: Mapping[str, int] | None) -> list[str]:
    """The streams whose current version an append needs, sorted."""
    return sorted({c.event.stream for c in batch} | set(expected or ()))


def build(
    fresh: Sequence[Candidate],
    *,
    head_position: int,
    head_hash: str,
    versions: Mapping[str, int],
    recorded_at: int,
) -> list[Row]:
    """Give the fresh events their positions, versions and chained hashes."""
    rows: list[Row] = []
    current: dict[str, int] = {}  # the versions this batch gave, by stream
    prev = head_hash
    position = head_position
    for c in fresh:
        e = c.event
        position += 1
        stream = e.stream
        version = current.get(stream) or versions.get(stream, 0)
        version += 1
        current[stream] = version
        text = c.payload_text
        private: tuple[str, str] | None = None
        if c.private_text is not None:
            # A fresh random salt per record: the seal of a guessable part (a user name)
            # cannot be confirmed by hashing guesses once salt and part are erased.
            salt = secrets.token_hex(16)
            private = (salt, c.private_text)
            text = canonical_json({**load_json(text), PRIVATE_KEY: seal(salt, c.private_text)})
        payload = load_canonical(text)
        digest = record_hash_text(
            prev, position, e.id, e.stream, version, e.type, e.time, recorded_at, text
        )
        # Built with tuple.__new__, in RecordedEvent's field order: its own constructor
        # by keyword cost more than the rest of this loop.
        event = _new_record(RecordedEvent, (position, e.id, stream, version, e.type, e.time,
                                            recorded_at, payload, digest))
        rows.append(Row(event, text, private))
        prev = digest
    return rows


def results(
    batch: Plan, existing: Mapping[str, RecordedEvent], rows: Sequence[Row]
) -> list[RecordedEvent]:
    """One RecordedEvent per input event: the new record, or the original for a repeat."""
    if not existing and len(rows) == len(batch.slots):
        # The usual append: every event new, none twice in the batch.
        return [r.event for r in rows]
    by_id: dict[str, RecordedEvent] = dict(existing)
    by_id.update((r.event.id, r.event) for r in rows)
    return [by_id[batch.candidates[slot].event.id] for slot in batch.slots]


def erasure_record(record: NewEvent, erased: Sequence[str]) -> NewEvent:
    """`record` with the ids of the events it erases under `ERASED_KEY` in its payload."""
    if not isinstance(record, NewEvent):
        raise ValueError(f"the erasure record must be a NewEvent, got {type(record).__name__}")
    if ERASED_KEY in record.payload:
        raise ValueError(f"event {record.id!r}: payload key {ERASED_KEY!r} is the journal's "
                         "own (the ids an erasure erased)")
    return NewEvent(record.id, record.stream, record.type, record.time,
                    {**record.payload, ERASED_KEY: list(erased)}, record.private)


def payload_is_canonical(text: str) -> bool:
    """Whether a stored payload is the canonical JSON of an object (else it was altered)."""
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):  # nested deeper than the journal ever writes
        return False
    return isinstance(payload, dict) and canonical_json(payload) == text
