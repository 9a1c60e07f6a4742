"""The simulated actors: one seeded random source decides every op and every fault.

`Director.next_op()` draws the next op (see `tools.sim.world`) from what the actors
know: the jobs they submitted and were told accepted, the jobs they started, the files
they delivered. It reads answers from `World.told` after each op; it never reads the
ledger, so what it asks does not depend on the code under test beyond its answers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from eventstore import MemoryJournal, NewEvent
from projections.importing import plan_import
from projections.replay import fold_canonical
from tools.sim.killed import STOPS
from tools.sim.world import Op, World

ACCOUNTS = ("acme", "bio", "cern", "dyn")
POOLS = (None, None, None, "h100")
GRANT_PRIORITIES = (None, None, None, None, 10, 50, 90)
"""A grant's priority: none (the default, 50) most often, else one of three levels."""
REFILL_RATES = (500, 700, 1800, 3600, 7000)
"""Credits per hour: from one credit in several of an account's events (most rates are
no multiple of 3,600 per hour, so the remainder carried matters) to about two a second,
as much as an account's grants bring."""
REFILL_CAPS = (5, 20, 60, 300)
"""From a bucket that fills between two events (its remainder dropped) to one that a
long quiet spell does not fill."""
SHARES = (1, 1, 2, 3, 4)
"""Fair-share weights: equal ones most often, so equal usage per share ties too."""
HALF_LIVES = (30, 60, 120)
"""Seconds: a run spans thousands, so charges halve many times over it and an account
that used much a few minutes ago goes before one that used less just now. Most accounts
of a world share one half-life, so that equal usage per share ties (it ties only within
one half-life); accounts of other half-lives compare their usage at the start's time."""
OTHER_HALF_LIVES = (10, 600, None)
"""An account's own half-life, one in five: None is the default (a week)."""
WORKERS = ("w0", "w1")
START_TIME = 1_000
MAX_SKEW = 5
"""Workers' clocks are up to this many seconds off. Reporters and finance stamp their
events with the time usage happened, which is never ahead of the latest worker clock
unless they are delivered late (then by up to 30 seconds)."""


def content_ids_by_line() -> bool:
    """Whether the importer names a line without an id by that line's own content (so
    the same line in a grown file keeps its id); until it does, every delivered line
    carries an id of its own."""
    line = b'{"type": "consume", "account": "a", "amount": 1, "time": 1}\n'
    other = b'{"type": "consume", "account": "a", "amount": 2, "time": 1}\n'
    alone = plan_import(line, "probe", MemoryJournal())
    grown = plan_import(line + other, "probe", MemoryJournal())
    return bool(alone.events) and alone.events[0].id == grown.events[0].id


def reversals_fold() -> bool:
    """Whether a `reverse` event takes the event it names out of a fold; until the
    fold does, finance records no reversals."""
    journal = MemoryJournal()
    journal.append([NewEvent("g", "a", "grant", 1, {"account": "a", "amount": 10}),
                     NewEvent("c", "a", "consume", 2, {"account": "a", "amount": 4}),
                     NewEvent("r", "a", "reverse", 3, {"event": "c", "reason": "probe"})])
    try:
        ledger = fold_canonical(journal)
    except Exception:  # an older fold may not know the event at all
        return False
    account = ledger.accounts.get("a")
    return account is not None and account.balance == 10


@dataclass(frozen=True, slots=True)
class Rates:
    """How often each actor acts and each fault strikes (per op)."""

    # Each kind of op and its share, in the order an op is drawn (what is left over
    # after the last one is a `start`).
    ops: tuple[tuple[str, float], ...] = (
        ("submit", 0.24), ("start", 0.18), ("complete", 0.15), ("cancel", 0.06),
        ("consume", 0.18), ("grant", 0.10), ("adjust", 0.015), ("void", 0.008),
        ("reverse", 0.006), ("import", 0.03), ("audit", 0.001), ("open", 0.002),
        ("batch", 0.01))
    late: float = 0.03  # a usage report or grant stamped earlier than the latest event
    late_line: float = 0.3  # a delivered line stamped earlier than the latest event
    lost_answer: float = 0.03
    crash_before_commit: float = 0.02
    restart: float = 0.0003
    killed_writer: float = 0.002  # on SQLite: a writer process SIGKILLed mid-op
    invalid: float = 0.05  # a worker names a job in the wrong state
    # Of the service's batch ops: a commit that fails (the database refuses it), one
    # that fails unreachable, answers lost after the commit; a caller's retry queued
    # beside its first attempt. A failed commit rebuilds the service's projection from
    # the journal, the cost of a restart: kept as rare as restarts (tests/sim runs them
    # often in a run of its own).
    commit_fails: float = 0.01
    commit_lost: float = 0.01
    answers_lost: float = 0.05
    queued_twice: float = 0.2


