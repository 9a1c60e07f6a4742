"""Running ops against a fresh world: a seeded run, a fixed script, a reproduction file.

`run(seed, steps)` draws ops from a `Director` and performs them one by one, checking
after every op what it touched and every `check_every` ops the whole journal. The first
problem stops the run; `shrink` then looks for the fewest ops that still fail, and
`reproduction_lines` turns them into a JSON Lines file of the import format that
`replay_file` (`python -m tools.sim --replay FILE`) performs again, line by line.
"""

from __future__ import annotations

import gc
import json
import threading
import time as _time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventstore import ChainBroken, JournalLike, MemoryJournal
from projections.importing import parse_record
from projections.replay import fold_canonical, verify
from tools.sim.actors import Director, Rates
from tools.sim.checks import audit, full_check, known_around
from tools.sim.journals import Journals
from tools.sim.killed import STOPS
from tools.sim.world import Op, World

SMALL = 300
"""A script this short gets the whole-journal checks after every op (shrinking, replay)."""

GROWTH = 16
"""A world's whole-journal checks come every `check_every` ops, or every sixteenth of the
ops the world has performed when that is more. A fresh fold costs in proportion to the
journal, so a fixed interval made a long world's checks quadratic (a world of N ops
folded about N / (2 K) journals); spaced so, their work stays within about GROWTH + 1
folds of the final journal, whatever the world's length. Sixteen keeps the default
schedule (K = 1000 in worlds of 5,000 ops) and every test's (K = 100 within 1,500 ops)
exactly as it was: the interval grows only past 16 K ops into a world."""


class Stopped(Exception):
    """The run was asked to stop (`request_stop`, on a signal), and stopped between two
    ops: no transaction, writer process or batch was left half done."""


_stop_requested = threading.Event()
_stop_requested_at = [0.0]  # time.monotonic() of the request

SAME_STOP_SECONDS = 1.0
"""A signal this soon after the one that asked a process to stop is the same request
delivered twice, not a second one: a signal sent to a process group (`timeout`, a CI
runner cancelling a job, `kill -- -PGID`) also reaches make, which forwards SIGTERM to
its child, and the command line forwards it to its jobs, which got the group's already.
Taken as a second request, it stopped the run at once (a traceback, a writer cut short,
a world left behind) instead of between two ops."""


def request_stop(wanted: bool = True) -> None:
    """Ask every run of this process to stop before its next op (`Stopped`); False:
    take the request back (a new command line)."""
    if wanted:
        if not _stop_requested.is_set():
            _stop_requested_at[0] = _time.monotonic()
        _stop_requested.set()
    else:
        _stop_requested.clear()


def stop_at_once() -> bool:
    """Whether a signal arriving now, with a stop already requested, asks to stop at once:
    only once `SAME_STOP_SECONDS` have passed since the request (sooner, it is the same
    signal delivered twice)."""
    return _time.monotonic() - _stop_requested_at[0] >= SAME_STOP_SECONDS


def stop_requested() -> bool:
    """Whether `request_stop` asked this process's runs to stop."""
    return _stop_requested.is_set()


def same_stop_left() -> float:
    """Seconds during which a signal is still the stop already requested (0 when none
    was, or once `SAME_STOP_SECONDS` have passed)."""
    if not _stop_requested.is_set():
        return 0.0
    return max(0.0, SAME_STOP_SECONDS - (_time.monotonic() - _stop_requested_at[0]))


@dataclass
class Failure:
    """Where a run went wrong: the op, its problems, and the ops performed up to it."""

    step: int
    problems: list[str]
    ops: list[Op]
    last_events: list[dict[str, Any]]
    database: str | None = None  # on SQLite or PostgreSQL: the failing world's, kept


@dataclass
class RunResult:
    """What a run did."""

    seed: int | None
    steps: int
    seconds: float
    failure: Failure | None = None
    faults: dict[str, int] = field(default_factory=dict)
    events: int = 0
    digest: str = ""  # a fresh fold's digest of the final journal (for reproducibility)
    cpu_seconds: float = 0.0  # CPU time of this process (a shared machine's wall clock
    # also counts what the other processes ran)

    @property
    def ok(self) -> bool:
        return self.failure is None


