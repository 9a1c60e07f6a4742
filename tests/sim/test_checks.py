"""Each of the simulator's checks finds what it is there to find: fed a state or an
answer that is wrong in one way, it says so. A check that passes whatever it is given
would let a run of the simulator pass over the bug it was written for."""

from __future__ import annotations

import sys
from operator import attrgetter
from typing import Any

import planted
import pytest

from projections.ledger import Ledger
from tools.sim import model, run_script
from tools.sim.checks import _compare, full_check
from tools.sim.run import new_world
from tools.sim.world import SimulatedCrash, World


def _op(actor: str, line: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"actor": actor, "kind": line["type"], "line": line, "fault": None, "skew": 0,
            **more}


OPS = [
    _op("w0", {"type": "account", "account": "a", "time": 1, "id": "o1"}),
    _op("finance", {"type": "grant", "account": "a", "amount": 100, "time": 1,
                    "expiry": 500, "id": "g1"}),
    _op("w0", {"type": "submit", "job": "j1", "account": "a", "cost": 30, "priority": 5,
               "time": 2, "id": "s1"}),
    _op("w0", {"type": "start", "time": 3, "id": "st1"}),
    _op("reporter", {"type": "consume", "account": "a", "amount": 20, "time": 4,
                     "id": "u1"}),
    _op("w0", {"type": "complete", "job": "j1", "success": False, "refund_fraction": 0.5,
               "time": 5, "id": "c1"}),
    _op("reporter", {"type": "consume", "account": "a", "amount": 200, "time": 6,
                     "id": "u2"}),
]
"""A month in small: a grant, a job that runs and fails with half refunded, usage, debt."""


def _world() -> World:
    world = new_world()
    for op in OPS:
        assert world.execute(dict(op)) == []
    assert full_check(world) == []
    return world


def _folded(world: World) -> tuple[Ledger, model.Model, dict[str, Any]]:
    """A fresh fold of the world's journal, the reference model of it, and each event's
    outcome in the fold."""
    records = sorted(world.learn(), key=attrgetter("time", "position"))
    ledger = Ledger()
    outcomes = {rec.id: ledger.apply_recorded(rec.position, rec.id, rec.type, rec.time,
                                              rec.payload) for rec in records}
    return ledger, model.fold(records), outcomes


@pytest.mark.parametrize(("eid", "field", "said"), [
    ("u2", "debt_after", "the fold decided 136, the reference model 135"),
    ("s1", "ok", "the fold decided False, the reference model True"),
    ("c1", "charge", "the fold decided 16, the reference model 15"),
])
def test_the_fold_s_decision_of_each_event_is_held_to_the_reference_model(
        eid: str, field: str, said: str) -> None:
    ledger, reference, outcomes = _folded(_world())
    assert _compare(ledger, reference, outcomes) == []
    outcome = outcomes[eid]
    wrong = not getattr(outcome, field) if field == "ok" else getattr(outcome, field) + 1
    outcomes[eid] = outcome._replace(**{field: wrong})
    problems = _compare(ledger, reference, outcomes)
    assert any(p.startswith(f"event {eid!r}") and said in p for p in problems), problems


def test_a_decision_recorded_though_it_crashed_before_its_commit_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A process that dies in the middle of its decision's transaction, appended but not
    # committed, on a journal that keeps what the transaction appended.
    from eventstore import MemoryJournal

    def after_append(self: World) -> Any:
        journal = self.journal
        append = journal.append

        def append_then_die(*args: Any, **kwargs: Any) -> Any:
            append(*args, **kwargs)
            raise SimulatedCrash("the process died before committing")

        journal.append = append_then_die  # type: ignore[method-assign]
        return lambda: setattr(journal, "append", append)

    crashed = {**OPS[4], "fault": "crash-before-commit", "retry": True}
    assert run_script([*OPS[:4], crashed]) is None
    monkeypatch.setattr(World, "_arm_crash", after_append)
    monkeypatch.setattr(MemoryJournal, "_rollback", lambda self, *args: None)
    failure = run_script([*OPS[:4], crashed])
    assert failure is not None
    assert "u1: a decision that crashed before its commit was recorded" in failure.problems


