"""Checkpoints: a ledger saved in the journal's `snapshots` table, as data, never code.

A checkpoint is a cache of a fold: a facade opening a large journal starts from the
newest valid one instead of folding every event. Its bytes are (format version 1):

    b"gpu-credits checkpoint\\n"
    header: one line of JSON (sorted keys), then b"\\n"
    body: the ledger's state tree (`projections.statecopy`) encoded as MessagePack

The header holds `format` ("gpu-credits-checkpoint"), `version` (1), `position` (the
highest journal position the state covers), `chain_hash` (the journal's hash at that
position: the state belongs to that exact history), `last` (the (event time, position)
of the last event folded), `schema` (each state class and its fields, in the order the
body lists them) and `sha256`: the hex SHA-256 of the header without `sha256` (sorted
keys, no spaces) + b"\\n" + the body.

Loading parses JSON and MessagePack and builds only the known state classes (see
`projections.statecopy`), so stored bytes are never executed, whoever wrote them. A
checkpoint whose hash, format, schema or chain hash does not check out is ignored with
a one-line warning (the logger `projections.checkpoint`) and the state is folded from
the journal instead; `verify` re-derives every checkpoint from the journal.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec
import orjson

from eventstore import JournalLike, SnapshotInfo
from eventstore.hashing import GENESIS_HASH
from projections.bulk import paused_gc
from projections.ledger import STATE, Ledger
from projections.statecopy import StateFormatError

CHECKPOINT = "ledger"
"""Snapshot name under which the ledger's checkpoints are saved."""

FORMAT = "gpu-credits-checkpoint"
VERSION = 1
MAGIC = b"gpu-credits checkpoint\n"

log = logging.getLogger(__name__)

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()


class CheckpointError(ValueError):
    """Checkpoint bytes that are not a valid checkpoint of this journal."""


def chain_hash_at(journal: JournalLike, position: int) -> str:
    """The journal's chain hash at `position` (the genesis hash at 0)."""
    if position == 0:
        return GENESIS_HASH
    for rec in journal.read(after_position=position - 1, to_position=position,
                            order="position", batch_size=1):
        return rec.hash
    raise CheckpointError(f"the journal has no position {position}")


def _header_bytes(header: dict[str, Any]) -> bytes:
    return orjson.dumps(header, option=orjson.OPT_SORT_KEYS)


def encode_checkpoint(ledger: Ledger, position: int, chain_hash: str) -> bytes:
    """The bytes of a checkpoint of `ledger`, which holds every event up to `position`,
    the journal's hash there being `chain_hash`."""
    with paused_gc():
        body = _ENCODER.encode(STATE.encode(ledger))
    header: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "position": position,
        "chain_hash": chain_hash, "last": list(ledger.last), "schema": STATE.schema(),
    }
    digest = hashlib.sha256(_header_bytes(header) + b"\n" + body).hexdigest()
    return MAGIC + _header_bytes({**header, "sha256": digest}) + b"\n" + body


def decode_checkpoint(data: bytes, *, position: int, chain_hash: str) -> Ledger:
    """The ledger in checkpoint bytes that claim to cover `position`, where the journal's
    hash is `chain_hash`; `CheckpointError` (saying why) if they are anything else."""
    if not data.startswith(MAGIC):
        raise CheckpointError("not a checkpoint (no gpu-credits checkpoint header; an "
                              "old pickled one?)")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        raise CheckpointError("truncated header")
    try:
        header = orjson.loads(data[len(MAGIC):end])
    except orjson.JSONDecodeError as exc:
        raise CheckpointError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise CheckpointError("header is not a JSON object")
    if header.get("format") != FORMAT or header.get("version") != VERSION:
        raise CheckpointError(f"format {header.get('format')!r} version "
                              f"{header.get('version')!r}, expected {FORMAT!r} {VERSION}")
    body = data[end + 1:]
    claimed = header.pop("sha256", None)
    actual = hashlib.sha256(_header_bytes(header) + b"\n" + body).hexdigest()
    if claimed != actual:
        raise CheckpointError("its own hash does not match its bytes")
    if header.get("position") != position:
        raise CheckpointError(f"header says position {header.get('position')!r}, "
                              f"saved as {position}")
    if header.get("chain_hash") != chain_hash:
        raise CheckpointError(f"built from chain hash {str(header.get('chain_hash'))[:16]}…, "
                              f"the journal has {chain_hash[:16]}… at position {position}")
    if header.get("schema") != STATE.schema():
        raise CheckpointError("saved by a version of the code with other state fields")
    try:
        with paused_gc():
            ledger = STATE.decode(_DECODER.decode(body))
    except (msgspec.DecodeError, StateFormatError) as exc:
        raise CheckpointError(f"body does not decode: {exc}") from None
    if type(ledger) is not Ledger or list(ledger.last) != header.get("last"):
        raise CheckpointError("body is not the ledger the header describes")
    return ledger