def new_world(journal: JournalLike | None = None, skews: dict[str, int] | None = None,
              *, one_process: bool = False) -> World:
    world = World(journal if journal is not None else MemoryJournal(),
                  one_process=one_process)
    for name, skew in (skews or {}).items():
        world.process(name).skew = skew
    return world


def perform(world: World, ops: Iterable[Op], *, check_every: int,
            observe: Callable[[Op], None] | None = None,
            product_verify: bool = True, growth: int | None = None
            ) -> tuple[int, Failure | None]:
    """Perform ops in order with every check; (ops performed, the first failure).

    The whole-journal checks come every `check_every` ops; with `growth`, every
    `1 / growth` of the ops performed when that is more (see `GROWTH`).

    After the last op: the whole-journal checks (unless the last op was just checked),
    the whole hash chain and, with `product_verify`, `projections.replay.verify` (which
    checks the whole chain itself: then it is checked there, once).
    """
    done: list[Op] = []
    checked = 0  # ops performed when the whole journal was last checked
    due = check_every  # ops performed when the next whole-journal check comes
    for op in ops:
        if _stop_requested.is_set():
            raise Stopped(f"stopped before op {len(done) + 1}")
        done.append(op)
        try:
            problems = world.execute(op)
            if op["kind"] == "audit":
                problems += audit(world, op)
            elif op["kind"] == "consume" and not problems:
                problems += known_around(world, op)
            if observe is not None:
                observe(op)
            if not problems and len(done) == due:
                problems = full_check(world)
                checked = len(done)
                due += max(check_every, checked // growth if growth else 0)
        except Exception as exc:  # the code under test crashed outside a call: a finding
            problems = [_raised(exc)]
        if problems:
            return len(done), Failure(len(done), problems, done, last_events(world))
    try:
        problems = full_check(world) if checked != len(done) or not done else []
        # The whole chain, not only what came since a check (`verify` checks it first).
        bad = None if product_verify else world.journal.verify()
        if bad is not None:
            problems.append(f"the journal's hash chain is broken at position {bad}")
        problems += world.as_learned()
        if product_verify:
            report = verify(world.journal)  # the product's own verdict, invariants included
            if not report.ok:
                problems.append(f"verify failed at position {report.first_bad_position}: "
                                f"{report.problem}")
    except Exception as exc:  # as above
        problems = [_raised(exc)]
    if problems:
        return len(done), Failure(len(done), problems, done, last_events(world))
    return len(done), None


_ROOT = Path(__file__).resolve().parents[2]


def _raised(exc: Exception) -> str:
    """A crash as a problem: the exception, and where it was raised (an `assert` says
    nothing else)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        path = Path(frames[-1].filename)
        shown = path.relative_to(_ROOT) if path.is_relative_to(_ROOT) else path
        where = f" (raised at {shown}:{frames[-1].lineno}, in {frames[-1].name})"
    return f"the ledger raised {type(exc).__name__}: {exc}{where}"


def last_events(world: World, count: int = 8) -> list[dict[str, Any]]:
    """The journal's last events in arrival order, as export lines with their position."""
    head = world.journal.head()
    try:
        records = list(world.journal.read(after_position=max(0, head - count),
                                          order="position"))
    except ChainBroken:
        # The journal refuses to read an event that no longer chains, often the failure
        # being reported: the events as the checks worked from them instead.
        records = world.log[-count:]
    return [{"position": rec.position, "id": rec.id, "type": rec.type, "time": rec.time,
             **rec.payload} for rec in records]


EPOCH = 5000
"""Ops per world: a run starts a new journal (and new processes) this often."""


def run(seed: int, steps: int, *, check_every: int = 1000, rates: Rates | None = None,
        one_process: bool = False, epoch: int = EPOCH, sqlite: bool = False,
        postgres: str | None = None) -> RunResult:
    """A seeded run of `steps` ops; stops at the first problem, so `run(seed,
    failure.step)` (same options) fails again at its last step.

    Every `epoch` ops the world starts again: a new journal, new processes, the accounts
    opened again (the random source goes on). A journal's checks and retries cost in
    proportion to its size, so bounded worlds keep a long run's rate steady; many
    worlds explore more beginnings.

    `one_process`: every actor shares one process and one projection (no clock skew,
    no projection lagging another): the same kind of ops at a fraction of the cost.

    `sqlite`: each world's journal is a SQLite file, and now and then a writer in a
    process of its own is killed with SIGKILL in the middle of an op
    (`tools.sim.killed`); slower, so for bounded runs. `postgres` (a database's URL): the
    same with each world's journal in a schema of its own there, every append a
    transaction of the PostgreSQL backend (locks, the service's batches decided ahead).
    """
    if epoch < 1:
        raise ValueError(f"epoch must be at least 1 op, got {epoch}")
    director = Director(seed, rates or Rates())
    journals = Journals(sqlite=sqlite, postgres=postgres)
    director.killed_writers = sqlite or postgres is not None
    faults: dict[str, int] = {}
    began, cpu = _time.perf_counter(), _time.process_time()
    done = events = 0
    failure: Failure | None = None
    world = new_world()
    # A world is bulk work: its ledgers and checks make few reference cycles, and the
    # collector's passes over everything a world keeps alive were a sixth of a run. So
    # it is paused for the run, and collects what cycles a world left once it is gone.
    collecting = gc.isenabled()
    gc.disable()
    try:
        while done < steps and failure is None:
            length = min(epoch, steps - done)
            director.new_world()
            if done:
                world.close()
                world = new_world()  # the last world goes before the next is made
                gc.collect(0)  # nothing survived a collection since the pause: all young
            # One process has one clock: no skew. Several have their own, skewed.
            world = new_world(journals.new(), {} if one_process else director.skews,
                              one_process=one_process)
            # `verify` replays the journal in arrival order, re-projecting every late
            # event: a few times the cost of the whole-journal checks, which already cover
            # its chain, its fresh fold and its invariants. It judges the last world.
            performed, failure = perform(world, _epoch_ops(director, length),
                                         check_every=check_every, growth=GROWTH,
                                         observe=_observer(director, world, faults),
                                         product_verify=done + length >= steps)
            if failure is not None:
                failure.step += done
                for op in failure.ops:
                    op["skew"] = world.process(op["actor"]).skew
                    if one_process:
                        op["actor"] = "all"
            done += performed
            events += world.journal.head()
    except BaseException:
        world.close()
        journals.close()  # a stopped or interrupted run leaves no file or schema behind
        raise
    finally:
        if collecting:
            gc.enable()
    seconds, cpu = _time.perf_counter() - began, _time.process_time() - cpu
    digest = world.digest if failure is None else _digest_of(world.journal)
    world.close()
    kept = journals.close(keep_last=failure is not None)
    if failure is not None:
        failure.database = kept
    return RunResult(seed, done, seconds, failure, faults, events, digest, cpu)


def _digest_of(journal: JournalLike) -> str:
    """A fresh fold's digest of a failing world's journal; empty when the journal no
    longer chains (it refuses to be read, and that is the failure reported)."""
    try:
        return fold_canonical(journal).digest()
    except ChainBroken:
        return ""


def _epoch_ops(director: Director, length: int) -> Iterator[Op]:
    opening = director.opening()
    yield from opening[:length]
    for _ in range(length - len(opening)):
        yield director.next_op()


def _observer(director: Director, world: World,
              faults: dict[str, int]) -> Callable[[Op], None]:
    def observe(op: Op) -> None:
        director.observe(op, world)
        fault = op.get("fault")
        if fault == "killed-writer":
            fault = f"killed-writer ({op['stop']})"
        if fault:
            faults[fault] = faults.get(fault, 0) + 1
        elif op["kind"] in ("consume", "grant") and op["line"]["time"] < director.now:
            faults["late"] = faults.get("late", 0) + 1

    return observe


def run_script(ops: list[Op], *, check_every: int | None = None,
               sqlite: bool = False, postgres: str | None = None) -> Failure | None:
    """Perform a fixed list of ops (each carrying its actor's clock skew) in a new world
    (`sqlite`, `postgres`: on a SQLite file or a PostgreSQL schema, where a killed-writer
    op kills a real writer; in memory such an op is performed as a plain one)."""
    skews = {op["actor"]: op.get("skew", 0) for op in ops}
    journals = Journals(sqlite=sqlite, postgres=postgres)
    world = new_world(journals.new(), skews=skews)
    every = check_every or (1 if len(ops) <= SMALL else 1000)
    try:
        _, failure = perform(world, (dict(op) for op in ops), check_every=every)
    finally:
        world.close()
        journals.close()
    return failure


def shrink(ops: list[Op], *, budget_seconds: float = 60.0,
           still_fails: Callable[[list[Op]], bool] | None = None,
           sqlite: bool = False, postgres: str | None = None) -> list[Op]:
    """The fewest ops (found within the budget) that still fail: delta debugging, taking
    out ever smaller chunks while the rest still fails. Asked to stop (`request_stop`),
    it ends with the fewest found so far."""
    fails = still_fails or (lambda candidate: run_script(candidate, sqlite=sqlite,
                                                         postgres=postgres) is not None)
    deadline = _time.monotonic() + budget_seconds
    chunks = 2
    while len(ops) >= 2 and _time.monotonic() < deadline:
        size = -(-len(ops) // chunks)
        for start in range(len(ops) - size, -1, -size) if size else ():
            candidate = ops[:start] + ops[start + size:]
            if _time.monotonic() >= deadline:
                break
            try:
                failed = fails(candidate)
            except Stopped:
                return ops  # they still fail: what the caller writes, rather than nothing
            if failed:
                ops = candidate
                chunks = max(chunks - 1, 2)
                break
        else:
            if size == 1:
                break
            chunks = min(len(ops), chunks * 2)
    return ops


def reproduction_lines(ops: list[Op]) -> list[dict[str, Any]]:
    """The ops as import-format lines, in order; a retried decision appears twice (same
    id), a file delivery as its lines, audits and refused commands not at all."""
    world = new_world(skews={op["actor"]: op.get("skew", 0) for op in ops})
    lines: list[dict[str, Any]] = []
    for op in ops:
        op = dict(op)
        world.execute(op)
        if op["kind"] == "audit":
            continue
        if op["kind"] == "import":
            lines.extend(op["lines"])
            continue
        if op["kind"] == "batch":
            # The service's commands as they were recorded (once each), at the times
            # its clock gave them.
            seen: set[str] = set()
            for line in op["lines"]:
                rec = world.journal.get(line["id"])
                if rec is None or rec.id in seen:
                    continue
                seen.add(rec.id)
                lines.append(_recorded_line(line, rec.time, world))
            continue
        line = dict(op["line"])
        if world.journal.get(line["id"]) is None:
            continue  # refused, or crashed and never retried: nothing recorded
        line = _recorded_line(line, line["time"] + op.get("skew", 0), world)
        lines.append(line)
        if op.get("fault") == "lost-answer":
            lines.append(line)
    return lines


def _recorded_line(line: dict[str, Any], time: int, world: World) -> dict[str, Any]:
    """A command line as it was decided: at `time` (the clock its decider read), a start
    naming the job it started."""
    line = {**line, "time": time}
    if line["type"] == "start":
        line["job"] = world.told.get(line["id"])
    return line


def write_reproduction(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))


ACTORS = {"grant": "finance", "adjust": "finance", "void": "finance", "consume": "reporter"}


OP_KEYS = frozenset({"step", "actor", "kind"})
"""The keys that make a reproduction line one of the simulator's own ops (with its
faults), written when the events alone do not fail (see `write_ops`)."""


def write_ops(path: Path, ops: list[Op]) -> None:
    """The ops themselves, one JSON object a line, faults and actors included: what a
    failure that needs the run's faults (a lost answer in a batch, a failed commit)
    replays from, where the events alone (`reproduction_lines`) pass."""
    write_reproduction(path, [dict(op) for op in ops])


PERFORMED = ("account", "grant", "consume", "adjust", "void", "reverse", "submit", "start",
             "complete", "cancel")
"""The types of line with an id the simulator performs as a command (a line without one
is imported, as any line of the import format)."""

_OP_NEEDS: dict[str, tuple[str, ...]] = {
    "import": ("file", "lines"), "batch": ("time", "lines"),
    "audit": ("account", "at", "as_known_at")}
"""What an op of `write_ops` needs beside `step`, `actor` and `kind`; any other kind is
one of `PERFORMED` and needs its `line`."""


def _checked(where: str, line: Any, *, command: bool) -> dict[str, Any]:
    """A reproduction line checked before anything is performed: one the import format
    takes (`parse_record`), with a time, and, as a command (`command`: with an id, or a
    line of an op), of a type the simulator performs. An edited file's mistake is then
    bad input, not a crash of the ledger."""
    if not isinstance(line, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(line).__name__}")
    if not isinstance(line.get("time"), int):
        raise ValueError(f"{where}: expected a time (an integer), got {line.get('time')!r}")
    kind = line.get("type")
    if command and kind not in PERFORMED:
        raise ValueError(f"{where}: the simulator performs lines of type "
                         f"{', '.join(PERFORMED)}, got {kind!r}")
    # A command line asks to start the next job: which, the ledger decides (a file's
    # line names the one started, for a reader).
    probe = {**line, "job": "next"} if kind == "start" and line.get("job") is None else line
    try:
        parse_record(probe)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if command and kind == "grant" and line.get("expiry") is None:
        raise ValueError(f"{where}: the simulator performs grants with an expiry")
    return line


def _op_line(number: int, line: dict[str, Any]) -> Op:
    """A line written by `write_ops`, checked enough to say what is wrong with it."""
    kind = line["kind"]
    needs = _OP_NEEDS.get(kind, ("line",)) if isinstance(kind, str) else ("line",)
    missing = [key for key in needs if key not in line]
    if not isinstance(kind, str) or (kind not in _OP_NEEDS and kind not in PERFORMED):
        raise ValueError(f"line {number}: an op's kind is one of "
                         f"{', '.join((*PERFORMED, *_OP_NEEDS))}, got {kind!r}")
    if missing:
        raise ValueError(f"line {number}: an op of kind {kind!r} needs {missing[0]!r}")
    if not isinstance(line["actor"], str):
        raise ValueError(f"line {number}: an op's actor is a name, got {line['actor']!r}")
    if line.get("fault") == "killed-writer" and line.get("stop") not in STOPS:
        raise ValueError(f"line {number}: a killed writer stops at one of "
                         f"{', '.join(STOPS)}, got {line.get('stop')!r}")
    if "line" in needs:
        _checked(f"line {number}", line["line"], command=True)
    if "lines" in needs:
        if not isinstance(line["lines"], list):
            raise ValueError(f"line {number}: an op's lines are a list")
        for n, each in enumerate(line["lines"], 1):
            _checked(f"line {number}, its line {n}", each, command=kind == "batch")
    return dict(line)


def file_ops(text: str) -> list[Op]:
    """A reproduction file's lines as ops: a line whose id came before is a retry; a line
    without an id is imported on its own; a line with `step`, `actor` and `kind` is one of
    the simulator's ops as `write_ops` wrote it. ValueError, naming the line, for a line
    that is not one of these (an edited file), or a file without lines."""
    ops: list[Op] = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not JSON: {exc.msg} (column {exc.colno})"
                             ) from None
        if isinstance(line, dict) and line.keys() >= OP_KEYS:
            ops.append(_op_line(number, line))
            continue
        _checked(f"line {number}", line, command=isinstance(line, dict) and "id" in line)
        if "id" not in line:
            # Delivered without an id: imported, known by its content.
            ops.append({"step": number, "actor": "importer", "kind": "import",
                        "file": f"line-{number}", "lines": [line], "fault": None})
            continue
        ops.append({"step": number, "actor": ACTORS.get(str(line.get("type")), "w0"),
                    "kind": line.get("type"), "line": line, "fault": None})
    if not ops:
        raise ValueError("no line to perform (a reproduction has one line or more)")
    return ops


def replay_file(path: Path, *, sqlite: bool = False, postgres: str | None = None
                ) -> Failure | None:
    """Perform a reproduction file line by line with every check after each line
    (`sqlite`, `postgres`: as `run_script`)."""
    return run_script(file_ops(path.read_text()), check_every=1, sqlite=sqlite,
                      postgres=postgres)
