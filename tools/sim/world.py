"""The simulated world: one journal, the processes using it, and the ops they perform.

An op is a plain dict, so a run can be recorded, shrunk and written out:

    {"step": 7, "actor": "w1", "kind": "submit", "line": {...}, "fault": None}

`line` is the command as a line of the import format (with its `id`); `kind` is the
line's type, or "import" (a file delivery: `file`, `lines`) or "audit" (a balance as
known at an earlier position: `account`, `at`, `as_known_at`). `fault` is what goes
wrong: "lost-answer" (committed, the answer lost, retried with the same id),
"crash-before-commit" (nothing recorded, retried with the same id when `retry`),
"restart" (the actor's process restarts first: a fresh projection from the journal).
A "batch" op (actor `service`) holds the `lines` of several callers, queued together for
the HTTP service's writer (`tools.sim.service`), and its `time`; its `fault` is one of
`tools.sim.service.FAULTS`.

`World.execute` performs one op through the facades and returns the problems it saw at
once; the checks that need the whole journal live in `tools.sim.checks`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from eventstore import JournalLike, MemoryJournal, NewEvent, RecordedEvent
from eventstore.hashing import GENESIS_HASH, canonical_json
from projections import GPUCreditTracker, LedgerError, Scheduler
from projections.decoding import decode_event
from projections.events import (
    DEFAULT_GRANT_PRIORITY,
    DEFAULT_HALF_LIFE,
    from_payload,
    to_payload,
)
from projections.importing import import_file
from projections.invariants import Violation, outcome_violations, violations
from projections.ledger import CANCELLED, PENDING, Ledger
from projections.session import session_of
from tools.service.ledger import LedgerService
from tools.service.problems import ServiceProblem
from tools.sim.killed import kill_a_writer
from tools.sim.service import (
    command_of,
    commit_in_turn,
    failing_commit,
    failure_of,
    open_service,
)

if TYPE_CHECKING:
    from tools.sim.checks import CarriedModel, Verification

Op = dict[str, Any]

SERVICE_HOST = "w0"
"""The process the HTTP service runs in (with `one_process`, the one process)."""

_POSITION = attrgetter("position")

LINEAGE_TYPES = frozenset({"consume", "submit", "complete", "grant", "adjust"})
"""Events whose outcome names the grants that paid (`outcome_violations` checks them)."""

PROCESS_OF = {"reporter": "office", "finance": "office", "auditor": "office",
              "service": SERVICE_HOST}
"""Actors that share a process: the usage reporter, finance and the auditor run in one
back-office process (one projection), the workers each in their own, and worker `w0`
runs inside the HTTP service's process, whose writer decides the batches of the
`service` actor on the same projection. Every projection folds every event, so each one
more costs a fold of the journal; three (two workers with skewed clocks, the office)
keep what separate processes exercise: catching up with the others' decisions and late
events re-projected in a projection that did not record them."""


def _stop_service(proc: Process) -> None:
    """Stop the process's service's writer, if it has one (between ops nothing is in
    flight): its committer thread ends and gives its connection back."""
    service, proc.service = proc.service, None
    if service is not None:
        service.writer.stop()


class SimulatedCrash(RuntimeError):
    """The process died at this point (raised by an armed journal)."""


@dataclass
class Process:
    """A worker (scheduler) or a reporter/finance process (one tracker per account)."""

    name: str
    skew: int
    clock_value: int = 0
    scheduler: Scheduler | None = None
    trackers: dict[str, GPUCreditTracker] = field(default_factory=dict)
    service: LedgerService | None = None  # the HTTP service's writer (`tools.sim.service`)
    # Per projection (keyed by the session's id): the position up to which the accounts
    # its events changed have had their invariants checked there.
    checked: dict[int, int] = field(default_factory=dict)


@dataclass
class World:
    """The journal, the processes, and what the simulator knows was recorded."""

    journal: JournalLike = field(default_factory=MemoryJournal)
    processes: dict[str, Process] = field(default_factory=dict)
    recorded: set[str] = field(default_factory=set)  # ids the simulator saw committed
    told: dict[str, Any] = field(default_factory=dict)  # event id -> the answer given
    files: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    appended: int = 0  # events the simulator expects the journal to hold
    last_ids: list[str] = field(default_factory=list)  # the last step's event ids
    crashes: list[str] = field(default_factory=list)  # unexpected exceptions of this op
    one_process: bool = False  # every actor in one process, on one projection
    grant_accounts: dict[str, str] = field(default_factory=dict)  # grant id -> its account
    imported: set[Any] = field(default_factory=set)  # lines delivered (see _line_keys)
    chained: tuple[int, str] = (0, GENESIS_HASH)  # (position, hash) verified to chain
    digest: str = ""  # a fresh fold's digest, as of the last whole-journal check
    verification: Verification | None = None  # `verify` carried on, check after check
    reference: CarriedModel | None = None  # the reference model, carried on likewise
    # Every recorded event in arrival order: on the memory journal, as each append
    # answered (see `_note_answers`); read from any other journal, each event once.
    log: list[RecordedEvent] = field(default_factory=list)
    # For the lineage checks and the fresh fold: each event decoded once (None: it does
    # not decode), and the outcome (with the job's cost) whose lineage last passed, per
    # event id.
    decoded: dict[str, Any] = field(default_factory=dict)
    sound_lineage: dict[str, tuple[Any, int | None]] = field(default_factory=dict)
    # The position of the last late usage report whose balance was asked as known right
    # before and right after it (`tools.sim.checks.known_around`; 0: none yet).
    known_around: int = 0

    def __post_init__(self) -> None:
        self._note_answers()

    def _note_answers(self) -> None:
        """On the memory journal, take the records each append answers into `log`, so the
        step's checks need not read them back: a read costs twice an append there, and
        most steps append one event. What the journal holds is still read: every K steps
        the events since the last check, compared with these (`tools.sim.checks`), and
        the whole journal at the end of a world (`as_learned`)."""
        journal = self.journal
        if not isinstance(journal, MemoryJournal):
            return  # a SQL journal's append answers before its commit: read instead
        append, log, head = journal.append, self.log, journal.head

        def noting(events: Any, **options: Any) -> list[RecordedEvent]:
            before = head()
            recorded = append(events, **options)
            # Anything taken beyond the head was rolled back since (with its transaction).
            del log[before:]
            fresh = [rec for rec in recorded if rec.position > before]
            if len(fresh) > 1:
                fresh.sort(key=_POSITION)  # answered in the order asked (a repeat first)
            log.extend(fresh)
            return recorded

        journal.append = noting  # type: ignore[method-assign]

    def event_of(self, rec: RecordedEvent) -> Any:
        """The domain event of a record, decoded once per world (events are immutable
        values); None when it does not decode (the fold takes it as an anomaly).

        Decoded from the payload's text as the journal stores it (`canonical_json`),
        the way a fold decodes what it reads: `decode_event` of a text is exactly
        `from_payload` of the value it reads back, its checks made in C, where a mapping
        goes the generic way, whose checks in Python were most of this."""
        try:
            event = decode_event(rec.type, canonical_json(rec.payload))
        except (ValueError, TypeError):
            event = None
        self.decoded[rec.id] = event
        return event

    def lineage(self, rec: RecordedEvent, event: Any, outcome: Any,
                ledger: Ledger) -> list[Violation]:
        """Whether the grants `outcome` names as paying for `rec` add up
        (`outcome_violations`); an outcome that passed before (the same, for the same
        job cost) is not judged again."""
        job = getattr(event, "job", None)
        cost = ledger.jobs[job].cost if rec.type == "complete" and job in ledger.jobs else None
        if self.sound_lineage.get(rec.id) == (outcome, cost):
            return []
        found = outcome_violations(outcome, event, cost)
        if not found:
            self.sound_lineage[rec.id] = (outcome, cost)
        return found

    def learn(self) -> list[RecordedEvent]:
        """Every recorded event in arrival order; only those not yet known (not answered
        by an append, see `_note_answers`) are read, each once; the end of a world
        checks the journal still holds exactly these."""
        known, head = len(self.log), self.journal.head()
        if head > known:
            self.log.extend(self.journal.read(after_position=known, order="position"))
        elif head < known:
            del self.log[head:]  # answered by an append that was rolled back
        return self.log

    def as_learned(self) -> list[str]:
        """Whether the journal, read whole once more, holds exactly the events the
        simulator read from it as they were recorded (the checks in between work from
        what it read); the problems found."""
        learned = self.learn()
        for rec in self.journal.read(order="position"):
            if rec.position > len(learned) or learned[rec.position - 1] != rec:
                return [f"the journal's event at position {rec.position} ({rec.id}) is not "
                        "the one it recorded there"]
        if self.journal.head() != len(learned):
            return [f"the journal holds {self.journal.head()} events, {len(learned)} were "
                    "read"]
        return []

    # -- processes ---------------------------------------------------------------------

    def process(self, name: str) -> Process:
        """The process an actor runs in (with `one_process`, all actors share one)."""
        name = "all" if self.one_process else PROCESS_OF.get(name, name)
        proc = self.processes.get(name)
        if proc is None:
            proc = self.processes[name] = Process(name, 0)
        return proc

    def scheduler(self, proc: Process) -> Scheduler:
        if proc.scheduler is None:
            if proc.name in (SERVICE_HOST, "all"):
                # In the service's process: the service's projection, not one more.
                proc.scheduler = Scheduler(MemoryJournal(), clock=lambda: proc.clock_value)
                proc.scheduler._session = self.service(proc).session
            else:
                proc.scheduler = Scheduler(self.journal, clock=lambda: proc.clock_value)
        return proc.scheduler

    def tracker(self, proc: Process, account: str) -> GPUCreditTracker:
        """The process's tracker of `account`. One process keeps one projection, so its
        trackers share one session (a shallow copy of the first tracker with another
        account): every extra projection would fold every event once more."""
        tracker = proc.trackers.get(account)
        if tracker is None:
            if proc.trackers:
                tracker = copy.copy(next(iter(proc.trackers.values())))
                tracker.account = account
            elif self.one_process:
                # The scheduler's projection serves everyone: a tracker made around it,
                # not one that folds the journal once more only to be replaced.
                tracker = object.__new__(GPUCreditTracker)
                tracker.account = account
                tracker._session = session_of(self.scheduler(proc))
            else:
                tracker = GPUCreditTracker(self.journal, account=account)
            proc.trackers[account] = tracker
        return tracker

    def restart(self, proc: Process) -> None:
        """The process dies and starts again: its projections are rebuilt from the journal."""
        _stop_service(proc)
        proc.scheduler = None
        proc.trackers = {}
        proc.checked = {}

    def close(self) -> None:
        """The world ends: stop its services' committer threads, which each keep one of
        the journal's connections (a closed journal cannot take back one checked out)."""
        for proc in self.processes.values():
            _stop_service(proc)

    def sessions(self) -> list[tuple[str, Any]]:
        """Every live projection (a facade, or the service's session), named by its
        process."""
        out: list[tuple[str, Any]] = []
        for name in sorted(self.processes):
            proc = self.processes[name]
            if proc.scheduler is not None:
                out.append((name, proc.scheduler))
            # A process's trackers share one session: one digest says it all.
            if proc.trackers and not self.one_process:
                out.append((f"{name} (trackers)", next(iter(proc.trackers.values()))))
            if proc.service is not None and (
                    proc.scheduler is None
                    or session_of(proc.scheduler) is not proc.service.session):
                out.append((f"{name} (service)", proc.service.session))
        return out

    def replayed(self) -> Ledger:
        """The journal's state, replayed in arrival order up to the head: the replay the
        whole-journal checks verify (`tools.sim.checks.Verification`), carried on."""
        from tools.sim.checks import Verification

        if self.verification is None:
            self.verification = Verification(self.journal)
        return self.verification.catch_up()

    def service(self, proc: Process) -> LedgerService:
        """The process's HTTP service (its own projection, its group-commit writer)."""
        if proc.service is None:
            proc.service = open_service(self.journal, lambda: proc.clock_value)
        return proc.service

    # -- faults ------------------------------------------------------------------------

    def _arm_crash(self) -> Callable[[], None]:
        """Make the journal's next append die before it commits; returns the disarm."""
        journal = self.journal

        def crash(*_args: Any, **_kwargs: Any) -> Any:
            raise SimulatedCrash("the process died between deciding and committing")

        # Every append of a SQL journal, in a transaction or not, goes through
        # `_append_batch`; the in-memory journal's through `append` (this instance only).
        name = "_append_batch" if hasattr(journal, "_append_batch") else "append"
        before = journal.__dict__.get(name)  # the journal's own, or `_note_answers`'s
        setattr(journal, name, crash)
        if before is None:
            return lambda: journal.__dict__.pop(name, None)
        return lambda: setattr(journal, name, before)

    # -- one op ------------------------------------------------------------------------

    def execute(self, op: Op) -> list[str]:
        """Perform `op`; the problems seen right away (answers, appends, invariants)."""
        proc = self.process(op["actor"])
        if op.get("fault") == "restart":
            self.restart(proc)
        self.crashes = []
        problems = self._perform(op, proc)
        return [f"{op.get('line', {}).get('id', op['kind'])}: the call raised {crash}"
                for crash in self.crashes] + problems

    def _perform(self, op: Op, proc: Process) -> list[str]:
        kind = op["kind"]
        if kind == "audit":
            return []  # audits need a model fold: tools.sim.checks does them
        if kind == "import":
            return self._import(op)
        if kind == "batch":
            return self._batch(op, proc)
        line = op["line"]
        self.last_ids = [line["id"]]
        if line["type"] == "grant":
            self.grant_accounts[line["id"]] = line["account"]
        proc.clock_value = line["time"] + proc.skew
        call = self._call(proc, line)
        problems: list[str] = []
        fault = op.get("fault")
        head = self.journal.head()
        committed_elsewhere = False
        if fault == "killed-writer" and self.journal.url is not None:
            # A writer process dies at op["stop"]; the caller retries here, same id.
            found, left = kill_a_writer(self, op, proc)
            problems += found
            self._note_recorded(left)
            self.appended += len(left)
            committed_elsewhere = line["id"] in self.recorded
            head = self.journal.head()
        if fault == "crash-before-commit":
            disarm = self._arm_crash()
            try:
                self._attempt(call)  # returns only when it had nothing to append
            except SimulatedCrash:
                pass
            finally:
                disarm()
            if self.journal.head() != head or (line["id"] not in self.recorded
                                               and self.journal.get(line["id"]) is not None):
                problems.append(f"{line['id']}: a decision that crashed before its commit "
                                "was recorded")
            if not op.get("retry"):
                return problems
            head = self.journal.head()
        answer, refused = self._attempt(call)
        problems += self._check_append(op, proc, head, answer, refused)
        if committed_elsewhere and not refused:
            # Recorded by the writer that died before answering: the retry's answer is
            # the first the caller gets.
            self.told[line["id"]] = answer
            problems += self._touched(op, proc, answer)
        if fault == "lost-answer" and not refused:
            # The answer never reached the caller: it retries with the same id.
            head = self.journal.head()
            again, refused_again = self._attempt(call)
            if self.journal.head() != head:
                problems.append(f"{line['id']}: a retry with the same id appended "
                                f"{self.journal.head() - head} more event(s)")
                self.appended += self.journal.head() - head
            if (again, refused_again) != (answer, refused):
                problems.append(f"{line['id']}: the retry answered {again!r}, the first "
                                f"attempt {answer!r}")
        return problems

    def _attempt(self, call: Callable[[], Any]) -> tuple[Any, bool]:
        """(the answer, False), or (the error's name, True) for a refusal. Any other
        exception is a crash of the code under test: a problem, noted in `crashes`."""
        try:
            return call(), False
        except LedgerError as exc:
            return type(exc).__name__, True
        except SimulatedCrash:
            raise
        except Exception as exc:  # whatever the code under test raised is a finding
            self.crashes.append(f"{type(exc).__name__}: {exc}".strip())
            return type(exc).__name__, True

    def command(self, op: Op, proc: Process) -> Callable[[], Any]:
        """The call that performs `op` (a command line, or a file delivery) for `proc`."""
        if op["kind"] == "import":
            data = _file_bytes(op["lines"])
            return lambda: import_file(self.journal, data, op["file"])
        return self._call(proc, op["line"])

    def _call(self, proc: Process, line: dict[str, Any]) -> Callable[[], Any]:
        kind = line["type"]
        eid = line["id"]
        if kind in ("grant", "consume"):
            tracker = self.tracker(proc, line["account"])
            if kind == "grant":
                return lambda: tracker.grant(line["amount"], line["time"], line["expiry"],
                                             pool=line.get("pool"), event_id=eid,
                                             priority=line.get("priority", DEFAULT_GRANT_PRIORITY))
            return lambda: tracker.consume(line["amount"], line["time"], pool=line.get("pool"),
                                           event_id=eid)
        if kind in ("adjust", "void", "reverse"):
            return lambda: self._correct(line)
        s = self.scheduler(proc)
        if kind == "account":
            return lambda: s.open_account(line["account"], 0,
                                          max_running=line.get("max_running"),
                                          refill_rate=line.get("refill_rate"),
                                          refill_cap=line.get("refill_cap"),
                                          share=line.get("share"),
                                          half_life=line.get("half_life", DEFAULT_HALF_LIFE),
                                          event_id=eid)
        if kind == "submit":
            return lambda: s.submit(line["job"], line["account"], line["cost"],
                                    line["priority"], pool=line.get("pool"), event_id=eid)
        if kind == "start":
            return lambda: _job_id(s.start_next(event_id=eid))
        if kind == "complete":
            return lambda: s.complete(line["job"], line["success"],
                                      refund_fraction=line.get("refund_fraction", 1.0),
                                      event_id=eid)
        if kind == "cancel":
            return lambda: s.cancel(line["job"], event_id=eid)
        raise ValueError(f"the simulator cannot perform a {kind!r} line")

    def _correct(self, line: dict[str, Any]) -> None:
        """Finance records a correction straight into the journal, as the command line
        does: the event validates itself, the id makes a retry harmless."""
        fields = {k: v for k, v in line.items() if k not in ("type", "time", "id")}
        event = from_payload(line["type"], fields)
        stream = line.get("account", "void")
        if line["type"] == "void":
            # On the grant's stream, as recorded (as `Corrections.void` does): what this
            # process has learned of the grants may lag the journal (a writer killed
            # after recording one), and a retry must name the same stream.
            target = self.journal.get(line["grant"])
            stream = target.stream if target is not None else "void"
        if line["type"] == "reverse":  # on the stream of the event it takes out
            target = self.journal.get(line["event"])
            stream = target.stream if target is not None else "reversals"
        self.journal.append([NewEvent(line["id"], stream, line["type"], line["time"],
                                      to_payload(event))])

    def _check_append(self, op: Op, proc: Process, head: int, answer: Any,
                      refused: bool) -> list[str]:
        """What one attempt appended, against what it answered."""
        line = op["line"]
        eid = line["id"]
        grew = self.journal.head() - head
        self.appended += grew
        problems: list[str] = []
        if eid in self.recorded:
            # Already recorded (a repeated line): nothing may be appended again.
            if grew:
                problems.append(f"{eid}: recorded before, appended {grew} more event(s)")
            return problems
        expected = 0 if refused else 1
        if line["type"] == "start" and answer is None:
            expected = 0
        if line["type"] == "cancel" and not refused and grew == 0:
            facade = self.scheduler(proc)
            state = facade.job_state(line["job"])
            if state != CANCELLED:
                problems.append(f"{eid}: cancel of a {state} job appended nothing")
            expected = 0
        if grew != expected:
            what = f"refused ({answer})" if refused else f"answered {answer!r}"
            problems.append(f"{eid}: {line['type']} {what}, appended {grew} event(s), "
                            f"expected {expected}")
        if expected and grew:
            rec = self.journal.get(eid)  # in the journal, not only in its answer
            if rec is None or rec.position != head + 1:
                problems.append(f"{eid}: acknowledged but not recorded at position {head + 1}")
            self.recorded.add(eid)
            if not refused:
                self.told[eid] = answer
        problems += self._touched(op, proc, answer)
        return problems

    def _touched(self, op: Op, proc: Process, answer: Any) -> list[str]:
        """Invariants, on the actor's projection, of every account an event changed since
        they were last checked there (this op's, and what it caught up with from other
        processes) and of the job the op named. A projection that did not move since its
        last check is not checked again: nothing in it changed."""
        line = op["line"]
        kind = line["type"]
        account = line.get("account")
        if kind == "void":
            account = self.grant_accounts.get(line["grant"])
        facade: Any = proc.scheduler
        if kind in ("grant", "consume", "adjust", "void", "reverse"):
            facade = next(iter(proc.trackers.values()), None)
        if facade is None:
            return []
        session = session_of(facade)
        job = line.get("job") if kind != "start" else answer
        problems = self._sound(session, proc, line["id"], [account] if account else [],
                               [job] if job else [])
        ledger: Ledger = session.ledger
        if line["type"] == "submit" and isinstance(answer, bool) and job in ledger.jobs:
            # A submit is a live decision: nothing can have changed the job since.
            state = ledger.jobs[job].state
            if answer != (state == PENDING):
                problems.append(f"{line['id']}: submit answered {answer}, the job is {state}")
        return problems

    def _sound(self, session: Any, proc: Process, label: str, accounts: list[str],
               jobs: list[str]) -> list[str]:
        """Invariants, on `session`'s projection caught up, of every account an event
        changed since they were last checked there, of `accounts` and of the `jobs`
        named (and their accounts); the lineage of every event folded since."""
        session.catch_up()
        position = session.projector.position
        since = proc.checked.get(id(session), 0)
        if position == since:
            return []
        ledger: Ledger = session.ledger
        proc.checked[id(session)] = position
        folded = self.learn()[since:position]
        changed = {rec.stream for rec in folded}
        changed.update(accounts)
        for job in jobs:
            if job in ledger.jobs:
                changed.add(ledger.jobs[job].account)
        found = violations(ledger, accounts=sorted(changed), jobs=jobs)
        found += self._lineage_of(folded, session.projector, ledger)
        return [f"{label}: invariant broken: {v}" for v in found]

    def _lineage_of(self, records: list[RecordedEvent], projector: Any,
                    ledger: Ledger) -> list[Violation]:
        """The lineage of what each of `records` did as this projection folded them (the
        outcomes it remembers, late events re-projected); the whole-journal check judges
        them again on a fresh fold."""
        found: list[Violation] = []
        decoded, excluded = self.decoded, projector.excluded
        for rec in records:
            if rec.type not in LINEAGE_TYPES or rec.id in excluded:
                continue
            outcome = projector.remembered(rec.position)
            event = decoded[rec.id] if rec.id in decoded else self.event_of(rec)
            if outcome is not None and event is not None:
                found += self.lineage(rec, event, outcome, ledger)
        return found

    def _batch(self, op: Op, proc: Process) -> list[str]:
        """Commands of several callers, decided and committed by the service's group
        commit (`tools.sim.service`), with its faults; each caller's answer checked
        against what the journal recorded, as a worker's is."""
        lines = op["lines"]
        self.last_ids = [line["id"] for line in lines]
        for line in lines:
            if line["type"] == "grant":
                self.grant_accounts[line["id"]] = line["account"]
        proc.clock_value = op["time"] + proc.skew
        service = self.service(proc)
        batch = [command_of(line) for line in lines]
        fault = op.get("fault")
        head = self.journal.head()
        problems: list[str] = []
        if fault in ("commit-fails", "commit-lost"):
            error = failure_of(fault)
            with failing_commit(self.journal, error) as strike:
                answers, groups = commit_in_turn(service, batch, strike)
            failed = [i for i, answer in enumerate(answers) if answer is error]
            # The commit that fails is the first a group makes: the fault notes which.
            # (A group whose decisions all record nothing, decided ahead of its
            # transaction on a SQL journal, opens none, and the failure strikes the next;
            # on the memory journal it opens one, and is struck, with nothing to lose.)
            group = groups[strike.group] if strike.group is not None else []
            # Unreachable: every decision of the group fails. Refused: a group of several
            # is decided again one command at a time, so none fails for the others.
            should_fail = group if fault == "commit-lost" or len(group) == 1 else []
            if failed != should_fail:
                problems.append(f"{fault}: the decisions {[lines[i]['id'] for i in failed]} "
                                f"failed, expected {[lines[i]['id'] for i in should_fail]} "
                                "(the group whose commit failed)")
            # (A line asked twice may have failed in the group and committed after it.)
            later = {lines[i]["id"] for i in range(len(lines)) if i not in failed}
            problems += self._rolled_back(
                service, [lines[i] for i in failed if lines[i]["id"] not in later])
            if failed:
                # Those callers got the error: each retries with the same id.
                again, _ = commit_in_turn(service, [batch[i] for i in failed])
                for i, answer in zip(failed, again, strict=True):
                    answers[i] = answer
        else:
            answers, _ = commit_in_turn(service, batch)
        if fault == "answers-lost":
            # Committed, and the answers never left: every caller whose decision was
            # recorded retries with the same id (the others were refused: their retry is
            # a new decision, whatever it finds). A start that found nothing recorded no
            # event but bound its id: its retry is told it found nothing, also when a
            # job could start by now.
            before = self.journal.head()
            done = [i for i, line in enumerate(lines)
                    if not isinstance(answers[i], BaseException)
                    and (self.journal.get(line["id"]) is not None
                         or (line["type"] == "start" and answers[i] is None))]
            again, _ = commit_in_turn(service, [batch[i] for i in done])
            if self.journal.head() != before:
                problems.append(f"answers-lost: the retries appended "
                                f"{self.journal.head() - before} more event(s)")
            # Each retry is told what its first attempt was, also when a later line of the
            # batch landed before it on the timeline and revised its outcome since.
            for i, retried in zip(done, again, strict=True):
                if _answer_key(answers[i]) != _answer_key(retried):
                    problems.append(f"{lines[i]['id']}: the retry answered {retried!r}, the "
                                    f"first attempt {answers[i]!r}")
        # Any of those commits may have failed and rebuilt the service's projection (a
        # commit fault, or deferred events that found their positions taken).
        self._follow(proc, service)
        problems += self._batch_appended(lines, answers, head, service)
        accounts = sorted({line["account"] for line in lines if "account" in line})
        jobs = sorted({str(j) for line in lines
                       for j in (line.get("job"), self.told.get(line["id"]))
                       if line["type"] in ("complete", "cancel", "submit", "start")
                       and isinstance(j, str)})
        problems += self._sound(service.session, proc, f"batch of {lines[0]['id']}",
                                accounts, jobs)
        return problems

    def _follow(self, proc: Process, service: LedgerService) -> None:
        """After a failed commit the service rebuilt its projection (a new session): the
        process's facades, which shared the old one, are made again around the new. The
        old one holds decisions that never committed, at positions the journal gave to
        other events since."""
        if proc.scheduler is not None and session_of(proc.scheduler) is not service.session:
            proc.scheduler = None
            proc.trackers = {}
            proc.checked = {}

    def _rolled_back(self, service: LedgerService,
                     failed: list[dict[str, Any]]) -> list[str]:
        """After a failed commit: nothing of the decisions that failed is recorded (the
        other groups committed), and the service's projection is the journal's state
        again (it had applied decisions that never committed)."""
        problems = []
        for line in failed:
            if line["id"] not in self.recorded and self.journal.get(line["id"]) is not None:
                problems.append(f"{line['id']}: its commit failed, yet it is recorded")
        session = service.session
        if session.projector.position != self.journal.head():
            problems.append(f"after a failed commit the service's projection is at position "
                            f"{session.projector.position}, the journal at "
                            f"{self.journal.head()}")
        elif self.replayed().digest() != session.digest():
            problems.append("after a failed commit the service's projection differs from "
                            "the journal's state (a replay of the journal)")
        return problems

    def _batch_appended(self, lines: list[dict[str, Any]], answers: list[Any], head: int,
                        service: LedgerService) -> list[str]:
        """What the group appended against what each caller was answered: each accepted
        decision exactly its event, once, in the order the callers asked; a refusal
        nothing."""
        problems: list[str] = []
        fresh = self.learn()[head:]
        self.appended += len(fresh)
        expected: list[str] = []
        asked: dict[str, list[tuple[dict[str, Any], Any]]] = {}  # a line may be asked twice
        for line, answer in zip(lines, answers, strict=True):
            if isinstance(answer, BaseException) and not isinstance(
                    answer, LedgerError | ServiceProblem):
                self.crashes.append(f"{type(answer).__name__}: {answer}".strip())
            asked.setdefault(line["id"], []).append((line, answer))
        for eid, attempts in asked.items():
            kind = attempts[0][0]["type"]
            # The attempt that recorded the decision: the first that was not refused (a
            # start with nothing to start records no event, but binds its id). One
            # before it recorded nothing, so the next was a new decision; every one after
            # it is a retry, and answers the same.
            deciding = [answer for _, answer in attempts
                        if not isinstance(answer, BaseException)]
            # (Also when a later line of the group landed before it on the timeline.)
            if any(_answer_key(a) != _answer_key(deciding[0]) for a in deciding[1:]):
                problems.append(f"{eid}: asked {len(attempts)} times, answered "
                                f"{[a for _, a in attempts]!r}")
            if not deciding or eid in self.recorded:
                continue
            if kind == "start" and deciding[0] is None:
                if self.journal.request(eid) is None:
                    problems.append(f"{eid}: a start that found nothing did not bind its id")
                continue
            if self.journal.get(eid) is None:
                job = service.session.ledger.jobs.get(attempts[0][0].get("job", ""))
                if not (kind == "cancel" and job is not None and job.state == CANCELLED):
                    problems.append(f"{eid}: {kind} answered {deciding[0]!r}, nothing "
                                    "recorded")
                continue
            expected.append(eid)
            self.told[eid] = _told_of(attempts[0][0], deciding[0])
        # In the order committed: a group whose commit failed is retried after the next.
        ids = sorted(rec.id for rec in fresh)
        if ids != sorted(expected):
            problems.append(f"the service recorded {ids[:6]}, its callers were answered "
                            f"{sorted(expected)[:6]}")
        self._note_recorded(fresh)
        return problems

    def _import(self, op: Op) -> list[str]:
        """Deliver a file: all of its lines so far, as one import.

        A line with an `id` is that event; a line without one is known by its content and
        how many identical lines came before it in the file (the contract's rule), so a
        file delivered again, or grown, appends only its new lines.
        """
        lines = op["lines"]
        keys = _line_keys(lines)
        self.last_ids = [str(key) for key in keys]
        head = self.journal.head()
        problems: list[str] = []
        if op.get("fault") == "killed-writer" and self.journal.url is not None:
            found, left = kill_a_writer(self, op, self.process(op["actor"]))
            problems += found
            self._note_recorded(left)
            self.appended += len(left)
            if left:  # the writer committed the delivery: its lines are in
                self.imported.update(keys)
            head = self.journal.head()
        data = _file_bytes(lines)
        fresh = len(set(keys) - self.imported - self.recorded)
        if op.get("fault") == "crash-before-commit":
            disarm = self._arm_crash()
            try:
                self._attempt(lambda: import_file(self.journal, data, op["file"]))
                problems.append(f"{op['file']}: the import survived a crash before commit")
            except SimulatedCrash:
                pass
            finally:
                disarm()
            if self.journal.head() != head:
                problems.append(f"{op['file']}: a crashed import appended "
                                f"{self.journal.head() - head} event(s)")
            head = self.journal.head()
        result, refused = self._attempt(lambda: import_file(self.journal, data, op["file"]))
        grew = self.journal.head() - head
        self.appended += grew
        reported = None if refused else result.appended
        if grew != fresh or reported != fresh:
            problems.append(f"{op['file']}: delivery of {len(lines)} lines ({fresh} new) "
                            f"appended {grew} (reported {reported})")
        if not refused:
            self.imported.update(keys)
        self._note_recorded(self.learn()[head:])
        return problems

    def _note_recorded(self, records: list[RecordedEvent]) -> None:
        for rec in records:
            self.recorded.add(rec.id)
            if rec.type == "grant":
                self.grant_accounts[rec.id] = rec.payload["account"]