def test_an_event_s_own_reversal_does_not_excuse_its_answer_but_a_late_event_does() -> None:
    # The answers compared with the reference model are those no later arrival could
    # have revised. Taking an event out (and putting it back) leaves its own outcome as
    # it was; an event that lands before it on the timeline may change it.
    from eventstore import MemoryJournal, NewEvent
    from tools.sim.world import revisable

    journal = MemoryJournal()
    grant = {"account": "a", "amount": 5, "expiry": 99}
    [use] = journal.append([NewEvent("u", "a", "consume", 10, {"account": "a",
                                                                  "amount": 3})])
    [out] = journal.append([NewEvent("r1", "a", "reverse", 20, {"event": "u"})])
    [back] = journal.append([NewEvent("r2", "a", "reverse", 21, {"event": "r1"})])
    assert revisable([use, out]) == set()
    assert "u" not in revisable([use, out, back])
    [late] = journal.append([NewEvent("g", "a", "grant", 5, grant)])
    assert revisable([use, out, back, late]) == {"u", "r1", "r2"}


def test_a_failure_s_report_shows_its_first_problems_and_counts_the_rest(
        capsys: pytest.CaptureFixture[str]) -> None:
    from tools.sim.__main__ import SHOWN, _say_problems

    _say_problems([f"problem {n}" for n in range(SHOWN + 3)])
    lines = capsys.readouterr().out.splitlines()
    assert lines == [*(f"  problem {n}" for n in range(SHOWN)), "  ... and 3 more"]
    _say_problems([f"problem {n}" for n in range(SHOWN)])
    assert "more" not in capsys.readouterr().out


@pytest.mark.parametrize("needed", [{3}, {0, 9}, {2, 3, 4, 11}, set(range(12))])
def test_a_shrink_keeps_only_the_ops_the_failure_needs(needed: set[int]) -> None:
    # Delta debugging down to chunks of one op: every op left is needed (taking any one
    # out makes the failure go), and what is left still fails.
    from tools.sim import shrink

    ops = [{"step": n} for n in range(12)]

    def still_fails(candidate: list[dict[str, Any]]) -> bool:
        return needed <= {op["step"] for op in candidate}

    assert [op["step"] for op in shrink(ops, still_fails=still_fails)] == sorted(needed)


def test_a_decision_recorded_under_another_id_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Accepted and appended, but not under the id the caller gave: its retry could not
    # find it.
    from projections.session import LedgerSession

    build = LedgerSession._build

    def renamed(self: LedgerSession, decide: Any, event_id: str | None, *rest: Any,
                **options: Any) -> Any:
        if event_id is not None and self.journal.get(event_id) is None:
            event_id += "~"
        return build(self, decide, event_id, *rest, **options)

    monkeypatch.setattr(LedgerSession, "_build", renamed)
    failure = run_script(OPS[:2])
    assert failure is not None
    assert "o1: acknowledged but not recorded at position 1" in failure.problems


def test_a_retry_after_a_lost_answer_that_answers_otherwise_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from projections import GPUCreditTracker

    lost = {**OPS[4], "fault": "lost-answer"}
    assert run_script([*OPS[:4], lost]) is None
    consume = GPUCreditTracker.consume
    answered: set[str | None] = set()

    def forgetful(self: GPUCreditTracker, *args: Any, **options: Any) -> int:
        debt = consume(self, *args, **options)
        again = options.get("event_id") in answered
        answered.add(options.get("event_id"))
        return debt + 1 if again else debt

    monkeypatch.setattr(GPUCreditTracker, "consume", forgetful)
    failure = run_script([*OPS[:4], lost])
    assert failure is not None
    assert "u1: the retry answered 1, the first attempt 0" in failure.problems


def test_a_service_projection_other_than_the_journal_after_a_failed_commit_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # At the journal's head, yet not its state: a failed commit's decisions left in it.
    world = _world()
    service = world.service(world.process("service"))
    service.session.catch_up()
    assert world._rolled_back(service, []) == []
    monkeypatch.setattr(type(service.session), "digest", lambda self: "0" * 64)
    assert world._rolled_back(service, []) == [
        "after a failed commit the service's projection differs from the journal's "
        "state (a replay of the journal)"]


