"""The checks that need the whole journal, run every K steps and at the end of a run.

- A fresh full fold of the journal (in canonical order, a new `Ledger`): every outcome's
  lineage (`outcome_violations`), every invariant of the final state (`violations`).
- Every live projection's digest equals the fresh fold's.
- The plain reference model (`tools.sim.model`) folded from the same records agrees with
  the fresh fold: balances per pool, reservations, running jobs, job states and charges,
  each consume's debt and each submit's acceptance; and with what callers were told,
  for every decision no later arrival could have revised.
- The journal's hash chain verifies, and it holds exactly the events the simulator saw
  acknowledged (each once, none it did not).
- `verify`, incrementally (`Verification`): what `projections.replay.verify` checks,
  for the events since the last check: the chain (above), every checkpoint saved since,
  an arrival-order replay carried on from where the last check left it, and every
  invariant of the replayed state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from operator import attrgetter
from typing import Any

from eventstore import ChainBroken, JournalLike, RecordedEvent
from projections.checkpoint import CHECKPOINT, CheckpointError, load_checkpoint
from projections.decoding import decode_event
from projections.events import EventReversed
from projections.invariants import violations
from projections.ledger import Ledger, restore, snapshot
from projections.projector import REVERSE, Projector
from projections.replay import (
    REPLAY_REMEMBERS,
    account_reader,
    batches_of,
    fold_canonical,
    journal_reader,
    lean_records,
    lean_rows,
    locator,
)
from projections.reversals import reversed_ids
from projections.session import session_of
from tools.sim import model
from tools.sim.world import LINEAGE_TYPES, Op, World, revisable


def full_check(world: World) -> list[str]:
    """Every whole-journal check; the problems found (empty: all is well)."""
    log = world.learn()  # in arrival order
    records = sorted(log, key=_canonical)
    problems: list[str] = []
    ledger = Ledger()
    excluded = model.excluded_ids(records)
    if excluded:
        ledger.excluded = excluded  # reversed events take no part
    outcomes: dict[str, Any] = {}
    decoded, event_of, lineage = world.decoded, world.event_of, world.lineage
    for rec in records:
        # Each payload is decoded once per world (events are immutable values), for the
        # fold and for the lineage check.
        event = decoded[rec.id] if rec.id in decoded else event_of(rec)
        if event is None:
            outcomes[rec.id] = ledger.apply_recorded(rec.position, rec.id, rec.type,
                                                     rec.time, rec.payload)
            continue
        outcome = outcomes[rec.id] = ledger.apply(rec.position, rec.id, rec.time, event)
        if rec.type in LINEAGE_TYPES and rec.id not in excluded:
            problems += [f"fresh fold: {v}" for v in lineage(rec, event, outcome, ledger)]
    problems += [f"fresh fold: invariant broken: {v}" for v in violations(ledger)]
    digest = world.digest = ledger.digest()
    for name, facade in world.sessions():
        live = session_of(facade).digest()
        if live != digest:
            problems.append(f"the live projection of {name} has digest {live[:16]}…, a fresh "
                            f"fold of the journal {digest[:16]}…")
            break
    if world.reference is None:
        world.reference = CarriedModel()
    reference = world.reference.fold(log, excluded)
    problems += _compare(ledger, reference, outcomes)
    later_revised = revisable(log)
    problems += _told(world, log, reference, later_revised)
    problems += _chain_since_last_check(world, log)
    if world.verification is None:
        world.verification = Verification(world.journal)
    problems += world.verification.since_last(digest, log)
    problems += _revisions(world, reference, log)
    ids = {rec.id for rec in records}
    if ids != world.recorded or len(records) != len(ids):
        extra = sorted(ids - world.recorded)[:5]
        lost = sorted(world.recorded - ids)[:5]
        problems.append(f"the journal holds {len(records)} events; not acknowledged: {extra}; "
                        f"acknowledged but missing: {lost}")
    return problems


class CarriedModel:
    """The reference model's fold of a world's journal (`model.fold`), carried on from
    check to check when that gives exactly the model a fold of the whole journal gives:
    when every event recorded since the last fold comes after every event folded on the
    timeline (canonical order: the whole is the folded part, then the new part), and no
    reversal since changed whether a folded event takes part. Otherwise folded whole
    again. The model is the checks' to read, never to change."""

    def __init__(self) -> None:
        self.model: model.Model | None = None
        self.folded = 0  # how many of the log's records it folded (arrival order)
        self.last: Any = None  # the last of them: the log still holds it, or refold
        self.top = (-model.NEVER, 0)  # the greatest (time, position) folded
        self.excluded: frozenset[str] = frozenset()  # as of the last fold
        self.ids: set[str] = set()  # the ids folded

    def fold(self, log: list[RecordedEvent], excluded: frozenset[str]) -> model.Model:
        """The model of all of `log` (arrival order); `excluded`: `model.excluded_ids`
        of it."""
        n = self.folded
        new = log[n:]
        changed = excluded ^ self.excluded
        if self.model is None or not n or len(log) < n or log[n - 1] is not self.last \
                or (new and min(new, key=_canonical).time < self.top[0]) \
                or any(eid in self.ids for eid in changed):
            self.model = model.fold(log)
            new = log
            self.ids = set()
        else:
            carried = self.model
            for rec in sorted(new, key=_canonical):
                if rec.id not in excluded and rec.type != "reverse":
                    model.fold_one(carried, rec)
                carried.last_time = rec.time
        self.ids.update(rec.id for rec in new)
        if new:
            top = max(new, key=_canonical)
            self.top = max(self.top, (top.time, top.position))
        self.folded, self.last, self.excluded = len(log), log[-1] if log else None, excluded
        return self.model


