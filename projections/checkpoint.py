"""Checkpoints: a ledger saved in the journal's `snapshots` table, as data, never code.

A checkpoint is a cache of a fold: a facade opening a large journal starts from the
newest valid one instead of folding every event, and a query reads from it only what its
question needs (one account, every account's figures, the job list). Its bytes are
(format version 6):

    b"gpu-credits checkpoint\\n"
    header: one line of JSON (sorted keys), then b"\\n"
    body: MessagePack, an array of five sections (below)

The header holds `format` ("gpu-credits-checkpoint"), `version` (6), `position` (the
highest journal position the state covers), `chain_hash` (the journal's hash at that
position: the state belongs to that exact history), `last` (the (event time, position)
of the last event folded), `schema` (each state class and its fields, in the order the
body lists them) and `sha256`: the hex SHA-256 of the header without `sha256` (sorted
keys, no spaces) + b"\\n" + the body.

The body's sections, each decoded only when asked for (`CheckpointView`):

    [0] the ledger without its accounts and jobs: a state tree (`projections.statecopy`)
    [1] the account names, in the ledger's order
    [2] per account (same order), the MessagePack bytes of its `AccountState` tree: an
        account's state refers to nothing outside it (its queue and holds name jobs by id)
    [3] the MessagePack bytes of the job index in columns (`_encode_jobs`): the fields
        of `JobState`, the ids of the live jobs, their number, then one column per field
    [4] the MessagePack bytes of a summary at the checkpoint's own time: each account's
        figures (`projections.figures`) and the credits of each that end (expire or are
        voided), unused or held: what `accounts` and `expiring` report

So `balance` decodes one account, `accounts` and `expiring` the summary, `jobs` the job
columns only, and a facade the whole ledger (the live jobs are the same objects in
`jobs` and `live`, as in the fold).

Loading parses JSON and MessagePack and builds only the known state classes (see
`projections.statecopy`), so stored bytes are never executed, whoever wrote them. A
checkpoint whose hash, format, version, schema or chain hash does not check out (one of
an older format version among them) is ignored with a one-line warning (the logger
`projections.checkpoint`) and the state is folded from the journal instead; the next
`replay` saves fresh ones. `verify` re-derives every checkpoint from the journal, and
reports one that does not check out as a failure, except one that is only out of date
(`StaleCheckpoint`: sealed and bound to the chain, but of another version or state
schema), which it passes over with the same warning.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import msgspec
import orjson

from eventstore import JournalError, JournalLike, SnapshotInfo
from projections.bulk import paused_gc
from projections.copying import SCALARS
from projections.figures import Ending, Figures, ending_credits
from projections.jobqueue import PENDING
from projections.ledger import STATE, AccountState, JobState, Ledger
from projections.reversals import reversed_ids
from projections.statecopy import StateFormatError

MIN_EVENT_TIME = -(2**63)
"""The event time of a state that holds no event on the timeline (see `Ledger.last`)."""

CHECKPOINT = "ledger"
"""Snapshot name under which the ledger's checkpoints are saved."""

FORMAT = "gpu-credits-checkpoint"
VERSION = 6
"""The format version. 6: an account's fair-share usage is two numbers, whole half-lives
and the rest, and so is its key in the queue's heads, where each was one float (too
coarse, at Unix-scale times and short half-lives, for equal usage per share to tie).
5: the ledger's `heads` is a dict of heaps, one per fair-share half-life, where it was
one heap: the queue compares accounts of different half-lives by their usage at the
pick's time (a version 4 tree would decode to a queue of the wrong shape). 4: the bytes
of 3, but an account whose half-life changed while it
had fair-share usage holds that usage re-expressed under the new half-life, where a fold
before it kept it as under the old one (scaled out of all proportion): a version 3
checkpoint of such an account would answer otherwise than the fold, so it is stale.
3: the bytes of 2, but the state keeps every pool an account was granted, used or owed in
(its key in `CreditBook.active`, at 0), which a fold before it dropped once the pool's
debt was paid; the digest does not cover those keys, so a version 2 checkpoint would pass
every check and answer without the pool: it is stale instead."""
MAGIC = b"gpu-credits checkpoint\n"