def test_verify_carried_on_finds_a_replay_that_breaks_an_invariant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from projections.projector import Projector
    from tools.sim.checks import Verification

    world = _world()
    ingest = Projector.ingest_batch

    def unsound(self: Projector, batch: Any, **options: Any) -> Any:
        done = ingest(self, batch, **options)
        book = self.ledger.accounts["a"].book
        book.active["general"] = book.active.get("general", 0) + 1  # counted, in no batch
        return done

    monkeypatch.setattr(Projector, "ingest_batch", unsound)
    problems = Verification(world.journal).since_last(world.digest)
    assert any(p.startswith(f"verify: replay to position {world.journal.head()} breaks "
                            "an invariant: ") for p in problems), problems


def test_a_submit_answered_otherwise_than_the_job_it_left_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from projections import Scheduler

    submit = Scheduler.submit
    monkeypatch.setattr(Scheduler, "submit",
                        lambda self, *args, **options: not submit(self, *args, **options))
    failure = run_script(OPS[:3])
    assert failure is not None
    assert "s1: submit answered False, the job is pending" in failure.problems


@pytest.mark.parametrize(("wrong", "said"), [
    ("balance", "account 'a' at time 6: the fold says {'pools': {'general': -135}, "
                "'reserved': 0, 'running': 0}, the reference model {'pools': "
                "{'general': -134}, 'reserved': 0, 'running': 0}"),
    ("running", "account 'a' at time 6: the fold says {'pools': {'general': -135}, "
                "'reserved': 0, 'running': 0}, the reference model {'pools': "
                "{'general': -135}, 'reserved': 0, 'running': 1}"),
    ("job", "job 'j1': the fold says (state, charge) ('failed', 15), the reference model "
            "('failed', 16)"),
])
def test_the_fold_s_figures_are_held_to_the_reference_model(wrong: str, said: str) -> None:
    ledger, reference, outcomes = _folded(_world())
    account = reference.accounts["a"]
    if wrong == "balance":
        account.debt["general"] -= 1
    elif wrong == "running":
        account.running += 1
    else:
        reference.jobs["j1"].charge = 16
    assert _compare(ledger, reference, outcomes) == [said]


def test_a_run_whose_journal_verify_refuses_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    # The product's own verdict on the last world, as `gpu-credits verify` gives it.
    from projections.replay import VerifyReport

    monkeypatch.setattr(sys.modules["tools.sim.run"], "verify", lambda journal: VerifyReport(
        False, first_bad_position=3, problem="a planted refusal"))
    failure = run_script(OPS)
    assert failure is not None
    assert failure.problems == ["verify failed at position 3: a planted refusal"]


def test_a_retry_after_a_lost_answer_that_appends_again_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from planted import retry_appended_twice

    retry_appended_twice(monkeypatch)
    failure = run_script([*OPS[:4], {**OPS[4], "fault": "lost-answer"}])
    assert failure is not None
    assert "u1: a retry with the same id appended 1 more event(s)" in failure.problems


def test_a_batch_retried_after_its_answers_were_lost_that_appends_again_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from planted import retry_appended_twice

    batch = {"actor": "service", "kind": "batch", "time": 4, "skew": 0,
             "lines": [OPS[4]["line"]], "fault": "answers-lost"}
    assert run_script([*OPS[:4], batch]) is None
    retry_appended_twice(monkeypatch)
    failure = run_script([*OPS[:4], batch])
    assert failure is not None
    assert "answers-lost: the retries appended 1 more event(s)" in failure.problems


def test_an_answer_without_its_event_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    from projections import GPUCreditTracker

    monkeypatch.setattr(GPUCreditTracker, "consume", lambda self, *args, **options: 0)
    failure = run_script(OPS[:5])
    assert failure is not None
    assert "u1: consume answered 0, appended 0 event(s), expected 1" in failure.problems


