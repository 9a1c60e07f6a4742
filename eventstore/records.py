"""The values the journal takes and gives back: new events, recorded events, snapshots."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append: its idempotency key, stream, type, event time and JSON payload."""

    id: str
    stream: str
    type: str
    time: int
    payload: Mapping[str, Any]


class RecordedEvent(NamedTuple):
    """An event as the journal holds it, with its place in the journal and in the chain.

    Immutable like the dataclasses here, but a named tuple: a replay builds one per row,
    and a tuple costs a tenth of a frozen dataclass to build.
    """

    position: int  # gapless global arrival sequence, from 1
    id: str  # idempotency key
    stream: str
    version: int  # per-stream version, from 1
    type: str
    time: int  # event time
    recorded_at: int  # wall clock at append, microseconds since the Unix epoch (UTC)
    payload: Mapping[str, Any]
    hash: str  # hex SHA-256 over the previous hash and this record's canonical bytes


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """A saved projection state: a cache of a fold, never truth."""

    id: int
    name: str
    position: int  # highest journal position the state covers (as known)
    event_time: int  # the state covers every event with (time, position) <= (event_time, position)
    digest: str