log = logging.getLogger(__name__)

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder()
_BODY = msgspec.msgpack.Decoder(tuple[Any, list[str], list[bytes], bytes, bytes])
# The summary, validated as it is decoded: (time, per account (opened, running,
# max_running, balance, reserved, available, debt, pools), per account its endings).
_SUMMARY = msgspec.msgpack.Decoder(tuple[
    int, list[tuple[bool, int, int | None, int, int, int, int, dict[str, int]]],
    list[list[tuple[str, str, int, int, int, bool]]]])


class Summary(NamedTuple):
    """What reports over every account read at the checkpoint's own time, per account:
    (figures, opened, running, max_running), and its credits that end (`Ending`)."""

    accounts: dict[str, tuple[Figures, bool, int, int | None]]
    endings: dict[str, list[Ending]]

_JOB_FIELDS: tuple[str, ...] = tuple(STATE.schema()[JobState.__name__])
# A job is built by its constructor when it takes every field in encoding order (much
# faster than one attribute at a time), else field by field.
_JOB_BY_CONSTRUCTOR = JobState.STATE_FIELDS == _JOB_FIELDS  # what its constructor takes
# Column encodings: strings through a table of distinct values, tuples as lists, the rest
# as they are.
_COL_STR, _COL_TUPLE, _COL_PLAIN = 0, 1, 2


class CheckpointError(ValueError):
    """Checkpoint bytes that are not a valid checkpoint of this journal."""


class StaleCheckpoint(CheckpointError):
    """A checkpoint intact and of this journal's chain (its seal matches its bytes, its
    chain hash the journal's), saved by code of another format version or with other
    state fields: a cache out of date, not damage. This code cannot read it; the next
    `replay` saves one in the current format."""


def chain_hash_at(journal: JournalLike, position: int) -> str:
    """The journal's chain hash at `position` (the genesis hash at 0), as stored
    (`anchors.hash_at`)."""
    from projections.anchors import hash_at

    try:
        return hash_at(journal, position)
    except KeyError:
        raise CheckpointError(f"the journal has no position {position}") from None


def _header_bytes(header: dict[str, Any]) -> bytes:
    return orjson.dumps(header, option=orjson.OPT_SORT_KEYS)


def _encode_column(values: list[Any]) -> list[Any]:
    if all(type(v) is str for v in values):
        table: dict[str, int] = {}
        indices = [table.setdefault(v, len(table)) for v in values]
        if len(table) <= len(values) // 2:  # repeated values (not ids): one string each
            return [_COL_STR, list(table), indices]
        return [_COL_PLAIN, values]
    if any(type(v) is tuple for v in values):
        out: list[list[Any] | None] = []
        for v in values:
            if type(v) is tuple and all(type(x) in SCALARS for x in v):
                out.append(list(v))
            elif v is None:
                out.append(None)
            else:
                raise TypeError(f"cannot encode a job field holding {v!r}")
        return [_COL_TUPLE, out]
    if not all(type(v) in SCALARS for v in values):
        raise TypeError("cannot encode a job field holding a value that is not a scalar")
    return [_COL_PLAIN, values]


def _decode_column(column: Any, size: int) -> list[Any]:
    kind = column[0]
    if kind == _COL_STR:
        table, indices = column[1], column[2]
        if not all(type(v) is str for v in table):
            raise CheckpointError("a job column's table holds a value that is not text")
        values = list(map(table.__getitem__, indices))
    elif kind == _COL_TUPLE:
        values = [None if v is None else tuple(v) for v in column[1]]
    elif kind == _COL_PLAIN:
        values = column[1]
    else:
        raise CheckpointError(f"unknown job column encoding {kind!r}")
    if len(values) != size:
        raise CheckpointError(f"a job column holds {len(values)} values, expected {size}")
    return values


def _encode_jobs(ledger: Ledger) -> bytes:
    jobs = list(ledger.jobs.values())
    columns = [_encode_column([getattr(j, name) for j in jobs]) for name in _JOB_FIELDS]
    return _ENCODER.encode([list(_JOB_FIELDS), list(ledger.live), len(jobs), *columns])


def _encode_summary(ledger: Ledger) -> bytes:
    at = ledger.last[0]
    rows = []
    for state in ledger.accounts.values():
        f = Figures.of(state, at)
        rows.append((state.opened, state.running, state.max_running, f.balance, f.reserved,
                     f.available, f.debt, f.pools))
    return _ENCODER.encode((at, rows, [ending_credits(s) for s in ledger.accounts.values()]))