def test_an_answer_other_than_the_recorded_decision_is_found_at_the_next_check(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The usage is recorded as decided, and its caller told one credit more of debt.
    from projections import GPUCreditTracker

    consume = GPUCreditTracker.consume
    monkeypatch.setattr(GPUCreditTracker, "consume",
                        lambda self, *args, **options: consume(self, *args, **options) + 1)
    failure = run_script(OPS)
    assert failure is not None
    assert failure.step == 5
    assert failure.problems == ["event 'u1': the caller was told 1, the reference model says 0"]


def test_the_whole_journal_check_carries_verify_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from projections.projector import Projector

    world = _world()
    world.verification = None  # a replay from the first event at the next check
    monkeypatch.setattr(Projector, "ingest_batch", lambda self, batch, **_: {})
    problems = full_check(world)
    assert any(p.startswith("verify: replay to position 7 gives digest ")
               for p in problems), problems


def test_the_whole_journal_check_judges_each_outcome_s_lineage_on_a_fresh_fold(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The completion's paying grants add up to a credit more than it charged, in a fold
    # made after the live projections had folded it right.
    world = _world()
    planted.lineage_overpaid(monkeypatch)
    problems = full_check(world)
    assert any(p.startswith("fresh fold: lineage") for p in problems), problems


def test_an_event_in_the_journal_that_no_caller_was_answered_is_found() -> None:
    from eventstore import NewEvent

    world = _world()
    world.journal.append([NewEvent("stray", "a", "consume", 7, {"account": "a",
                                                                 "amount": 1})])
    problems = full_check(world)
    assert "the journal holds 8 events; not acknowledged: ['stray']; acknowledged but " \
           "missing: []" in problems, problems


def test_a_checkpoint_that_is_not_the_state_at_its_position_is_found() -> None:
    from projections.checkpoint import CHECKPOINT, save_checkpoint
    from projections.replay import fold_canonical
    from tools.sim.checks import Verification

    world = _world()
    verification = Verification(world.journal)
    assert verification.since_last(world.digest) == []
    info = save_checkpoint(world.journal, fold_canonical(world.journal, to_position=4), 5)
    assert info is not None
    (problem,) = verification.since_last(world.digest)
    assert problem.startswith(f"verify: checkpoint {info.id} at position 5 records digest ")
    assert verification.since_last(world.digest) == []  # each judged once
    garbled = world.journal.save_snapshot(CHECKPOINT, 6, 6, world.digest, b"not a ledger")
    (problem,) = verification.since_last(world.digest)
    assert problem.startswith(f"verify: checkpoint {garbled.id} at position 6 is "
                              "unreadable: ")


def test_the_whole_journal_check_holds_the_fold_to_the_reference_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = _world()
    fold = model.fold

    def one_more_running(records: Any) -> model.Model:
        reference = fold(records)
        reference.accounts["a"].running += 1
        return reference

    monkeypatch.setattr(model, "fold", one_more_running)
    world.reference = None  # else the model of the last check is carried on, not folded
    problems = full_check(world)
    assert any(p.startswith("account 'a' at time 6: the fold says ") for p in problems), \
        problems


def test_the_whole_journal_check_holds_a_fresh_fold_to_every_invariant(
        monkeypatch: pytest.MonkeyPatch) -> None:
    world = _world()
    apply = Ledger.apply

    def unsound(self: Ledger, position: int, event_id: str, time: int, event: Any) -> Any:
        outcome = apply(self, position, event_id, time, event)
        book = self.accounts["a"].book
        book.active["general"] = book.active.get("general", 0) + 1  # counted, in no batch
        return outcome

    monkeypatch.setattr(Ledger, "apply", unsound)
    problems = full_check(world)
    assert any(p.startswith("fresh fold: invariant broken: ") for p in problems), problems


def test_the_reference_model_draws_a_pool_s_job_only_from_that_pool_and_general() -> None:
    from types import SimpleNamespace

    def rec(position: int, kind: str, **payload: Any) -> Any:
        return SimpleNamespace(position=position, id=f"e{position}", type=kind,
                               time=position, payload={"account": "a", **payload})

    granted = [rec(1, "account"), rec(2, "grant", amount=10, pool="a100")]
    folded = model.fold([*granted, rec(3, "submit", job="j", cost=5, priority=1,
                                         pool="h100")])
    assert folded.told["e3"] is False and folded.jobs["j"].state == "rejected"
    folded = model.fold([*granted, rec(3, "grant", amount=3),
                         rec(4, "submit", job="j", cost=3, priority=1, pool="h100")])
    assert folded.told["e4"] is True
    assert folded.balances("a", 4) == {"a100": 10, "general": 3}


def test_a_live_projection_other_than_a_fresh_fold_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from projections.session import LedgerSession

    world = _world()
    monkeypatch.setattr(LedgerSession, "digest", lambda self: "0" * 64)
    problems = full_check(world)
    assert any(p.startswith("the live projection of ") and p.endswith(
        f" has digest 0000000000000000…, a fresh fold of the journal {world.digest[:16]}…")
        for p in problems), problems


def test_a_command_queued_twice_that_answers_otherwise_the_second_time_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.service import commands

    twice = {"actor": "service", "kind": "batch", "time": 4, "skew": 0,
             "lines": [OPS[4]["line"], OPS[4]["line"]], "fault": None}
    assert run_script([*OPS[:4], twice]) is None
    run = commands.Usage.run
    keys: set[str] = set()

    def forgetful(self: commands.Usage, service: Any) -> Any:
        answer = run(self, service)
        if self.key in keys:
            answer = {**answer, "debt": answer["debt"] + 1}
        keys.add(str(self.key))
        return answer

    monkeypatch.setattr(commands.Usage, "run", forgetful)
    failure = run_script([*OPS[:4], twice])
    assert failure is not None
    assert any(p.startswith("u1: asked 2 times, answered ") for p in failure.problems), \
        failure.problems


def test_a_run_whose_journal_stops_chaining_reports_the_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A journal that alters an event it recorded refuses to read it back: the run fails
    # with what its checks found, its last events as the checks knew them, rather than
    # raising from its own report.
    from eventstore import MemoryJournal
    from tools.sim import run

    append = MemoryJournal._append_new
    appends = [0]

    def altering(self: MemoryJournal, events: Any) -> Any:
        recorded = append(self, events)
        appends[0] += 1
        if appends[0] == 150 and self._stored:
            row = self._stored[-1]
            self._stored[-1] = (*row[:7], row[7] + " ", row[8])
        return recorded

    monkeypatch.setattr(MemoryJournal, "_append_new", altering)
    result = run(1, 300, check_every=100, one_process=True)
    assert result.failure is not None and result.digest == ""
    assert any("ChainBroken" in p or "hash chain is broken" in p
               for p in result.failure.problems), result.failure.problems
    assert len(result.failure.last_events) == 8


def test_the_end_of_a_world_reads_the_journal_whole_against_what_the_checks_read() -> None:
    world = _world()
    assert world.as_learned() == []
    world.log[1] = world.log[1]._replace(time=world.log[1].time + 1)
    assert world.as_learned() == [
        "the journal's event at position 2 (g1) is not the one it recorded there"]


def test_a_cancel_that_leaves_its_pending_job_unrecorded_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from projections import Scheduler

    cancel = _op("w0", {"type": "cancel", "job": "j1", "time": 3, "id": "x1"})
    assert run_script([*OPS[:3], cancel]) is None
    monkeypatch.setattr(Scheduler, "cancel", lambda self, *args, **options: None)
    failure = run_script([*OPS[:3], cancel])
    assert failure is not None
    assert "x1: cancel of a pending job appended nothing" in failure.problems


def test_an_import_that_reports_other_than_it_appended_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from tools.sim import world as worlds

    lines = [{"type": "grant", "account": "a", "amount": 5, "time": 1, "expiry": 50}]
    delivery = {"actor": "importer", "kind": "import", "file": "f", "lines": lines,
                "fault": None, "skew": 0}
    assert run_script([delivery]) is None
    import_file = worlds.import_file
    monkeypatch.setattr(worlds, "import_file", lambda *args: dataclasses.replace(
        import_file(*args), appended=2))
    failure = run_script([delivery])
    assert failure is not None
    assert "f: delivery of 1 lines (1 new) appended 1 (reported 2)" in failure.problems


def test_the_reference_model_refills_by_the_rules_of_the_token_bucket() -> None:
    """Hand-worked from docs/semantics.md, "Refill (token bucket)": the model is the
    oracle the ledger's refill is held to, so its own rules are pinned here."""
    from types import SimpleNamespace

    def rec(time: int, kind: str, **payload: Any) -> Any:
        return SimpleNamespace(position=time, id=f"e{time}", type=kind, time=time,
                               payload={"account": "a", **payload})

    def general(records: list[Any], time: int) -> int:
        return model.fold(records).balances("a", time).get("general", 0)

    # Half a credit a second, up to 10: 1,800 credit-seconds a second, 3,600 a credit.
    events = [rec(1, "account", refill_rate=1800, refill_cap=10)]
    # Every event a second apart adds less than a credit: the remainder carries.
    events += [rec(t, "submit", job=f"j{t}", cost=0, priority=0) for t in range(2, 8)]
    assert general(events, 7) == 3
    # Refill pays debt first: 3 in the bucket, 5 drawn, 2 owed; 4 more by time 16 pay
    # them and leave 2 (and half a credit carried).
    events.append(rec(8, "consume", amount=5))
    assert model.fold(events).told["e8"] == 2
    assert general(events, 16) == 2
    assert general(events, 17) == 3
    # A full bucket accrues nothing and drops its remainder.
    assert general(events, 10_000) == 10
    events.append(rec(100, "submit", job="big", cost=6, priority=0))
    # The bucket fills again while the job holds 6 of it; given back, they go in above
    # the cap (the 14 drawn below leave 2 of them, not a debt of 4).
    events.append(rec(100_000, "start", job="big"))
    assert general(events, 100_000) == 16
    events.append(rec(100_020, "complete", job="big", success=False, refund_fraction=1.0))
    assert general(events, 200_000) == 16
    # A lower cap keeps what is in the bucket, which accrues again once below it.
    events.append(rec(200_000, "account", refill_rate=1800, refill_cap=3))
    events.append(rec(200_001, "consume", amount=14))
    assert general(events, 200_001) == 2
    assert general(events, 200_003) == 3
    assert general(events, 300_000) == 3
    # Off, nothing accrues; on again, from that event's time.
    events.append(rec(300_001, "account"))
    events.append(rec(300_002, "consume", amount=3))
    assert general(events, 400_000) == 0
    events.append(rec(400_000, "account", refill_rate=3600, refill_cap=5))
    assert general(events, 400_002) == 2
    assert general(events, 500_000) == 5


def test_the_reference_model_starts_jobs_by_fair_share() -> None:
    """Hand-worked from docs/semantics.md, "Fair share (off by default)": the model's
    pick is the oracle the ledger's heads heap is held to, so its rules are pinned here."""
    from types import SimpleNamespace

    events: list[Any] = []

    def add(time: int, kind: str, **payload: Any) -> str:
        eid = f"e{len(events)}"
        events.append(SimpleNamespace(position=len(events), id=eid, type=kind, time=time,
                                      payload=payload))
        return eid

    def opened(time: int, name: str, **fair: Any) -> None:
        add(time, "account", account=name, **fair)
        add(time, "grant", account=name, amount=10_000)

    def charged(time: int, name: str, cost: int) -> None:
        job = f"{name}-used-{len(events)}"
        add(time, "submit", account=name, job=job, cost=cost, priority=0)
        add(time, "start", job=job)
        add(time, "complete", job=job, success=True)

    def first(time: int, *names: str) -> str | None:
        """Each of `names` submits a job in that order; the job the next start picks."""
        jobs = [f"{name}-{len(events) + i}" for i, name in enumerate(names)]
        for name, job in zip(names, jobs, strict=True):
            add(time, "submit", account=name, job=job, cost=1, priority=0)
        start = add(time, "start", job="?")
        picked = model.fold(events).picked[start]
        for job in jobs:  # none waits on into the next question
            add(time, "cancel", job=job)
        return picked and picked.split("-")[0]

    opened(1, "a", share=1, half_life=60)
    opened(1, "b", share=2, half_life=60)
    opened(1, "c")
    charged(100, "a", 40)
    charged(160, "b", 60)
    # c has no share: first. Then by 200, a's 40 has halved 100/60 times: 12.6 per share,
    # b's 60 40/60 times, 37.8 on a share of 2: 18.9 (without decay a would be 40 > 30).
    assert first(200, "b", "a", "c") == "c"
    assert first(200, "b", "a") == "a"
    # Equal usage per share (6 on a share of 3, 2 on 1, at one time): the older submit.
    opened(300, "x", share=3, half_life=60)
    opened(300, "y", share=1, half_life=60)
    charged(300, "x", 6)
    charged(300, "y", 2)
    assert first(300, "x", "y") == "x"
    assert first(300, "y", "x") == "y"
    # An account declared again without a share sorts first; its usage is kept for when
    # a share comes back.
    charged(400, "a", 100)
    assert first(400, "a", "b") == "b"
    add(400, "account", account="a")
    assert first(400, "b", "a") == "a"
    add(401, "account", account="a", share=1, half_life=60)
    assert first(401, "a", "b") == "b"
    # A charge made before the account had a share is no usage.
    opened(500, "z")
    charged(500, "z", 500)
    add(510, "account", account="z", share=1, half_life=60)
    assert first(510, "b", "z") == "z"
    # Different half-lives: usage now, each decayed at its own rate. At 6,000, e has
    # used 1,000 (half-life 600) and f 1 (half-life 60): f first, though projected back to
    # time 0 f's 1 is 2**100 and e's 1,000 only 1,000 * 2**10.
    opened(6000, "e", share=1, half_life=600)
    opened(6000, "f", share=1, half_life=60)
    charged(6000, "e", 1000)
    charged(6000, "f", 1)
    assert first(6000, "e", "f") == "f"
    # The order of two half-lives changes with time alone: g's 5,000 (half-life 60)
    # is more than e's 1,000 at 6,000, but by 6,600 it is 5,000 / 2**10, about 4.9,
    # and e's 500.
    opened(6000, "g", share=1, half_life=60)
    charged(6000, "g", 5_000)
    assert first(6000, "g", "e") == "e"
    assert first(6600, "e", "g") == "g"
    # Declared again without a share, an account's half-life is the default week until
    # a share comes back: its usage is kept as it is then and barely decays meanwhile.
    # h's 1,000 is about 999 by 7,600 (decayed at 60 s all along it would be 1); k's 50
    # charged at 7,500 on a half-life of 60, about 16.
    opened(7000, "h", share=1, half_life=60)
    opened(7000, "k", share=1, half_life=60)
    charged(7000, "h", 1000)
    add(7000, "account", account="h")
    charged(7500, "k", 50)
    add(7600, "account", account="h", share=1, half_life=60)
    assert first(7600, "h", "k") == "k"


@pytest.mark.parametrize("line", [
    {"type": "consume", "account": "a", "amount": 5, "time": 8, "id": "u3"},  # after all
    {"type": "consume", "account": "a", "amount": 5, "time": 4, "id": "u3"},  # late
    {"type": "reverse", "event": "u1", "reason": "wrong", "time": 8, "id": "r1"},
    {"type": "reverse", "event": "u3", "reason": "wrong", "time": 9, "id": "r1"},
], ids=["after", "late", "reverses-a-folded-event", "reverses-a-new-event"])
def test_the_reference_model_carried_on_is_the_model_of_the_whole_journal(
        line: dict[str, Any]) -> None:
    # Each check folds into the model only what was recorded since the last one, where
    # that comes to a fold of the whole journal; any other model differs from the fold's.
    world = _world()
    ops = [_op("finance", line)]
    if line["id"] == "r1" and line["event"] == "u3":
        ops.insert(0, _op("reporter", {"type": "consume", "account": "a", "amount": 5,
                                       "time": 8, "id": "u3"}))
    for op in ops:
        assert world.execute(op) == []
    assert full_check(world) == []
    assert world.reference is not None and world.reference.model is not None
    whole = model.fold(world.learn())
    assert world.reference.model.figures(9) == whole.figures(9)
    assert world.reference.model.told == whole.told


@pytest.mark.parametrize("reversed_id", ["g1", "st1", None],
                         ids=["folded-by-both", "folded-by-the-last", "none"])
def test_checkpoints_are_judged_by_a_fold_carried_on_where_it_is_the_same(
        reversed_id: str | None) -> None:
    # The judge of the last checkpoints is carried on to the next where that gives the
    # fold up to it; a reversal of an event it folded makes it carry on an older one's,
    # or fold whole. Either way a right checkpoint passes and a wrong one is found.
    from eventstore import NewEvent
    from projections.checkpoint import save_checkpoint
    from projections.replay import fold_canonical
    from tools.sim.checks import Verification

    world = _world()
    journal = world.journal
    verification = Verification(journal)
    for position in (2, 4):
        assert save_checkpoint(journal, fold_canonical(journal, to_position=position),
                               position) is not None
    assert verification.since_last(world.digest) == []
    more = [NewEvent("g2", "a", "grant", 7, {"account": "a", "amount": 9, "expiry": 900})]
    if reversed_id is not None:
        more.append(NewEvent("r1", "a", "reverse", 8, {"event": reversed_id,
                                                         "reason": "wrong"}))
    journal.append(more)
    head = journal.head()
    right = fold_canonical(journal, to_position=head)
    assert save_checkpoint(journal, right, head) is not None
    assert verification.since_last(right.digest()) == []
    wrong = fold_canonical(journal, to_position=head - 1)
    info = save_checkpoint(journal, wrong, head)
    assert info is not None
    (problem,) = verification.since_last(right.digest())
    assert problem.startswith(f"verify: checkpoint {info.id} at position {head} records ")
