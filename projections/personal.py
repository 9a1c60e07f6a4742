"""Personal fields: kept beside the chain, shown where people read them, and erasable.

`user` (on usage reports and job submits) and `memo` (on any event) are about people, and
no figure depends on them. Every event appended through this package keeps them out of
the journal record: the record carries only their salted hash (the journal's seal, which
the chain covers), and the fields themselves live beside it as the record's private part
(`eventstore.NewEvent.private`). Erasing deletes that part: the record, its seal and every
hash stay, so `verify` still passes, every figure and digest is unchanged, and an anchor
taken before the erasure still holds. The erasure itself is an event (`erase`) naming the
events it erased, never the person. docs/operations.md, "Erasing personal data", says what
is and is not erased.

A record written before personal fields were kept apart carries its memo inline; it is
shown as such and cannot be erased without breaking the chain (nothing of it is deleted).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from eventstore import ERASED_KEY, PRIVATE_KEY, Erasure, JournalLike, NewEvent, RecordedEvent
from eventstore import appending as _appending
from eventstore.hashing import load_json
from projections.events import (
    DomainEvent,
    from_journal_keys,
    optional_text,
    require_name,
    split_personal,
    to_payload,
)
from projections.replay import rows_of_type
from projections.validation import spelled_like

ERASURE_STREAM = "$erasures"
"""The stream erasure events are recorded in (they belong to no account)."""

_BATCH = 500


def journal_event(event_id: str, stream: str, time: int, event: DomainEvent) -> NewEvent:
    """The journal event for `event`: its personal fields as the record's private part."""
    public, personal = split_personal(to_payload(event))
    return NewEvent(event_id, stream, event.type, time, public, personal)


def kept_apart(new: NewEvent) -> NewEvent:
    """`new` with the personal fields of its payload moved to its private part."""
    public, personal = split_personal(new.payload)
    if personal is None:
        return new
    return NewEvent(new.id, new.stream, new.type, new.time, public,
                    {**(new.private or {}), **personal})


def line_fields(rec: RecordedEvent, personal: dict[str, Any] | None = None) -> dict[str, Any]:
    """A record's fields as an import line holds them: the payload without the journal's
    own keys (an erasure's ids as `events`), and the personal fields still held."""
    fields = from_journal_keys(rec.type, rec.payload)
    if personal:
        fields.update(personal)
    return fields


def with_personal(journal: JournalLike, records: Iterable[RecordedEvent]
                  ) -> Iterator[tuple[RecordedEvent, dict[str, Any]]]:
    """Each record with its personal fields still held beside it ({} when it has none, or
    they were erased), fetched a batch at a time. A part altered beside the chain raises
    `eventstore.ChainBroken` at its record's position."""
    batch: list[RecordedEvent] = []
    for rec in records:
        batch.append(rec)
        if len(batch) >= _BATCH:
            yield from _with_held(journal, batch)
            batch = []
    yield from _with_held(journal, batch)


def _with_held(journal: JournalLike, batch: Sequence[RecordedEvent]
               ) -> Iterator[tuple[RecordedEvent, dict[str, Any]]]:
    sealed = [rec.id for rec in batch if PRIVATE_KEY in rec.payload]
    held = journal.private(sealed) if sealed else {}
    for rec in batch:
        yield rec, held.get(rec.id, {})


def personal_of(journal: JournalLike, rec: RecordedEvent) -> dict[str, Any]:
    """The personal fields of one record: held beside it, or inline in an old record."""
    inline = {k: rec.payload[k] for k in inline_fields(rec)}
    if PRIVATE_KEY not in rec.payload:
        return inline
    return {**inline, **journal.private([rec.id]).get(rec.id, {})}


def inline_fields(rec: RecordedEvent) -> list[str]:
    """The personal fields a record carries inline in its chained payload (written before
    they were kept apart): shown, and never erasable without breaking the chain."""
    return [k for k in ("user", "memo") if k in rec.payload]


def same_event(journal: JournalLike, old: RecordedEvent, new: NewEvent) -> bool:
    """Whether `new` is the event recorded as `old` (the journal's own rule: an erased
    part compares equal to anything, a record with inline fields to them kept apart)."""
    held = None
    if PRIVATE_KEY in old.payload:
        part = journal.private([old.id]).get(old.id)
        held = None if part is None else _appending.payload_text(old.id, part)
    return _appending.recorded_as(old, held, _appending.Candidate.of(new))


def same_new_event(a: NewEvent, b: NewEvent) -> bool:
    """Whether two events not yet recorded are one event (the journal's rule for an id
    repeated in one batch: the same stream, type, time, payload and private part)."""
    return _appending.Candidate.of(a).is_same_event(_appending.Candidate.of(b))


# -- erasure -----------------------------------------------------------------------------


def events_of_user(journal: JournalLike, user: str) -> list[str]:
    """The ids of the events whose personal fields (still held) name `user`."""
    require_name("user", user)
    return [event_id for _, event_id, fields in journal.private_parts()
            if fields.get("user") == user]


def users_like(journal: JournalLike, user: str) -> list[str]:
    """The users whose personal fields are held under a spelling other than `user` that
    differs only in letter case, spaces or Unicode form (`Alice Smith` for `alice  smith`):
    an erasure request that names none of them exactly has found nothing, and should say
    whom it may have meant."""
    held = {fields.get("user") for _, _, fields in journal.private_parts()}
    return spelled_like(user, (u for u in held if isinstance(u, str)))


def erased_ids(journal: JournalLike) -> frozenset[str]:
    """The ids of the events the journal's `erase` events name."""
    named: set[str] = set()
    for row in rows_of_type(journal, "erase"):
        payload = load_json(row[4]) if isinstance(row[4], str) else row[4]
        ids = payload.get(ERASED_KEY) if isinstance(payload, dict) else None
        named.update(i for i in ids or () if isinstance(i, str))
    return frozenset(named)


def erase_user(journal: JournalLike, user: str, *, reason: str | None = None,
               event_id: str | None = None) -> Erasure:
    """Erase the personal fields (user and memo) of every event naming `user`.

    One `erase` event is appended, naming the events (never the user); nothing when
    nothing of `user` is held any more (never recorded, or already erased): erasing twice
    is a no-op. Every figure, digest, hash and anchor stays as it was.
    """
    return erase_events(journal, events_of_user(journal, user), reason=reason,
                        event_id=event_id)


def erase_events(journal: JournalLike, ids: Iterable[str], *, reason: str | None = None,
                 event_id: str | None = None) -> Erasure:
    """Erase the personal fields of these events (those without any held are skipped),
    recording one `erase` event; see `erase_user`."""
    optional_text("reason", reason)
    wanted = [require_name("event id", i) for i in ids]
    record_id = require_name("event_id", event_id) if event_id is not None else (
        f"erase-{secrets.token_hex(8)}")
    latest = journal.max_time()
    # At the journal's latest event time: an erasure moves no figure, so it must not move
    # the end of the timeline either (nor be a late event that refolds anything).
    record = NewEvent(record_id, ERASURE_STREAM, "erase", 0 if latest is None else latest,
                      {"reason": reason} if reason is not None else {})
    return journal.erase(wanted, record)