def encode_checkpoint(ledger: Ledger, position: int, chain_hash: str) -> bytes:
    """The bytes of a checkpoint of `ledger`, which holds every event up to `position`,
    the journal's hash there being `chain_hash`."""
    accounts, jobs, live = ledger.accounts, ledger.jobs, ledger.live
    with paused_gc():
        ledger.accounts, ledger.jobs, ledger.live = {}, {}, {}
        try:
            rest = STATE.encode(ledger)
        finally:
            ledger.accounts, ledger.jobs, ledger.live = accounts, jobs, live
        body = _ENCODER.encode([
            rest, list(accounts),
            [_ENCODER.encode(STATE.encode(state)) for state in accounts.values()],
            _encode_jobs(ledger), _encode_summary(ledger)])
    header: dict[str, Any] = {
        "format": FORMAT, "version": VERSION, "position": position,
        "chain_hash": chain_hash, "last": list(ledger.last), "schema": STATE.schema(),
    }
    digest = hashlib.sha256(_header_bytes(header) + b"\n" + body).hexdigest()
    return MAGIC + _header_bytes({**header, "sha256": digest}) + b"\n" + body


class CheckpointView:
    """A checkpoint whose bytes checked out (hash, header, chain), decoded only as far as
    a question needs: every call decodes afresh, so what it returns is the caller's own.
    """

    __slots__ = ("_accounts", "_index", "_jobs", "_rest", "_summary", "last", "names",
                 "position")

    def __init__(self, body: bytes, position: int, last: list[Any]) -> None:
        try:
            self._rest, self.names, self._accounts, self._jobs, self._summary = \
                _BODY.decode(body)
        except msgspec.DecodeError as exc:  # includes a validation error
            raise CheckpointError(f"body does not decode: {exc}") from None
        if len(self.names) != len(self._accounts):
            raise CheckpointError(f"{len(self.names)} account names for "
                                  f"{len(self._accounts)} accounts")
        self._index = {name: i for i, name in enumerate(self.names)}
        self.position = position
        skeleton = self.skeleton()
        if list(skeleton.last) != last:
            raise CheckpointError("body is not the ledger the header describes")
        self.last: tuple[int, int] = skeleton.last

    def skeleton(self) -> Ledger:
        """The ledger without accounts or jobs: counters, anomalies, corrections."""
        try:
            with paused_gc():
                ledger = STATE.decode(self._rest)
        except StateFormatError as exc:
            raise CheckpointError(f"body does not decode: {exc}") from None
        if type(ledger) is not Ledger or ledger.accounts or ledger.jobs or ledger.live:
            raise CheckpointError("body is not the ledger the header describes")
        return ledger

    def summary(self) -> Summary:
        """Every account's figures at the checkpoint's own time (`last`), and the credits
        of each that end: what `accounts` and `expiring` read without decoding an account."""
        try:
            at, rows, endings = _SUMMARY.decode(self._summary)
        except msgspec.DecodeError as exc:
            raise CheckpointError(f"summary does not decode: {exc}") from None
        if at != self.last[0] or len(rows) != len(self.names) or len(endings) != len(rows):
            raise CheckpointError("summary is not of the accounts the checkpoint holds")
        return Summary(
            {name: (Figures(balance, reserved, available, debt, pools), opened, running, cap)
             for name, (opened, running, cap, balance, reserved, available, debt, pools)
             in zip(self.names, rows, strict=True)},
            dict(zip(self.names, endings, strict=True)))

    def account(self, name: str) -> AccountState | None:
        """The account `name` as the checkpoint holds it; None if it holds no such account."""
        i = self._index.get(name)
        return None if i is None else self._decode_account(i)

    def _decode_account(self, i: int) -> AccountState:
        try:
            state = STATE.decode(_DECODER.decode(self._accounts[i]))
        except (msgspec.DecodeError, StateFormatError) as exc:
            raise CheckpointError(f"account {self.names[i]!r} does not decode: {exc}") from None
        if type(state) is not AccountState or state.name != self.names[i]:
            raise CheckpointError(f"account {self.names[i]!r} is not an account's state")
        return state

    def accounts(self) -> dict[str, AccountState]:
        """Every account, in the ledger's order."""
        with paused_gc():
            return {name: self._decode_account(i) for i, name in enumerate(self.names)}

    def job_columns(self) -> tuple[dict[str, list[Any]], list[str]]:
        """The job index as columns ({field: values}, in submit order) and the ids of the
        live jobs: what a job list reads without building a job object per row."""
        try:
            fields, live, size, *columns = _DECODER.decode(self._jobs)
            if fields != list(_JOB_FIELDS) or len(columns) != len(fields):
                raise CheckpointError("job index saved with other job fields")
            if type(size) is not int or not all(type(j) is str for j in live):
                raise CheckpointError("job index has a bad size or live job id")
            with paused_gc():
                decoded = {name: _decode_column(col, size)
                           for name, col in zip(fields, columns, strict=True)}
        except (msgspec.DecodeError, IndexError, TypeError, ValueError) as exc:
            if isinstance(exc, CheckpointError):
                raise
            raise CheckpointError(f"job index does not decode: {exc}") from None
        if not all(type(j) is str for j in decoded["id"]):
            raise CheckpointError("job index has an id that is not text")
        return decoded, live

    def jobs(self, account: str | None = None,
             decoded: tuple[dict[str, list[Any]], list[str]] | None = None
             ) -> tuple[dict[str, JobState], dict[str, JobState]]:
        """The job index and the live jobs (the same objects), as the fold holds them;
        with `account`, only that account's jobs. `decoded`: what `job_columns` gave,
        when the caller has it already."""
        columns, live_ids = self.job_columns() if decoded is None else decoded
        values = [columns[name] for name in _JOB_FIELDS]
        if account is not None:
            mine = [i for i, owner in enumerate(columns["account"]) if owner == account]
            values = [[column[i] for i in mine] for column in values]
        with paused_gc():
            made = _make_jobs(values)
            jobs = {job.id: job for job in made}
        if len(jobs) != len(made):
            raise CheckpointError("job index holds an id twice")
        try:
            live = {job_id: jobs[job_id] for job_id in live_ids
                    if account is None or job_id in jobs}
        except KeyError as exc:
            raise CheckpointError(f"live job {exc} is not in the job index") from None
        return jobs, live

    def ledger(self) -> Ledger:
        """The whole ledger."""
        ledger = self.skeleton()
        ledger.accounts = self.accounts()
        ledger.jobs, ledger.live = self.jobs()
        return ledger