def checkpoint_claim(data: bytes) -> tuple[int, str] | None:
    """(position, chain hash) a checkpoint's header says it was built from, read from the
    header alone (nothing of the body is decoded); None when the bytes have no readable
    header of this format."""
    if not data.startswith(MAGIC):
        return None
    end = data.find(b"\n", len(MAGIC))
    try:
        header = orjson.loads(data[len(MAGIC):end]) if end > 0 else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        return None
    position, chain_hash = header.get("position"), header.get("chain_hash")
    if type(position) is not int or not isinstance(chain_hash, str):
        return None
    return position, chain_hash


# -- checkpoints in a journal ------------------------------------------------------------


def save_checkpoint(journal: JournalLike, ledger: Ledger, position: int
                    ) -> SnapshotInfo | None:
    """Save `ledger`, which holds every event recorded up to `position`, as a checkpoint;
    None (with a warning) when the state cannot be encoded (an integer beyond 64 bits)."""
    try:
        state = encode_checkpoint(ledger, position, chain_hash_at(journal, position))
    except (OverflowError, msgspec.EncodeError) as exc:
        log.warning("no checkpoint at position %s: %s", position, exc)
        return None
    return journal.save_snapshot(CHECKPOINT, position, ledger.last[0], ledger.digest(), state)


def load_checkpoint(journal: JournalLike, info: SnapshotInfo) -> Ledger:
    """The ledger a saved checkpoint holds; `CheckpointError` if it does not check out."""
    data = journal.load_snapshot(info.id)
    ledger = decode_checkpoint(data, position=info.position,
                               chain_hash=chain_hash_at(journal, info.position))
    if ledger.last[0] != info.event_time:
        raise CheckpointError(f"state ends at time {ledger.last[0]}, saved as "
                              f"{info.event_time}")
    return ledger


def checkpoint_is_valid(journal: JournalLike, info: SnapshotInfo) -> bool:
    """Valid while no event recorded after it lands before its last event on the timeline."""
    return checkpoint_is_valid_at(journal, info.position, info.event_time)


def checkpoint_is_valid_at(journal: JournalLike, position: int, event_time: int) -> bool:
    """Whether a state of every event up to `position`, the last of them on the timeline
    at `event_time`, is still the timeline's state there (no later arrival before it)."""
    for _ in journal.read(after_position=position, to_time=event_time - 1,
                          order="position", batch_size=1):
        return False
    return True


def checkpoint_before(journal: JournalLike, key: tuple[int, int], max_position: int
                      ) -> tuple[tuple[int, int], Ledger] | None:
    """The newest valid checkpoint whose state lies wholly before `key` = (event time,
    position) on the timeline and covers no position after `max_position`, loaded; None
    if there is none."""
    candidates = [info for info in journal.snapshots(CHECKPOINT)
                  if info.event_time <= key[0] and info.position <= max_position]
    for _, ledger in valid_checkpoints(journal, candidates,
                                       key=lambda s: (s.event_time, s.position, s.id)):
        if ledger.last < key:
            return ledger.last, ledger
    return None


def latest_valid_checkpoint(journal: JournalLike) -> tuple[SnapshotInfo, Ledger] | None:
    """The newest checkpoint still valid, loaded (invalid ones are skipped, not dropped)."""
    for found in valid_checkpoints(journal, journal.snapshots(CHECKPOINT),
                                   key=lambda s: (s.position, s.id)):
        return found
    return None


def valid_checkpoints(journal: JournalLike, infos: Iterable[SnapshotInfo],
                      key: Callable[[SnapshotInfo], tuple[int, ...]]
                      ) -> Iterator[tuple[SnapshotInfo, Ledger]]:
    """The valid ones among `infos`, newest (by `key`) first, each loaded when reached;
    one that does not check out is skipped with a warning."""
    for info in sorted(infos, key=key, reverse=True):
        if not checkpoint_is_valid(journal, info):
            continue
        try:
            ledger = load_checkpoint(journal, info)
        except (CheckpointError, KeyError) as exc:
            log.warning("checkpoint %s at position %s ignored (%s): folding from the "
                        "journal instead", info.id, info.position, exc)
            continue
        yield info, ledger


def invalidate_after(journal: JournalLike, late_time: int) -> int:
    """A late event at `late_time` makes every checkpoint after that time stale."""
    return journal.drop_snapshots(CHECKPOINT, from_time=late_time + 1)