@dataclass
class Director:
    """Draws ops for a seed; `observe` tells it what the world answered."""

    seed: int
    rates: Rates = field(default_factory=Rates)
    rng: random.Random = field(init=False)
    priority_rng: random.Random = field(init=False)  # grants' priorities, apart
    cancel_rng: random.Random = field(init=False)  # which running job a cancel names
    reversal_rng: random.Random = field(init=False)  # which reversal a reversal names
    void_rng: random.Random = field(init=False)  # which grant a void names
    refill_rng: random.Random = field(init=False)  # accounts' refills, apart
    fair_rng: random.Random = field(init=False)  # accounts' fair shares, apart
    now: int = START_TIME
    step: int = 0
    accounts: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    running: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    files: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # (id, expiry) of the last grants made, for voids
    grants: list[tuple[str, int]] = field(default_factory=list)
    half_life: int | None = None  # most accounts' in this world
    half_lives: dict[str, int | None] = field(default_factory=dict)  # each account's
    skews: dict[str, int] = field(default_factory=dict)
    content_ids: bool = False  # lines without an id are known by their own content
    reversals: bool = False  # the fold takes reversed events out
    reversible: list[str] = field(default_factory=list)  # recent usage, grants, corrections
    reversed_by: list[str] = field(default_factory=list)  # recent reversals
    killed_writers: bool = False  # on a database: writers in processes of their own die
    _suffix: str = ""  # of the ids of the lines of one batch op

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.priority_rng = random.Random(f"grant priorities {self.seed}")
        self.cancel_rng = random.Random(f"cancels of running jobs {self.seed}")
        self.reversal_rng = random.Random(f"reversals of reversals {self.seed}")
        self.void_rng = random.Random(f"voids of used grants {self.seed}")
        self.refill_rng = random.Random(f"refills {self.seed}")
        self.fair_rng = random.Random(f"fair shares {self.seed}")
        self.half_life = self.fair_rng.choice(HALF_LIVES)
        self.content_ids = content_ids_by_line()
        self.reversals = reversals_fold()
        # Clocks disagree between workers: live decisions must still keep the timeline.
        self.skews = {w: self.rng.randint(-MAX_SKEW, MAX_SKEW) for w in WORKERS}

    def new_world(self) -> None:
        """Forget what the actors knew of the previous world (the clock goes on)."""
        self.accounts, self.pending, self.running, self.finished = [], [], [], []
        self.files, self.grants, self.reversible, self.reversed_by = {}, [], [], []
        self.half_life, self.half_lives = self.fair_rng.choice(HALF_LIVES), {}

    def opening(self) -> list[Op]:
        """The first ops: every account opened, with a cap on running jobs for some."""
        ops = []
        for name in ACCOUNTS:
            cap = self.rng.choice((None, 1, 2, 3))
            line: dict[str, Any] = {"type": "account", "account": name, "time": self.now,
                                    "id": f"open-{name}"}
            if cap is not None:
                line["max_running"] = cap
            self._refill(line, 0.5)
            self._fair(line, 0.9)
            ops.append(self._op("w0", line))
            ops.append(self._op("finance", self._grant(name, self.now, 60, 400)))
        return ops

    def next_op(self) -> Op:
        rng, r = self.rng, self.rates
        self.now += rng.choice((0, 1, 1, 2, 3))
        worker = rng.choice(WORKERS)
        x = rng.random()
        kind = "start"
        for candidate, rate in r.ops:
            if x < rate:
                kind = candidate
                break
            x -= rate
        if kind not in ("import", "batch", "audit"):
            drawn = self._command(kind, worker)
            if drawn is not None:
                return self._op(*drawn)
        if kind == "import":
            return self._delivery()
        if kind == "batch":
            return self._batch(worker)
        return {"step": self._next_step(), "actor": "auditor", "kind": "audit",
                "account": self._account(), "at": self.now - rng.randint(0, 40),
                "as_known_at": rng.random()}

    def next_command(self, kind: str, worker: str) -> dict[str, Any] | None:
        """A command line of `kind`, as `next_op` draws one (None: nothing to do it on)."""
        drawn = self._command(kind, worker)
        return None if drawn is None else drawn[1]

    def _command(self, kind: str, worker: str) -> tuple[str, dict[str, Any]] | None:
        """(the actor, the line) of a command of `kind`; None when there is nothing to
        do it on (no grant to void, nothing to reverse)."""
        rng = self.rng
        if kind == "submit":
            line = {"type": "submit", "account": self._account(),
                    "job": f"j{self.step}{self._suffix}", "cost": rng.randint(1, 40),
                    "priority": rng.randint(0, 3)}
            pool = rng.choice(POOLS)
            if pool:
                line["pool"] = pool
            # Fair share orders only jobs of equal priority, and few jobs wait at once:
            # most submits take one priority, so that accounts' usage decides among
            # them (drawn from the fair shares' source: the seeded stream of everything
            # else stays as it was).
            if self.fair_rng.random() < 0.65:
                line["priority"] = 1
            return worker, self._stamp(line)
        if kind == "start":
            return worker, self._stamp({"type": "start"})
        if kind == "complete":
            job = self._pick(self.running, self.pending + self.finished)
            line = {"type": "complete", "job": job, "success": rng.random() < 0.6}
            if not line["success"]:
                line["refund_fraction"] = rng.choice((1.0, 0.9, 0.5, 0.25, 0.0))
            return worker, self._stamp(line)
        if kind == "cancel":
            job = self._pick(self.pending, self.running + self.finished)
            if job not in self.pending and self.running:
                # A cancel in the wrong state names a running job when there is one (the
                # one a mistaken rule would let go), drawn from a source of its own: the
                # seeded stream of everything else stays as it was.
                job = self.cancel_rng.choice(self.running)
            return worker, self._stamp({"type": "cancel", "job": job})
        if kind == "consume":
            line = {"type": "consume", "account": self._account(),
                    "amount": rng.randint(1, 25), "time": self._report_time()}
            pool = rng.choice(POOLS)
            if pool:
                line["pool"] = pool
            return "reporter", self._id(line)
        if kind == "grant":
            return "finance", self._grant(self._account(), self._report_time(), 10, 120)
        if kind == "adjust":
            amount = rng.choice((-1, 1)) * rng.randint(1, 40)
            line = {"type": "adjust", "account": self._account(), "amount": amount,
                    "time": self._report_time(), "reason": "simulated correction"}
            return "finance", self._id(line)
        if kind == "void" and self.grants:
            grant = rng.choice(self.grants)[0]
            # Half the time one of the oldest grants not yet expired: the likeliest to
            # have paid for usage already (drawn from a source of its own: the seeded
            # stream of everything else stays as it was).
            if self.void_rng.random() < 0.5:
                live = [g for g, expiry in self.grants if expiry > self.now]
                if live:
                    grant = self.void_rng.choice(live[:3])
            line = {"type": "void", "grant": grant,
                    "time": self._report_time(), "reason": "simulated contract change"}
            return "finance", self._id(line)
        if kind == "reverse" and self.reversible and self.reversals:
            # Usage, grants and corrections; now and then a reversal, to put one back.
            target = rng.choice(self.reversible)
            # A quarter of the time, when there is one, a reversal (to put its event back), drawn
            # from a source of its own: the seeded stream of everything else stays as it
            # was. (Drawn among all reversible events, one rarely named a reversal.)
            reversal_rng = self.reversal_rng
            if self.reversed_by and reversal_rng.random() < 0.25:
                target = reversal_rng.choice(self.reversed_by[-3:])
            reverse: dict[str, Any] = {"type": "reverse", "event": target,
                                       "time": self._report_time(),
                                       "reason": "simulated mistake"}
            line = self._id(reverse)
            self.reversible.append(str(line["id"]))
            del self.reversible[:-40]
            self.reversed_by.append(str(line["id"]))
            del self.reversed_by[:-10]
            return "finance", line
        if kind == "open":
            name = f"new{self.step}"
            self.accounts.append(name)
            line = self._refill({"type": "account", "account": name}, 0.5)
            return "w0", self._stamp(self._fair(line, 0.9))
        return None

    def observe(self, op: Op, world: World) -> None:
        """Update what the actors know from the answers the world gave."""
        if op["kind"] in ("import", "audit"):
            return
        if op["kind"] == "batch":
            for line in op["lines"]:
                self._learn(line, world)
            return
        if op.get("fault") == "crash-before-commit" and not op.get("retry"):
            return
        self._learn(op["line"], world)

    def _learn(self, line: dict[str, Any], world: World) -> None:
        answer = world.told.get(line["id"])
        kind = line["type"]
        if kind == "account" and line["account"] not in self.accounts:
            self.accounts.append(line["account"])
        elif kind == "submit" and answer is True:
            self.pending.append(line["job"])
        elif kind == "start" and answer is not None and line["id"] in world.told:
            if answer in self.pending:
                self.pending.remove(answer)
            self.running.append(answer)
        elif kind in ("complete", "cancel") and line["id"] in world.told:
            for known in (self.running, self.pending):
                if line["job"] in known:
                    known.remove(line["job"])
            self.finished.append(line["job"])
            del self.finished[:-50]

    # -- helpers -----------------------------------------------------------------------

    def _next_step(self) -> int:
        self.step += 1
        return self.step

    def _op(self, actor: str, line: dict[str, Any]) -> Op:
        op: Op = {"step": self._next_step(), "actor": actor, "kind": line["type"],
                  "line": line, "fault": None}
        if line["type"] in ("consume", "grant", "adjust"):
            self.reversible.append(line["id"])
            del self.reversible[:-40]
        x = self.rng.random()
        if x < self.rates.lost_answer:
            op["fault"] = "lost-answer"
        elif x < self.rates.lost_answer + self.rates.crash_before_commit:
            op["fault"] = "crash-before-commit"
            op["retry"] = self.rng.random() < 0.7
        elif x < self.rates.lost_answer + self.rates.crash_before_commit + self.rates.restart:
            op["fault"] = "restart"
        elif self.killed_writers and x < (self.rates.lost_answer + self.rates.crash_before_commit
                                          + self.rates.restart + self.rates.killed_writer):
            self._killed_writer(op)
        return op

    def _batch(self, worker: str) -> Op:
        """Commands of several callers that queue together for the HTTP service's
        writer (`tools.sim.service`); now and then a caller's retry queued beside its
        first attempt."""
        rng = self.rng
        step = self._next_step()
        lines = []
        for i in range(rng.randint(2, 6)):
            kind = rng.choice(("submit", "submit", "start", "complete", "cancel",
                               "consume", "grant"))
            self._suffix = f"-{i}"
            line = self.next_command(kind, worker)
            self._suffix = ""
            if line is None:
                continue
            if kind in ("consume", "grant"):
                self.reversible.append(line["id"])
                del self.reversible[:-40]
            lines.append(line)
        if lines and rng.random() < self.rates.queued_twice:
            lines.append(rng.choice(lines))
        op: Op = {"step": step, "actor": "service", "kind": "batch", "time": self.now,
                  "lines": lines, "fault": None}
        x, r = rng.random(), self.rates
        if x < r.commit_fails:
            op["fault"] = "commit-fails"
        elif x < r.commit_fails + r.commit_lost:
            op["fault"] = "commit-lost"
        elif x < r.commit_fails + r.commit_lost + r.answers_lost:
            op["fault"] = "answers-lost"
        return op

    def _killed_writer(self, op: Op) -> None:
        op["fault"] = "killed-writer"
        op["stop"] = self.rng.choice(STOPS)

    def _id(self, line: dict[str, Any]) -> dict[str, Any]:
        line["id"] = f"{line['type'][0]}{self.step + 1}{self._suffix}"
        return line

    def _stamp(self, line: dict[str, Any]) -> dict[str, Any]:
        """A worker's decision: its clock now (skewed per worker: set by the world)."""
        line["time"] = self.now
        return self._id(line)

    def _account(self) -> str:
        return self.rng.choice(self.accounts or list(ACCOUNTS))

    def _report_time(self) -> int:
        if self.rng.random() < self.rates.late:
            return self.now - self.rng.randint(1, 30)  # delivered late
        return self.now + MAX_SKEW

    def _grant(self, account: str, time: int, low: int, high: int) -> dict[str, Any]:
        # Expiries land inside the run, often on the same times: the order of expiry and
        # the boundary at expiry are exercised.
        line: dict[str, Any] = {"type": "grant", "account": account,
                                "amount": self.rng.randint(low, high), "time": time,
                                "expiry": time + self.rng.choice((5, 10, 10, 20, 40, 200))}
        pool = self.rng.choice(POOLS)
        if pool:
            line["pool"] = pool
        # Now and then a priority (lower numbers are drawn first, whatever the expiry),
        # drawn from a source of its own: the seeded stream of everything else stays as
        # it was.
        priority = self.priority_rng.choice(GRANT_PRIORITIES)
        if priority is not None:
            line["priority"] = priority
        line = self._id(line)
        self.grants.append((line["id"], line["expiry"]))
        del self.grants[:-40]
        return line

    def _refill(self, line: dict[str, Any], chance: float) -> dict[str, Any]:
        """`line`, an `account` event, with a refill `chance` of the time (drawn from a
        source of its own: the seeded stream of everything else stays as it was); an
        account declared again without one has its refill turned off."""
        if self.refill_rng.random() < chance:
            line["refill_rate"] = self.refill_rng.choice(REFILL_RATES)
            line["refill_cap"] = self.refill_rng.choice(REFILL_CAPS)
        return line

    def _fair(self, line: dict[str, Any], chance: float) -> dict[str, Any]:
        """`line`, an `account` event, with a share `chance` of the time (drawn from a
        source of its own: the seeded stream of everything else stays as it was); an
        account declared again without one has fair share turned off, and its half-life
        is the default again until a share comes back with its own (the usage so far
        kept as it is then: docs/semantics.md)."""
        rng = self.fair_rng
        if rng.random() < chance:
            line["share"] = rng.choice(SHARES)
            name = line["account"]
            if name not in self.half_lives:
                own = rng.random() < 0.2
                self.half_lives[name] = (rng.choice(OTHER_HALF_LIVES) if own
                                         else self.half_life)
            half_life = self.half_lives[name]
            if half_life is not None:
                line["half_life"] = half_life
        return line

    def _declared_again(self, file: str, number: int, time: int) -> dict[str, Any]:
        """An account declared again in a delivered file, its refill changed, turned on
        or off (and its cap on running jobs with it), drawn wholly from the refills'
        own source, its share from the fair shares': a file's other lines stay as they
        were."""
        rng = self.refill_rng
        line: dict[str, Any] = {"type": "account",
                                "account": rng.choice(self.accounts or list(ACCOUNTS)),
                                "time": time}
        cap = rng.choice((None, 1, 2, 3))
        if cap is not None:
            line["max_running"] = cap
        self._refill(line, 0.7)
        self._fair(line, 0.85)
        if not self.content_ids or rng.random() < 0.5:
            line["id"] = f"{file}:{number}"
        return line

    def _pick(self, right: list[str], wrong: list[str]) -> str:
        rng = self.rng
        if right and (not wrong or rng.random() >= self.rates.invalid):
            return rng.choice(right)
        if wrong:
            return rng.choice(wrong)
        return f"j{rng.randrange(max(1, self.step))}"

    def _delivery(self) -> Op:
        """A file of usage, grants and now and then a new cap: new, delivered again, or
        grown by a few lines."""
        rng = self.rng
        step = self._next_step()
        name = rng.choice(sorted(self.files)) if self.files and rng.random() < 0.5 else None
        if name is None:
            name = f"usage-{step}.jsonl"
            self.files[name] = []
        lines = self.files[name]
        if not lines or rng.random() < 0.6:  # grown (or new): a few lines, out of order
            for _ in range(rng.randint(1, 4)):
                late = rng.random() < self.rates.late_line
                time = self.now - rng.randint(1, 25) if late else self.now + MAX_SKEW
                line: dict[str, Any]
                if rng.random() < 0.7:
                    line = {"type": "consume", "account": self._account(),
                            "amount": rng.randint(1, 20), "time": time}
                elif rng.random() < 0.9:
                    line = {"type": "grant", "account": self._account(),
                            "amount": rng.randint(5, 60), "time": time,
                            "expiry": time + rng.choice((5, 15, 60))}
                else:
                    # An account declared again with another cap (only a file can): below
                    # the jobs it runs where it lands, it is an anomaly.
                    line = self._refill({"type": "account", "account": self._account(),
                                         "time": time, "max_running": rng.choice((1, 2, 3))},
                                        0.5)
                    self._fair(line, 0.85)
                if not self.content_ids or rng.random() < 0.5:
                    line["id"] = f"{name}:{len(lines) + 1}"
                lines.append(line)
                if self.refill_rng.random() < 0.04:
                    lines.append(self._declared_again(name, len(lines) + 1, time))
        op: Op = {"step": step, "actor": "importer", "kind": "import", "file": name,
                  "lines": list(lines), "fault": None}
        x = rng.random()
        if x < self.rates.crash_before_commit:
            op["fault"] = "crash-before-commit"
        elif self.killed_writers and x < self.rates.crash_before_commit + self.rates.killed_writer:
            self._killed_writer(op)
        return op