def disagreement(view: CheckpointView, ledger: Ledger, folded: Ledger) -> str | None:
    """What a checkpoint (`view`, and `ledger` decoded from it) holds otherwise than
    `folded`, the fold of the journal up to its position; None when it holds the same.

    The state digest covers what decides a figure now, not all that answers read: a
    refill rate, a grant's priority, a job's times, the summary `accounts` and `expiring`
    read. Its seal is a plain hash that whoever can write the database can redo, so a
    checkpoint re-sealed with an account's refill rate or summary row changed matched
    its recorded digest and the fold's, and `balance --at` or `accounts` answered from
    it while `verify` passed. So every account and job is compared whole, and the
    summary with the fold's own. Not compared: the order of dicts and the lazy entries
    of the queues (`_comparable`), which differ with the order events arrived in and
    change no answer.
    """
    skeleton = view.skeleton()
    for name in ("last", "applied", "rejected", "excluded", "reversals", "voids", "policy"):
        if getattr(skeleton, name) != getattr(folded, name):
            return f"its ledger's {name} is not the fold's"
    if sorted(skeleton.anomalies) != sorted(folded.anomalies):
        return "its anomalies are not the fold's"
    if ledger.accounts.keys() != folded.accounts.keys():
        return "it holds other accounts than the fold"
    for name, state in folded.accounts.items():
        if _comparable(ledger.accounts[name], ledger.live) != _comparable(state, folded.live):
            return f"account {name!r} is not the fold's"
    if ledger.jobs.keys() != folded.jobs.keys() or ledger.live.keys() != folded.live.keys():
        return "it holds other jobs than the fold"
    for job_id, job in folded.jobs.items():
        if STATE.encode(ledger.jobs[job_id]) != STATE.encode(job):
            return f"job {job_id!r} is not the fold's"
    summary = view.summary()
    for name, state in folded.accounts.items():
        figures = Figures.of(state, folded.last[0])
        row = (figures, state.opened, state.running, state.max_running)
        if summary.accounts[name] != row:
            return f"its summary of account {name!r} is not the fold's"
        if sorted(summary.endings[name]) != sorted(ending_credits(state)):
            return f"its summary of account {name!r}'s ending credits is not the fold's"
    return None