def timeline_places(records: list[RecordedEvent]) -> dict[str, tuple[int, int]]:
    """Where each event, given in arrival order from the first, changes the timeline
    from: its own place (event time, position); for a reversal, the earliest place among
    the events it takes out or puts back (down its chain)."""
    places: dict[str, tuple[int, int]] = {}

    def place_of(rec: RecordedEvent) -> tuple[int, int]:
        place = (rec.time, rec.position)
        if rec.type == "reverse":
            target_id = rec.payload["event"]
            if target_id in places:
                return min(place, places[target_id])
        return place

    for rec in records:
        places[rec.id] = place_of(rec)
    return places


def revisable(records: list[RecordedEvent],
              batches: Iterable[tuple[int, int]] = ()) -> set[str]:
    """The ids among `records` (in arrival order, from the first) whose outcome a later
    one of them may have revised: one that changes the timeline from an earlier place
    (see `timeline_places`). `batches`: (first, last) positions appended together, which
    a reader knew at once, so none of them revises another (a replay lists a revision
    only of an event known before the batch: docs/architecture.md)."""
    places = timeline_places(records)
    first_of = {position: first for first, last in batches
                for position in range(first, last + 1)}
    found: set[str] = set()
    earliest_after = in_batch = (2**62, 0)
    batch = None
    for rec in reversed(records):
        first = first_of.get(rec.position, rec.position)
        if first != batch:
            batch, earliest_after, in_batch = first, min(earliest_after, in_batch), (2**62, 0)
        if earliest_after < (rec.time, rec.position):
            found.add(rec.id)
        in_batch = min(in_batch, places[rec.id])
    return found


