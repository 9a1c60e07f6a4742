"""Bodies of the processes the concurrency tests spawn, and the checks run afterwards.

A plain module (not a conftest) so spawned children can import it by name. Children
open their own journal from a URL, exactly as separate `gpu-credits` workers would.

`check_linearizable` is the heart of the stress test: it walks the journal in canonical
order with a model of its own (a few integers per account, written independently of
`projections.ledger`) and re-decides every command: was this submit affordable right
there, was this the job `start_next` had to pick, was this job running when completed.
It compares each answer with the fold's outcome and with what the worker was told live.
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from multiprocessing.synchronize import Barrier, Event
from pathlib import Path
from typing import Any

from eventstore import Journal, JournalLike
from projections import GPUCreditTracker, LedgerError, Scheduler
from projections.projector import fold
from projections.replay import fold_canonical
from projections.session import decision

ACCOUNTS = ("acct-a", "acct-b", "acct-c", "acct-d", "acct-e")
OPENING_BALANCE = 120
MAX_RUNNING = 2
FAR = 10**9  # grants in the stress test expire this long after their time: never, here


def open_accounts(url: str, accounts: tuple[str, ...] = ACCOUNTS,
                  balance: int = OPENING_BALANCE) -> None:
    """Open the shared accounts (tight balances, at most MAX_RUNNING jobs each)."""
    with Journal(url) as journal:
        scheduler = Scheduler(journal)
        for account in accounts:
            scheduler.open_account(account, balance, max_running=MAX_RUNNING)


def stress_ops() -> int:
    """Operations per worker: $GPU_CREDITS_STRESS_OPS, else the quick default."""
    return int(os.environ.get("GPU_CREDITS_STRESS_OPS", "200"))


# -- the stress worker -----------------------------------------------------------------


@dataclass
class Told:
    """What one worker was told by the facades, keyed by the event ids it chose."""

    submits: dict[str, bool] = field(default_factory=dict)  # job id -> accepted
    submit_ids: dict[str, str] = field(default_factory=dict)  # job id -> event id
    consumes: dict[str, int] = field(default_factory=dict)  # event id -> debt after
    starts: dict[str, str] = field(default_factory=dict)  # event id -> job started
    completes: dict[str, str] = field(default_factory=dict)  # event id -> job completed
    cancels: dict[str, str] = field(default_factory=dict)  # event id -> job cancelled


def stress_worker(url: str, worker: int, ops: int, seed: int, out: str,
                  go: Event, done: Barrier | None) -> None:
    """Run `ops` random decisions through both facades; write what it was told to `out`.

    A crash is written to `out` too (the parent shows it) and breaks the barrier, so the
    other workers do not wait for this one forever.
    """
    try:
        _stress(url, worker, ops, seed, out, go, done)
    except BaseException:
        Path(out).write_text(json.dumps({"worker": worker, "crash": traceback.format_exc()}))
        if done is not None:
            done.abort()
        raise


def _stress(url: str, worker: int, ops: int, seed: int, out: str,
            go: Event, done: Barrier | None) -> None:
    rng = random.Random(seed)
    # Clocks disagree between workers: the live-decision rule must still keep the
    # canonical order the order in which decisions were made.
    skew = rng.randint(-20, 20)

    def clock() -> int:
        return int(time.time()) + skew

    journal = Journal(url, lock_timeout=60)
    scheduler = Scheduler(journal, clock=clock)
    trackers = {a: GPUCreditTracker(journal, account=a) for a in ACCOUNTS}
    told = Told()
    mine_pending: list[str] = []
    mine_running: list[str] = []
    refused: dict[str, int] = {}
    retries = mismatches = 0
    problems: list[str] = []
    go.wait()
    started = time.monotonic()

    def other_job() -> str:
        # Another worker's job, guessed by its id: this process may not know it yet
        # (Scheduler then locks from a stale projection; the session must cope).
        return f"w{rng.randrange(8)}-j{rng.randrange(max(1, ops))}"

    timing: dict[str, list[float]] = {}  # kind -> [count, seconds, slowest]
    for i in range(ops):
        eid = f"w{worker}-{i}"
        r = rng.random()
        kind = ("submit" if r < 0.30 else "start" if r < 0.52 else "complete" if r < 0.72
                else "cancel" if r < 0.82 else "consume" if r < 0.95 else "grant")
        op_began = time.monotonic()
        try:
            if r < 0.30:
                job = f"w{worker}-j{i}"
                args = (job, rng.choice(ACCOUNTS), rng.randint(5, 45), rng.randint(0, 3))

                def submit(args: tuple[str, str, int, int] = args) -> bool:
                    return scheduler.submit(*args)

                accepted = _decide(scheduler, eid, submit)
                told.submits[job] = accepted
                told.submit_ids[job] = eid
                if accepted:
                    mine_pending.append(job)
                if rng.random() < 0.05:
                    retries += 1
                    if _decide(scheduler, eid, submit) != accepted:
                        mismatches += 1
                        problems.append(f"{eid}: retried submit {job} answered differently")
            elif r < 0.52:
                got = _decide(scheduler, eid, scheduler.start_next)
                if got is not None:
                    told.starts[eid] = got.id
                    mine_running.append(got.id)
                    if rng.random() < 0.05:
                        retries += 1
                        again = _decide(scheduler, eid, scheduler.start_next)
                        if again is None or again.id != got.id:
                            mismatches += 1
                            problems.append(f"{eid}: retried start gave {again}, not {got}")
            elif r < 0.72:
                if mine_running and rng.random() < 0.9:
                    job = mine_running.pop(rng.randrange(len(mine_running)))
                else:
                    job = other_job()
                success = rng.random() < 0.7
                refund = rng.choice((1.0, 0.5, 0.0))
                _decide(scheduler, eid, scheduler.complete, job, success,
                        refund_fraction=refund)
                told.completes[eid] = job
            elif r < 0.82:
                if mine_pending and rng.random() < 0.8:
                    job = mine_pending.pop(rng.randrange(len(mine_pending)))
                else:
                    job = other_job()
                if scheduler.job_state(job) == "pending":
                    _decide(scheduler, eid, scheduler.cancel, job)
                    told.cancels[eid] = job
                else:
                    refused["not pending"] = refused.get("not pending", 0) + 1
            elif r < 0.95:
                tracker = trackers[rng.choice(ACCOUNTS)]
                amount = rng.randint(1, 12)
                debt = _decide(tracker, eid, tracker.consume, amount, clock(), live=True)
                told.consumes[eid] = debt
                if rng.random() < 0.05:
                    retries += 1
                    again = _decide(tracker, eid, tracker.consume, amount, clock(), live=True)
                    if again != debt:
                        mismatches += 1
                        problems.append(f"{eid}: retried consume said {again}, not {debt}")
            else:
                tracker = trackers[rng.choice(ACCOUNTS)]
                amount = rng.randint(20, 70)
                now = clock()
                _decide(tracker, eid, tracker.grant, amount, now, now + FAR, live=True)
        except LedgerError as exc:
            # Refused commands (a job someone else started, completed, cancelled): fine,
            # as long as nothing was appended (the journal checks prove it).
            name = type(exc).__name__
            refused[name] = refused.get(name, 0) + 1
        took = time.monotonic() - op_began
        t = timing.setdefault(kind, [0, 0.0, 0.0])
        t[0], t[1], t[2] = t[0] + 1, t[1] + took, max(t[2], took)
    seconds = time.monotonic() - started
    if done is not None:
        done.wait(timeout=600)  # everyone finished: now every view must be the same
    result = {
        "worker": worker,
        "ops": ops,
        "seconds": seconds,
        "timing": timing,
        "refused": refused,
        "retries": retries,
        "mismatches": mismatches,
        "problems": problems,
        "told": told.__dict__,
        "digests": [scheduler.state_digest()] + [t.state_digest() for t in trackers.values()],
    }
    Path(out).write_text(json.dumps(result))
    journal.close()


def _decide(facade: object, event_id: str, call: Callable[..., Any], *args: Any,
            live: bool = False, **kwargs: Any) -> Any:
    """call(*args, **kwargs) as a decision recorded under `event_id`."""
    with decision(facade, event_id=event_id, live=live):
        return call(*args, **kwargs)


# -- killed workers ------------------------------------------------------------------


def blocking_clock(gate: threading.Event | Event, ready: threading.Event | Event,
                   t: int = 1000) -> Callable[[], int]:
    """A clock that, once `gate` is set, signals `ready` and then never returns.

    Scheduler reads its clock inside `build`, i.e. inside the decision's transaction
    with the account lock held: the decision hangs there.
    """

    def clock() -> int:
        if gate.is_set():
            ready.set()
            time.sleep(3600)
        return t

    return clock


def hang_in_build_worker(url: str, account: str, ready: Event) -> None:
    """Submit a job on `account`, hanging inside the decision (to be SIGKILLed)."""
    gate = threading.Event()
    scheduler = Scheduler(Journal(url, lock_timeout=60),
                          clock=blocking_clock(gate, ready, int(time.time())))
    gate.set()
    scheduler.submit("victim-job", account, 1, 1)


def hang_after_append_worker(url: str, account: str, ready: Event) -> None:
    """Consume on `account`, its event appended but not committed (to be SIGKILLed).

    The tracker's decision joins an outer transaction of the same journal, so its
    append is executed and the commit waits for the outer block, which hangs.
    """
    journal = Journal(url, lock_timeout=60)
    tracker = GPUCreditTracker(journal, account=account)
    with journal.transaction([account]):
        with decision(tracker, event_id="victim-consume"):
            tracker.consume(1, int(time.time()))
        ready.set()
        time.sleep(3600)


# -- the checks ------------------------------------------------------------------------


@dataclass
class _Account:
    max_running: int | None = None
    free: int = 0  # active credits, not held
    debt: int = 0
    held: int = 0
    running: int = 0

    def release(self, credits: int) -> None:
        paid = min(self.debt, credits)  # released credits pay debt first
        self.debt -= paid
        self.free += credits - paid

    @property
    def room(self) -> int:  # balance - reserved
        return self.free - self.debt

    @property
    def at_cap(self) -> bool:  # runs as many jobs as it may
        return self.max_running is not None and self.running >= self.max_running


@dataclass
class _Job:
    account: str
    cost: int
    priority: int
    order: tuple[int, int]
    state: str


def check_linearizable(journal: JournalLike, told: list[dict[str, Any]] | None = None
                       ) -> list[str]:
    """Re-decide every command in canonical order with an independent model.

    Returns the problems found (empty: the journal is as if the writers took turns).
    `told`: the `Told` dicts of the workers, to compare with what they were answered.
    """
    problems: list[str] = []
    accounts: dict[str, _Account] = {}
    jobs: dict[str, _Job] = {}
    seen_time: dict[str, tuple[int, int]] = {}  # account -> (time, position) of its last
    submit_said = {j: ok for t in told or [] for j, ok in t["submits"].items()}
    consume_said = {e: d for t in told or [] for e, d in t["consumes"].items()}
    start_said = {e: j for t in told or [] for e, j in t["starts"].items()}
    by_position = sorted(journal.read(order="position"), key=lambda r: r.position)
    positions = [r.position for r in by_position]
    if positions != list(range(1, len(positions) + 1)):
        problems.append(f"positions are not 1..{len(positions)}")
    # Live decisions: on each account, later decisions never take an earlier time.
    for r in by_position:
        last = seen_time.get(r.stream)
        if last is not None and r.time < last[0]:
            problems.append(f"{r.id} at position {r.position} on {r.stream} has time "
                            f"{r.time}, before position {last[1]} at {last[0]}")
        seen_time[r.stream] = (r.time, r.position)

    def bad(rec: Any, why: str) -> None:
        problems.append(f"position {rec.position} ({rec.type} {rec.id}): {why}")

    def job_in(rec: Any, states: tuple[str, ...], did: str) -> _Job | None:
        """The job the event names, if it is in one of `states`; else None, and a problem."""
        job = jobs.get(rec.payload["job"])
        if job is None or job.state not in states:
            bad(rec, f"{did} a job that is {job and job.state}")
            return None
        return job

    for event, outcome, _ledger in fold(journal.read(order="canonical")):
        rec = event
        p = rec.payload
        if outcome.anomaly:
            bad(rec, f"the fold found an anomaly: {outcome.reason}")
        if rec.type == "account":
            acct = accounts.setdefault(p["account"], _Account())
            acct.max_running = p.get("max_running")
        elif rec.type == "grant":
            accounts.setdefault(p["account"], _Account()).release(p["amount"])
        elif rec.type == "consume":
            acct = accounts[p["account"]]
            take = min(acct.free, p["amount"])
            acct.free -= take
            acct.debt += p["amount"] - take
            if outcome.debt_after != acct.debt:
                bad(rec, f"fold says debt {outcome.debt_after}, model {acct.debt}")
            if rec.id in consume_said and consume_said[rec.id] != acct.debt:
                bad(rec, f"worker was told debt {consume_said[rec.id]}, model {acct.debt}")
        elif rec.type == "submit":
            if p["job"] in jobs:
                bad(rec, "a job id submitted twice")
                continue
            acct = accounts[p["account"]]
            before = acct.room
            affordable = p["cost"] <= acct.room
            jobs[p["job"]] = _Job(p["account"], p["cost"], p["priority"],
                                  (rec.time, rec.position),
                                  "pending" if affordable else "rejected")
            if affordable:
                acct.free -= p["cost"]
                acct.held += p["cost"]
            if outcome.ok != affordable:
                bad(rec, f"fold says accepted={outcome.ok}, model {affordable} "
                         f"(room {before}, cost {p['cost']})")
            said = submit_said.get(p["job"])
            if said is not None and said != affordable:
                bad(rec, f"worker was told accepted={said}, model {affordable}")
            if acct.room < min(0, before):
                bad(rec, f"submit left reserved > balance ({acct.room} room)")
        elif rec.type == "start":
            job = job_in(rec, ("pending",), "started")
            if job is None:
                continue
            acct = accounts[job.account]
            if acct.at_cap:
                bad(rec, f"{job.account} already runs {acct.running} of {acct.max_running}")
            best = _next_job(accounts, jobs)
            if best != p["job"]:
                bad(rec, f"start_next had to pick {best}, not {p['job']}")
            if rec.id in start_said and start_said[rec.id] != p["job"]:
                bad(rec, f"worker was told it started {start_said[rec.id]}")
            job.state = "running"
            acct.running += 1
        elif rec.type == "complete":
            job = job_in(rec, ("running",), "completed")
            if job is None:
                continue
            acct = accounts[job.account]
            before = acct.room
            f = Fraction(repr(float(p.get("refund_fraction", 1.0))))
            charge = job.cost if p["success"] else math.floor(job.cost * (1 - f))
            acct.held -= job.cost
            acct.running -= 1
            acct.release(job.cost - charge)
            job.state = "done"
            if outcome.charge != charge:
                bad(rec, f"fold charged {outcome.charge}, model {charge}")
            if acct.room < min(0, before):
                bad(rec, "a completion left reserved > balance")
        elif rec.type == "cancel":
            job = job_in(rec, ("pending", "cancelled"), "cancelled")
            if job is None:
                continue
            if job.state == "pending":
                acct = accounts[job.account]
                acct.held -= job.cost
                acct.release(job.cost)
                job.state = "cancelled"
        else:
            bad(rec, "unknown event type")
    # The fold's final figures agree with the model's.
    final = fold_state(journal)
    for name, acct in accounts.items():
        got = final.get(name)
        want = (acct.free + acct.held - acct.debt, acct.held, acct.running)
        if got != want:
            problems.append(f"{name}: fold has (balance, reserved, running) {got}, "
                            f"model {want}")
    return problems


def fold_state(journal: JournalLike) -> dict[str, tuple[int, int, int]]:
    """(balance, reserved, running) of every account, from a straight canonical fold."""
    ledger = fold_canonical(journal)
    return {name: (a.balance, a.reserved, a.running) for name, a in ledger.accounts.items()}


def _next_job(accounts: dict[str, _Account], jobs: dict[str, _Job]) -> str | None:
    """Highest priority, then oldest submit, among pending jobs of accounts below cap."""
    best: tuple[int, int, int, str] | None = None
    for job_id, job in jobs.items():
        if job.state != "pending":
            continue
        if accounts[job.account].at_cap:
            continue
        key = (-job.priority, *job.order, job_id)
        if best is None or key < best:
            best = key
    return None if best is None else best[3]