def _comparable(account: AccountState, live: Mapping[str, JobState]) -> Any:
    """The encoded state of `account` with its queue as the entries that still count:
    sorted, each naming a job pending in `live` with the entry's priority and submit
    (the rest are lazy leftovers, which a live projection and a fold hold differently),
    and no registered head (derived from the queue)."""
    queue, head_key = account.queue, account.head_key
    account.queue = sorted(entry for entry in queue if _pending(entry, live))
    account.head_key = None
    try:
        return STATE.encode(account)
    finally:
        account.queue, account.head_key = queue, head_key


def _pending(entry: tuple[int, int, int, str], live: Mapping[str, JobState]) -> bool:
    job = live.get(entry[3])
    return (job is not None and job.state == PENDING and -job.priority == entry[0]
            and job.order == (entry[1], entry[2]))


def _make_jobs(values: list[list[Any]]) -> list[JobState]:
    """Jobs from columns of their fields, in encoding order."""
    if _JOB_BY_CONSTRUCTOR:
        return list(map(JobState, *values))
    made = []  # pragma: no cover - only if JobState's constructor changes shape
    for row in zip(*values, strict=True):
        job = JobState.__new__(JobState)  # compiled, object.__new__ refuses it
        for name, value in zip(_JOB_FIELDS, row, strict=True):
            setattr(job, name, value)
        made.append(job)
    return made


def open_checkpoint(data: bytes, *, position: int, chain_hash: str) -> CheckpointView:
    """Checkpoint bytes that claim to cover `position`, where the journal's hash is
    `chain_hash`, checked and opened for reading; `CheckpointError` (saying why) if they
    are anything else."""
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
    if header.get("format") != FORMAT:
        raise CheckpointError(f"format {header.get('format')!r} version "
                              f"{header.get('version')!r}, expected {FORMAT!r} {VERSION}")
    # The seal and the binding to the chain first, whatever the version (every version
    # so far seals and binds the same way): bytes altered since they were saved are
    # refused as such, never passed over as merely out of date.
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
    if header.get("version") != VERSION:
        raise StaleCheckpoint(f"format {header.get('format')!r} version "
                              f"{header.get('version')!r}, expected {FORMAT!r} {VERSION}")
    if header.get("schema") != STATE.schema():
        raise StaleCheckpoint("saved by a version of the code with other state fields")
    last = header.get("last")
    if not isinstance(last, list):
        raise CheckpointError("header has no last event")
    return CheckpointView(body, position, last)


def decode_checkpoint(data: bytes, *, position: int, chain_hash: str) -> Ledger:
    """The ledger in checkpoint bytes that claim to cover `position`, where the journal's
    hash is `chain_hash`; `CheckpointError` (saying why) if they are anything else."""
    return open_checkpoint(data, position=position, chain_hash=chain_hash).ledger()


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
    return load_view(journal, info).ledger()


def load_view(journal: JournalLike, info: SnapshotInfo) -> CheckpointView:
    """A saved checkpoint, checked and opened for reading what a question needs;
    `CheckpointError` if it does not check out."""
    data = journal.load_snapshot(info.id)
    view = open_checkpoint(data, position=info.position,
                           chain_hash=chain_hash_at(journal, info.position))
    if view.last[0] != info.event_time:
        raise CheckpointError(f"state ends at time {view.last[0]}, saved as "
                              f"{info.event_time}")
    return view


def checkpoint_is_valid(journal: JournalLike, info: SnapshotInfo) -> bool:
    """Valid while no event recorded after it lands before its last event on the timeline."""
    return checkpoint_is_valid_at(journal, info.position, info.event_time)