def _file_bytes(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode()


def _line_keys(lines: list[dict[str, Any]]) -> list[Any]:
    """What identifies each line of a file: its id, else (its content, how many identical
    lines came before it in the file)."""
    seen: dict[str, int] = {}
    keys: list[Any] = []
    for line in lines:
        if "id" in line:
            keys.append(line["id"])
            continue
        text = json.dumps(line, sort_keys=True)
        keys.append((text, seen.get(text, 0)))
        seen[text] = seen.get(text, 0) + 1
    return keys


def _told_of(line: dict[str, Any], answer: Any) -> Any:
    """A service answer in the shape a worker's or a tracker's answer has (what the
    reference model is compared with)."""
    if not isinstance(answer, dict):
        return answer  # a start with nothing to start, a cancel: None
    kind = line["type"]
    if kind == "submit":
        return answer["accepted"]
    if kind == "start":
        return answer["job"]
    if kind == "complete":
        return answer["charged"]
    if kind == "consume":
        return answer["debt"]
    return None


def _answer_key(answer: Any) -> Any:
    """An answer to compare a retry's with (an error by its kind and words)."""
    if isinstance(answer, BaseException):
        return (type(answer).__name__, str(answer))
    return answer


def _job_id(job: Any) -> str | None:
    return None if job is None else str(job.id)