# (event time, position): a key taken in C, since a sort of the whole journal by a
# Python function was a tenth of these checks.
_canonical: Callable[[RecordedEvent], tuple[int, int]] = attrgetter("time", "position")


def _chain_since_last_check(world: World, log: list[RecordedEvent]) -> list[str]:
    """The events recorded since the last check chain on from the last one verified, and
    are the events the checks worked from (`log`: on the memory journal, what its appends
    answered): each read and hashed once per world (its end checks the whole chain
    again)."""
    try:
        for rec in world.journal.read_verified(after=world.chained):
            if rec.position > len(log) or log[rec.position - 1] != rec:
                return [f"the journal's event at position {rec.position} ({rec.id}) is not "
                        "the one it answered or was read as"]
            world.chained = (rec.position, rec.hash)
    except ChainBroken as exc:
        return [f"the journal's hash chain is broken at position {exc.position}"]
    return []


def _figures(ledger: Ledger, time: int) -> dict[str, Any]:
    """The fold's figures in the model's shape (zero pools left out)."""
    accounts = {}
    for name in sorted(ledger.accounts):
        account = ledger.accounts[name]
        if not account.opened:
            continue
        pools = account.pool_balances_at(max(time, account.last_time))
        accounts[name] = {"pools": {p: v for p, v in sorted(pools.items()) if v},
                          "reserved": account.reserved, "running": account.running}
    jobs = {j: (job.state, job.charge) for j, job in sorted(ledger.jobs.items())}
    return {"accounts": accounts, "jobs": jobs}