def checkpoint_is_valid_at(journal: JournalLike, position: int, event_time: int) -> bool:
    """Whether a state of every event up to `position`, the last of them on the timeline
    at `event_time`, is still the timeline's state there (no later arrival before it)."""
    if event_time <= MIN_EVENT_TIME:
        # A state of no event on the timeline (all of them reversed): nothing can arrive
        # before the timeline's start.
        return True
    for _ in journal.read(after_position=position, to_time=event_time - 1,
                          order="position", batch_size=1):
        return False
    return True


def checkpoint_before(journal: JournalLike, key: tuple[int, int], max_position: int,
                      reversals: Mapping[str, str]) -> tuple[tuple[int, int], Ledger] | None:
    """The newest valid checkpoint whose state lies wholly before `key` = (event time,
    position) on the timeline and covers no position after `max_position`, loaded; None
    if there is none. `reversals`: every reversal known at `max_position` ({reversal id:
    target id}); a checkpoint holding an event one of them took out (or brought back)
    since it was saved is passed over."""
    candidates = [info for info in journal.snapshots(CHECKPOINT)
                  if info.event_time <= key[0] and info.position <= max_position]
    for info, ledger in valid_checkpoints(journal, candidates,
                                          key=lambda s: (s.event_time, s.position, s.id)):
        if ledger.last < key and reversals_agree(journal, ledger, info.position, reversals):
            return ledger.last, ledger
    return None


def reversals_agree(journal: JournalLike, ledger: Ledger, position: int,
                    reversals: Mapping[str, str]) -> bool:
    """Whether a state of the events up to `position` holds in the fold, and leaves out,
    the events `reversals` (known later) say: a reversal recorded after the state, of an
    event in it, is not undone by folding on from it (a reversal takes its event out at
    every time, whatever its own time, so no time check catches it)."""
    if reversals == ledger.reversals:
        return True
    # Reversals are rare corrections: each event whose standing changed, looked up.
    for event_id in reversed_ids(reversals) ^ reversed_ids(ledger.reversals):
        found = journal.get(event_id)
        if found is not None and found.position <= position:
            return False
    return True


def latest_valid_checkpoint(journal: JournalLike) -> tuple[SnapshotInfo, Ledger] | None:
    """The newest checkpoint still valid, loaded (invalid ones are skipped, not dropped)."""
    for found in valid_checkpoints(journal, journal.snapshots(CHECKPOINT),
                                   key=lambda s: (s.position, s.id)):
        return found
    return None


def resume_point(journal: JournalLike) -> tuple[SnapshotInfo, Ledger] | None:
    """The newest checkpoint that checks out, loaded, for a live projection to resume
    from, whether or not events recorded after it land before it.

    A projection takes the events recorded after its starting point in arrival order and
    puts a late one in its place as it comes (`Projector`), so a state of every event
    up to a position is a right start even when later arrivals land before its end:
    passing it over (as a query, which folds in canonical order, must) left a service
    restarted under a steady stream of late usage reports to fold its whole journal."""
    for found in valid_checkpoints(journal, journal.snapshots(CHECKPOINT),
                                   key=lambda s: (s.position, s.id), timely=False):
        return found
    return None


def valid_checkpoints(journal: JournalLike, infos: Iterable[SnapshotInfo],
                      key: Callable[[SnapshotInfo], tuple[int, ...]], *,
                      timely: bool = True) -> Iterator[tuple[SnapshotInfo, Ledger]]:
    """The valid ones among `infos`, newest (by `key`) first, each loaded when reached;
    one that does not check out is skipped with a warning. `timely=False`: one that
    events recorded after it land before counts too (see `resume_point`)."""
    for info, view in valid_views(journal, infos, key, timely=timely):
        try:
            ledger = view.ledger()
        except CheckpointError as exc:
            ignored_checkpoint(info, exc)
            continue
        yield info, ledger


def valid_views(journal: JournalLike, infos: Iterable[SnapshotInfo],
                key: Callable[[SnapshotInfo], tuple[int, ...]], *,
                timely: bool = True) -> Iterator[tuple[SnapshotInfo, CheckpointView]]:
    """`valid_checkpoints`, each opened (checked) but not decoded."""
    for info in sorted(infos, key=key, reverse=True):
        if timely and not checkpoint_is_valid(journal, info):
            continue
        try:
            view = load_view(journal, info)
        except (CheckpointError, KeyError) as exc:
            if isinstance(exc, KeyError) and not still_saved(journal, info):
                # Dropped since it was listed (a replay replacing it, a service thinning
                # them at its stop): a cache gone, nothing to warn of or to replay for.
                continue
            ignored_checkpoint(info, exc)
            continue
        yield info, view


def still_saved(journal: JournalLike, info: SnapshotInfo) -> bool:
    """Whether the checkpoint `info` is still among the journal's saved ones."""
    return any(saved.id == info.id for saved in journal.snapshots(CHECKPOINT))


def ignored_checkpoint(info: SnapshotInfo, exc: Exception) -> None:
    """Warn, in one line, that a checkpoint is passed over and why: the reader goes on
    to the next older one that checks out, or folds from the start without one."""
    log.warning("checkpoint %s at position %s ignored (%s): starting from an older "
                "checkpoint, or the journal's first event, instead (gpu-credits replay "
                "saves fresh checkpoints)", info.id, info.position, exc)


SPACING = 10_000
"""The closest two checkpoints `thin_checkpoints` keeps (or a sixteenth of the earlier
one's position, if more): what `replay` spaces its own by at least."""


def thin_checkpoints(journal: JournalLike, every: int = SPACING) -> int:
    """Drop the checkpoints saved closer together than a replay spaces its own; return
    how many. From the oldest on, one is kept when it lies at least `min(every, SPACING)`
    events, and a sixteenth of the last kept one's position, after the last kept one;
    the newest is always kept.

    A service saves one at every graceful stop: restarted after every few decisions, it
    kept every one (each a whole copy of the state: 1.2 MB at 10^5 events), and `verify`
    re-derives each. Those a replay or a running service saved are spaced wider and
    stay, and so does every one kept before (only the previous newest goes, once a newer
    one lies too close to the one before it). Tidying, as `invalidate_after`: a failure
    to drop leaves them, and a reader that listed one dropped meanwhile passes it over."""
    saved = sorted(journal.snapshots(CHECKPOINT), key=lambda i: (i.position, i.id))
    if len(saved) < 3:
        return 0
    least = min(every, SPACING)
    kept, dropping = [saved[0]], list[SnapshotInfo]()
    for info in saved[1:-1]:
        last = kept[-1].position
        (kept if info.position - last >= max(least, last // 16) else dropping).append(info)
    kept.append(saved[-1])
    dropped = 0
    try:
        for info in dropping:
            dropped += journal.drop_snapshots(CHECKPOINT, from_id=info.id,
                                              through_id=info.id)
    except JournalError:
        pass
    return dropped


def invalidate_after(journal: JournalLike, late_time: int) -> int:
    """Drop the checkpoints a late event at `late_time` made stale; return how many.

    Those after that time that an event recorded after them lands before: one saved
    after the late event was recorded holds it and stays. Every process that learns of
    a late event calls this, the one that recorded it and each other one as it catches
    up (a service, a command line's decision): a `replay` run in between saved fresh
    checkpoints that a later learner dropped whole, so the next process to start folded
    the journal from its first event. Nothing stale: nothing is written (no write lock
    is waited for). A stale one left behind is refused as it loads all the same
    (`checkpoint_is_valid`): this is tidying, never what keeps answers right.

    The newest checkpoint stays, stale or not: a live projection resumes from it all the
    same (`resume_point`), and under a steady stream of late events every checkpoint is
    soon stale, so dropping them left a restarted service nothing to start from."""
    saved = journal.snapshots(CHECKPOINT)
    if not saved:
        return 0
    newest = max(info.position for info in saved)
    stale = [info for info in saved
             if info.event_time > late_time and not checkpoint_is_valid(journal, info)]
    dropped = 0
    try:
        # Each with those at or before its position and at or after its time: stale too
        # (the event after it that lands before it lands before them): no valid one goes.
        for info in sorted(stale, key=lambda i: (i.event_time, -i.position)):
            if info.position < newest:
                dropped += journal.drop_snapshots(CHECKPOINT, from_time=info.event_time,
                                                  before_position=min(info.position + 1,
                                                                      newest))
    except JournalError:
        # Called once the decision that learned of the late event is committed: another
        # writer holding the lock (a long import on SQLite), a full disk or a file
        # turned read-only must not turn it into an error (its user would record it
        # again). The next learner, or a replay, tidies.
        pass
    return dropped