def _compare(ledger: Ledger, reference: model.Model, outcomes: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    time = reference.last_time
    want, got = reference.figures(time), _figures(ledger, time)
    for name in sorted(set(want["accounts"]) | set(got["accounts"])):
        w, g = want["accounts"].get(name), got["accounts"].get(name)
        if w != g:
            problems.append(f"account {name!r} at time {time}: the fold says {g}, the "
                            f"reference model {w}")
    for job in sorted(set(want["jobs"]) | set(got["jobs"])):
        w, g = want["jobs"].get(job), got["jobs"].get(job)
        if w != g:
            problems.append(f"job {job!r}: the fold says (state, charge) {g}, the reference "
                            f"model {w}")
            if len(problems) > 10:
                break
    for eid, said in reference.told.items():
        outcome = outcomes[eid]
        folded = outcome.ok if isinstance(said, bool) else (
            outcome.debt_after if outcome.type in ("consume", "adjust") else outcome.charge)
        if folded != said:
            problems.append(f"event {eid!r} ({outcome.type}): the fold decided {folded}, the "
                            f"reference model {said}")
            if len(problems) > 10:
                break
    return problems


def _told(world: World, by_position: list[Any], reference: model.Model,
          later_revised: set[str]) -> list[str]:
    """Answers given live agree with the final timeline, unless a later arrival landed
    before them on it (a late event may revise an answer: that is what it is for).
    `by_position`: the records in arrival order; `later_revised`: the ids among them a
    later one may have revised (`revisable`)."""
    problems = []
    for eid, said in world.told.items():
        if eid in later_revised or eid not in reference.told or said is None:
            continue
        if isinstance(said, (bool, int)) and reference.told[eid] != said:
            problems.append(f"event {eid!r}: the caller was told {said!r}, the reference "
                            f"model says {reference.told[eid]!r}")
    # Which job each start started: the one the model picks (highest priority, then the
    # oldest submit, among accounts below their cap), for a start decided at the head of
    # the timeline (none recorded before it is later on it: a start placed in the past
    # skips a job whose start there would invalidate what came after) that no later
    # arrival revised.
    latest = -(2**63)
    picked = reference.picked
    for rec in by_position:
        if rec.type == "start" and rec.time >= latest and rec.id in picked \
                and rec.id not in later_revised and rec.payload["job"] != picked[rec.id]:
            problems.append(f"start {rec.id!r} started {rec.payload['job']!r}, the reference "
                            f"model starts {picked[rec.id]!r} there")
            if len(problems) > 10:
                break
        if rec.time > latest:
            latest = rec.time
    return problems


def _revisions(world: World, reference: model.Model, log: list[RecordedEvent]) -> list[str]:
    """An answer a caller was told that the timeline now has otherwise, because a later
    arrival landed before it (an answer wrong from the start is `_told`'s), is among the
    revisions the replay found (`Projector.revisions`, of the verification carried on
    from check to check, as a fresh projection finds them).

    The service appends a group of callers' decisions as one batch, which a replay knows
    at once: it lists no revision inside a batch (docs/architecture.md), so a late line
    of the group may change what an earlier one was told unlisted. What a later batch
    must list is a change from the answer as its own batch left it."""
    assert world.verification is not None
    listed = {r.event_id for r in world.verification.projector.revisions}
    head = log[-1].position if log else 0
    spans = batches_of(world.journal, head)
    told, answers = reference.told, world.told
    unlisted = []
    for eid in revisable(log, spans) - listed:
        said = answers.get(eid)
        if not isinstance(said, (bool, int)) or told.get(eid, said) == said:
            continue
        position = next(rec.position for rec in log if rec.id == eid)
        last = next((b.last for b in spans if b.first <= position <= b.last), None)
        if last is not None:
            left = model.fold([rec for rec in log if rec.position <= last]).told.get(eid)
            if left == told[eid]:
                continue
        unlisted.append(eid)
    return [f"event {eid!r}: the caller was told {answers[eid]!r}, the timeline now says "
            f"{told[eid]!r}, and no revision of it is listed" for eid in sorted(unlisted)[:10]]


def audit(world: World, op: Op) -> list[str]:
    """A balance as known at an earlier position, against the model of that prefix."""
    records = world.learn()
    position = int(op["as_known_at"] * (len(records) + 1))
    account, at = op["account"], op["at"]
    tracker = world.tracker(world.process(op["actor"]), account)
    said = tracker.get_balance(at, as_known_at=position)
    # Only the account's own stream: every event of an account is recorded on it (a
    # reversal on the stream of the event it takes out), and the model folds each
    # account apart from the others, so the answer is the same at a fraction of the
    # cost. An event recorded on another account's stream would show as a difference.
    # A reversal counts whatever its own time: it takes its event out at every time.
    known = [rec for rec in records[:position]
             if rec.stream == account and (rec.time <= at or rec.type == "reverse")]
    want = sum(model.fold(known).balances(account, at).values())
    if said != want:
        return [f"audit of {account!r} at time {at} as known at position {position}: "
                f"get_balance says {said}, the reference model {want}"]
    return []


KNOWN_AROUND_SPACING = 4
"""A late usage report is asked about as known around it when its position is at least
this many times the last one asked about in its world (each question folds the journal
up to it: asked at spacings growing like this, a world's questions cost about what
one fold of the whole of it costs, 1/(1 - 1/4) twice over)."""


def known_around(world: World, op: Op) -> list[str]:
    """A late usage report (recorded after an event later on the timeline): its
    account's balance at its time as known right after it is the balance as known right
    before it, less its amount (whatever the batches, its debt makes up the rest). Asked
    of the first late report of a world and then at spacings (`KNOWN_AROUND_SPACING`):
    `as_known_at` off by one position answers something else."""
    line = op["line"]
    rec = world.journal.get(line["id"])
    if rec is None:
        return []
    position = rec.position
    log = world.learn()
    if position < 2 or position > len(log) or log[position - 2].time <= rec.time \
            or position < KNOWN_AROUND_SPACING * world.known_around:
        return []
    world.known_around = position
    tracker = world.tracker(world.process(op["actor"]), line["account"])
    before = tracker.get_balance(rec.time, as_known_at=position - 1)
    after = tracker.get_balance(rec.time, as_known_at=position)
    if after != before - line["amount"]:
        return [f"{rec.id}: usage of {line['amount']} at time {rec.time} (position "
                f"{position}): get_balance as known at {position - 1} says {before}, as "
                f"known at {position} says {after}"]
    return []


JUDGES_KEPT = 8
"""The folds of the last checkpoints judged that `Verification` keeps to carry on from (a
reversal of an event one of them folded sends the judge back to an older one)."""


class Verification:
    """`projections.replay.verify` carried on from where it last stopped, so checking
    it every K steps costs in proportion to the events since, not to the journal.

    `verify` checks the hash chain (here `_chain_since_last_check`, from the last event
    verified), that each checkpoint's state is what a fold up to it gives, and replays
    the journal in arrival order, as a projection of each batch of events appended
    together, re-projecting late events, with the invariants of the replayed state. Here
    the replay's projector (made as `replay` makes it) is kept between checks and fed
    the batches since; checkpoints are judged once each. The end of a run still calls
    `verify` itself on its last world (`tools.sim.run.perform`)."""

    def __init__(self, journal: JournalLike) -> None:
        self.journal = journal
        self.projector = Projector(
            journal_reader(journal), min_snapshot_every=20_000, snapshot_factor=32,
            recent_outcomes=REPLAY_REMEMBERS, remember_once_late=True,
            locate=locator(journal), account_reader=account_reader(journal))
        self.checkpoints: set[int] = set()  # ids of the checkpoints judged
        # The checkpoints' judges: canonical folds of the journal up to the last ones
        # judged, each (its position, the id there, the latest event time up to it, the
        # fold's snapshot), carried on to the next checkpoint (`_fold_to`).
        self.kept: list[tuple[int, str, int, Any]] = []

    def since_last(self, digest: str, log: list[RecordedEvent] | None = None) -> list[str]:
        """Verify what was recorded since the last call; `digest`: a fresh canonical
        fold's of the whole journal, which the replayed state must equal; `log`: the
        journal's records in arrival order, as the checks read and chained them (default:
        read whole)."""
        if log is None:
            log = list(self.journal.read(order="position"))
        problems = self._checkpoints(log)
        head = self.journal.head()
        ledger = self.catch_up()
        broken = violations(ledger)
        if broken:
            more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
            problems.append(f"verify: replay to position {head} breaks an invariant: "
                            f"{broken[0]}{more}")
        if ledger.digest() != digest:
            problems.append(f"verify: replay to position {head} gives digest "
                            f"{ledger.digest()[:16]}…, a fresh fold {digest[:16]}…")
        return problems

    def catch_up(self) -> Ledger:
        """The replay carried on to the journal's head: its state."""
        journal, projector = self.journal, self.projector
        head, start = journal.head(), projector.position
        ends = {first: min(last, head) for first, last in batches_of(journal, head)
                if last > start}
        pending: list[Any] = []
        begin = end = 0
        for rec in lean_records(journal, after_position=start, to_position=head,
                                order="position"):
            if not end:
                begin, end = rec.position, ends.get(rec.position, rec.position)
            pending.append(rec)
            if rec.position < end:
                continue
            projector.ingest_batch(pending, known_before=begin)
            pending, end = [], 0
        ledger: Ledger = projector.ledger
        return ledger

    def _fold_to(self, position: int, log: list[RecordedEvent]) -> Ledger:
        """`fold_canonical(journal, to_position=position)`: a fold kept from one of the
        last checkpoints judged (the newest that serves), carried on, when that gives
        the same fold: when the events between come after every event it folded on the
        timeline (none earlier than the latest time up to it) and their reversals change
        whether an event takes part only for events it did not fold (a fold of the whole
        is then its events, then these, in the same order, the same ones left out). Else
        folded whole. What it gives is kept for the next judgements."""
        if not 0 < position <= len(log):
            return fold_canonical(self.journal, to_position=position)
        for at, at_id, latest, kept in reversed(self.kept):
            if at > position or not self._holds(at, at_id):
                continue
            between = log[at:position]  # as the journal holds them (see `since_last`)
            if between and min(rec.time for rec in between) < latest:
                continue
            ledger = restore(kept)
            excluded = self._excluded_after(
                ledger, [rec for rec in between if rec.type == REVERSE], at)
            if excluded is None:
                continue
            ledger.excluded = excluded
            if between:
                ledger.apply_rows(lean_rows(self.journal, after_position=at,
                                            to_position=position, order="canonical"))
                latest = max(latest, max(rec.time for rec in between))
            break
        else:
            ledger = fold_canonical(self.journal, to_position=position)
            latest = max(rec.time for rec in log[:position])
        self.kept.append((position, log[position - 1].id, latest, snapshot(ledger)))
        del self.kept[:-JUDGES_KEPT]
        return ledger

    def _holds(self, position: int, event_id: str) -> bool:
        """Whether the journal holds `event_id` at `position` (what the judge folded)."""
        rec = self.journal.get(event_id)
        return rec is not None and rec.position == position

    def _excluded_after(self, ledger: Ledger, reversals: list[RecordedEvent],
                        at: int) -> frozenset[str] | None:
        """The events out of a fold that adds the events after position `at` to
        `ledger` (a fold up to `at`), `reversals` among them: reversed by a reversal it
        folded (`Ledger.reversals`, every reversal that decodes, as `fold_canonical`
        reads them) or by one of `reversals`. None when that changes whether an event it
        folded takes part."""
        if not reversals:
            return ledger.excluded
        known = dict(ledger.reversals)
        for rec in reversals:
            try:
                event = decode_event(REVERSE, rec.payload)
            except json.JSONDecodeError:
                raise  # as the fold does: the row was not written by the journal
            except (ValueError, TypeError):
                continue
            if isinstance(event, EventReversed):
                known[rec.id] = event.event
        excluded = reversed_ids(known)
        for event_id in excluded ^ ledger.excluded:
            target = self.journal.get(event_id)
            if target is not None and target.position <= at:
                return None
        return excluded

    def _checkpoints(self, log: list[RecordedEvent]) -> list[str]:
        problems: list[str] = []
        for info in sorted(self.journal.snapshots(CHECKPOINT),
                           key=lambda s: (s.position, s.id)):
            if info.id in self.checkpoints:
                continue
            self.checkpoints.add(info.id)
            try:
                stored = load_checkpoint(self.journal, info).digest()
            except (CheckpointError, KeyError) as exc:
                problems.append(f"verify: checkpoint {info.id} at position {info.position} "
                                f"is unreadable: {exc}")
                continue
            rebuilt = self._fold_to(info.position, log).digest()
            if stored != info.digest or rebuilt != info.digest:
                problems.append(f"verify: checkpoint {info.id} at position {info.position} "
                                f"records digest {info.digest[:16]}…, holds {stored[:16]}…, "
                                f"a replay to it gives {rebuilt[:16]}…")
        return problems
