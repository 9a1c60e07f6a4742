"""The simulator: clean runs pass and reproduce exactly; planted bugs are found, shrunk
and written out as a file that fails again when replayed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import planted
import pytest
from matrix import full_matrix
from planted import BUGS

from eventstore import NewEvent
from projections.session import LedgerSession
from tools.sim import replay_file, run, run_script, shrink
from tools.sim.__main__ import main
from tools.sim.actors import Director, Rates
from tools.sim.killed import STOPS
from tools.sim.run import file_ops, reproduction_lines, write_reproduction

SEEDS = (1, 2, 3, 4, 5)
BUDGET = 3000  # ops per seed for the clean runs: several faults of every kind each
FIND_WITHIN = 1500  # ops within which each planted bug must be found, on every seed
FIND_SLOWER = {"fair-share usage without decay": 4000}
"""Bugs given more ops: fair share orders only jobs of equal priority waiting together,
and undecayed usage shows only where decay would have turned two accounts' order. Seed
1's world has two accounts of its half-life, and the first start it misorders is near
op 2,900."""


@pytest.mark.parametrize("seed", SEEDS)
def test_a_bounded_budget_of_seeds_passes(seed: int) -> None:
    result = run(seed, BUDGET, check_every=500)
    assert result.ok, result.failure and result.failure.problems
    assert result.steps == BUDGET
    faults = result.faults
    for kind in ("lost-answer", "crash-before-commit", "late"):
        assert faults.get(kind, 0) > 0, f"seed {seed} exercised no {kind}: {faults}"


@pytest.mark.pure_python  # a bug planted in the fold's source
def test_a_long_run_starts_new_worlds_and_counts_steps_across_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clean = run(4, 2500, epoch=1000)
    assert clean.ok and clean.steps == 2500
    BUGS["double release on cancel"](monkeypatch)
    found = run(4, 2500, epoch=1000, check_every=100)
    assert found.failure is not None
    again = run(4, found.failure.step, epoch=1000, check_every=100)
    assert again.failure is not None and again.failure.step == found.failure.step


def test_sqlite_writers_killed_mid_op_leave_nothing_half_written_and_lose_nothing() -> None:
    # Writers in processes of their own, SIGKILLed under the write lock, with their events
    # appended but not committed, and just after their commit; the simulator checks what
    # each left, retries its op, and goes on with every check.
    rates = Rates(killed_writer=0.08)
    result = run(21, 40, sqlite=True, rates=rates, check_every=20)
    assert result.ok, result.failure and result.failure.problems
    killed = {kind for kind in result.faults if kind.startswith("killed-writer")}
    assert killed == {f"killed-writer ({stop})" for stop in STOPS}, result.faults
    # Real processes, and still the seed decides where each writer died and what it left.
    again = run(21, 40, sqlite=True, rates=rates, check_every=20)
    assert (again.events, again.digest, again.faults) == (result.events, result.digest,
                                                          result.faults)


def _all_sim_schemas(url: str) -> set[str]:
    """The schemas simulations made in the database at `url`."""
    import psycopg

    from tools.bench.storage import libpq_dsn

    with psycopg.connect(libpq_dsn(url)) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE starts_with(nspname, "
                            "'sim_')").fetchall()
    return {name for (name,) in rows}


def _sim_schemas(url: str) -> set[str]:
    """The schemas this process's simulations made in the database at `url`."""
    return {n for n in _all_sim_schemas(url) if n.startswith(f"sim_{os.getpid()}_")}


@pytest.mark.postgres
def test_postgres_writers_killed_mid_op_leave_nothing_half_written_and_lose_nothing(
        pg_database_url: str) -> None:
    # As on SQLite, with each world in a schema of its own: a writer killed inside its
    # transaction leaves nothing (PostgreSQL rolls it back when the connection dies).
    before = _sim_schemas(pg_database_url)
    rates = Rates(killed_writer=0.08)
    result = run(21, 40, postgres=pg_database_url, rates=rates, check_every=20, epoch=20)
    assert result.ok, result.failure and result.failure.problems
    killed = {kind for kind in result.faults if kind.startswith("killed-writer")}
    assert killed == {f"killed-writer ({stop})" for stop in STOPS}, result.faults
    again = run(21, 40, postgres=pg_database_url, rates=rates, check_every=20, epoch=20)
    assert (again.events, again.digest, again.faults) == (result.events, result.digest,
                                                          result.faults)
    assert _sim_schemas(pg_database_url) == before  # each world's schema dropped


@pytest.mark.postgres
@pytest.mark.pure_python  # a bug planted in the fold's source
def test_a_failing_run_on_postgres_keeps_its_world_and_says_where(
        pg_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from eventstore import Journal
    from tools.bench.storage import drop_schema

    before = _sim_schemas(pg_database_url)
    BUGS["double release on cancel"](monkeypatch)
    result = run(3, 500, postgres=pg_database_url, check_every=100, epoch=50)
    failure = result.failure
    assert failure is not None and failure.database is not None
    assert failure.step > 50  # a world before the failing one, and its schema dropped
    (kept,) = _sim_schemas(pg_database_url) - before  # the failing world's, no other
    assert kept in failure.database
    journal = Journal(failure.database)
    try:
        assert journal.head() == failure.last_events[-1]["position"]
        assert journal.verify() is None
    finally:
        journal.close()
        drop_schema(pg_database_url, kept)


@pytest.mark.postgres
def test_a_postgres_run_gives_back_every_connection_its_services_kept(
        pg_database_url: str) -> None:
    # Each world's service commits on a thread that keeps one of the journal's
    # connections; a world that ended, or a process restarted, stops it. (Left running,
    # they held a connection each until a long hunt found PostgreSQL's slots all taken.)
    import threading

    def committers() -> int:
        return sum(t.name == "group-commit-write" for t in threading.enumerate())

    before = committers()
    rates = Rates(ops=tuple((kind, 0.3 if kind == "batch" else share)
                            for kind, share in Rates().ops), restart=0.02)
    result = run(8, 300, postgres=pg_database_url, rates=rates, epoch=100,
                 check_every=100)
    assert result.ok, result.failure and result.failure.problems
    assert result.faults.get("restart", 0) > 0, result.faults
    assert committers() == before


@pytest.mark.postgres
def test_an_interrupted_postgres_run_leaves_no_schema_behind(
        pg_database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _sim_schemas(pg_database_url)

    def interrupt(world: Any) -> list[str]:
        raise KeyboardInterrupt

    # (`tools.sim.run` is also the name of the function the package exports.)
    monkeypatch.setattr(sys.modules["tools.sim.run"], "full_check", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run(5, 30, postgres=pg_database_url, check_every=10)
    assert _sim_schemas(pg_database_url) == before


# Each signal and each way of running once; GPU_CREDITS_FULL_MATRIX=1 adds the other pairs.
SIGNAL_RUNS = [(signal.SIGTERM, 2), (signal.SIGINT, 1)] + (
    [(signal.SIGTERM, 1), (signal.SIGINT, 2)] if full_matrix() else [])


@pytest.mark.postgres
@pytest.mark.parametrize(("signum", "jobs"), SIGNAL_RUNS, ids=[
    f"{signal.Signals(signum).name}-{'alone' if jobs == 1 else 'in two jobs'}"
    for signum, jobs in SIGNAL_RUNS])
def test_a_run_stopped_by_a_signal_stops_between_ops_and_drops_its_schemas(
        pg_database_url: str, signum: int, jobs: int) -> None:
    # Between ops: a signal in the middle of one would cut a transaction, a batch or a
    # writer process in half, whose locks would then hold up the schema's removal.
    child = subprocess.Popen(
        [sys.executable, "-m", "tools.sim", "--postgres", pg_database_url, "--steps",
         "100000", "--seeds", str(jobs), "--jobs", str(jobs)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:  # each job (or the run alone) makes a schema named by its process
            runners = [child.pid] if jobs == 1 else [int(p) for p in Path(
                f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()]
            mine = tuple(f"sim_{pid}_" for pid in runners)
            made = {n for n in _all_sim_schemas(pg_database_url) if n.startswith(mine)}
            if len(made) >= jobs:
                break
            assert time.monotonic() < deadline, f"{jobs} schema(s) not made within 60 s"
            time.sleep(0.2)
        time.sleep(1.0)  # into the ops
        child.send_signal(signum)
        assert child.wait(60) == 128 + signum
    finally:
        child.kill()
    assert not any(n.startswith(mine) for n in _all_sim_schemas(pg_database_url))
    assert child.stderr is not None
    said = child.stderr.read().decode()
    assert "stopping before the next op" in said and "the run's worlds were removed" in said


_WRITERS_OFTEN = ("import sys; import tools.sim.run as r; from tools.sim.actors import Rates; "
                  "r.Rates = lambda: Rates(killed_writer=0.5); "
                  "from tools.sim.__main__ import main; sys.exit(main(sys.argv[1:]))")


def test_a_signal_to_the_process_group_does_not_kill_a_writer_short_of_its_stop(
        tmp_path: Path) -> None:
    # A Ctrl-C, a `timeout` or a cancelled CI job signals the whole process group. A
    # writer process that got it died before its stop, and the run reported that as a
    # failure of the op (and kept its world): the run stops between ops instead.
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITERS_OFTEN, "--seed", "21", "--steps", "100000",
         "--sqlite", "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 60
        while not Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split():
            assert time.monotonic() < deadline, "no writer within 60 s"
            time.sleep(0.02)
        time.sleep(0.3)  # the writer starting (it takes about a second)
        os.killpg(child.pid, signal.SIGTERM)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    said = err.decode()
    assert child.returncode == 128 + signal.SIGTERM, said
    assert b"FAILED" not in out, out.decode()
    assert "the run's worlds were removed" in said
    assert not list(tmp_path.glob("gpu-credits-sim-*"))


def test_the_command_line_refuses_a_postgres_url_it_cannot_use(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--postgres", "sqlite:///x.db", "--steps", "3"]) == 2
    assert "--postgres takes a PostgreSQL URL" in capsys.readouterr().err
    assert main(["--postgres", "postgresql+psycopg://h/db?options=-csearch_path%3Dx",
                 "--steps", "3"]) == 2
    assert "without options" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: one place for the journals, not two
        main(["--postgres", "postgresql+psycopg://h/db", "--sqlite"])


def test_a_seed_and_a_step_count_reproduce_a_run_exactly() -> None:
    first, again = run(11, 800), run(11, 800)
    assert (first.events, first.digest, first.faults) == (again.events, again.digest,
                                                          again.faults)
    assert run(12, 800).digest != first.digest


@pytest.mark.pure_python  # planted in the fold's source
@pytest.mark.parametrize("bug", sorted(BUGS))
def test_a_planted_bug_is_found_on_every_seed(bug: str,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    BUGS[bug](monkeypatch)
    within = FIND_SLOWER.get(bug, FIND_WITHIN)
    for seed in (1, 2, 3):
        result = run(seed, within, check_every=100)
        assert result.failure is not None, f"{bug}: seed {seed} ran {within} ops clean"


def test_a_start_that_found_nothing_left_unbound_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The service binds the id of a start that found nothing, so that its retry is told
    the same after a restart: a service that forgets to is found."""
    from tools.service.batching import BatchJournal

    bind = BatchJournal.bind_request_later

    def forgetful(self: BatchJournal, key: str, fingerprint: str, answer: str,
                  positions: Any) -> None:
        if answer != "null":
            bind(self, key, fingerprint, answer, positions)

    monkeypatch.setattr(BatchJournal, "bind_request_later", forgetful)
    for seed in (1, 2, 3):
        result = run(seed, FIND_WITHIN, check_every=100)
        assert result.failure is not None, f"seed {seed} ran {FIND_WITHIN} ops clean"


@pytest.mark.pure_python
@pytest.mark.parametrize("bug", ["expiry order reversed", "double release on cancel",
                                 "late event not re-projected"])
def test_a_failure_shrinks_to_a_file_that_fails_again(
        bug: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    BUGS[bug](monkeypatch)
    result = run(2, FIND_WITHIN, check_every=100)
    assert result.failure is not None
    smallest = shrink(result.failure.ops, budget_seconds=60)
    assert len(smallest) < len(result.failure.ops)
    assert run_script(smallest) is not None
    path = tmp_path / "repro.jsonl"
    write_reproduction(path, reproduction_lines(smallest))
    assert replay_file(path) is not None
    assert main(["--replay", str(path)]) == 1
    monkeypatch.undo()
    assert replay_file(path) is None  # without the bug the same lines pass
    assert main(["--replay", str(path)]) == 0


def test_a_retried_line_in_a_file_is_performed_as_a_retry(tmp_path: Path) -> None:
    path = tmp_path / "retry.jsonl"
    path.write_text(
        '{"type": "account", "account": "a", "time": 1, "id": "o1"}\n'
        '{"type": "grant", "account": "a", "amount": 9, "time": 1, "expiry": 5, "id": "g1"}\n'
        '{"type": "consume", "account": "a", "amount": 4, "time": 2, "id": "u1"}\n'
        '{"type": "consume", "account": "a", "amount": 4, "time": 2, "id": "u1"}\n')
    assert [op["line"]["id"] for op in file_ops(path.read_text())] == ["o1", "g1", "u1", "u1"]
    assert replay_file(path) is None


def test_the_command_line_runs_seeds_and_refuses_bad_input(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--seed", "3", "--seeds", "2", "--steps", "300"]) == 0
    out = capsys.readouterr().out
    assert "seed 3: 300 steps" in out and "seed 4: 300 steps" in out
    assert main(["--steps", "-1"]) == 2
    with pytest.raises(SystemExit) as help_exit:
        main(["--help"])
    assert help_exit.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "Exit status: 0 every run passed, 1 a run failed, 2 bad input" in said
    assert "--out DIR" in said and "--shrink-seconds S" in said
    # Each bad number is named with its value; none runs anything.
    for argv, said in [
            (["--seed", "-1"], "--seed must be at least 0, got -1 (a negative seed runs "
                               "the same ops as seed 1)"),
            (["--steps", "0"], "--steps must be at least 1, got 0"),
            (["--seeds", "0"], "--seeds must be at least 1, got 0"),
            (["--check-every", "0"], "--check-every must be at least 1, got 0"),
            (["--epoch", "-5"], "--epoch must be at least 1, got -5"),
            (["--shrink-seconds", "-1"], "--shrink-seconds must be a number of seconds, "
                                         "0 or more, got -1.0"),
            (["--shrink-seconds", "nan"], "0 or more, got nan"),
            (["--jobs", "100000", "--seeds", "100000"],
             f"--jobs must be at most {4 * (os.cpu_count() or 1)} (4 per core")]:
        assert main([*argv, "--out", str(tmp_path / "out")]) == 2, argv
        captured = capsys.readouterr()
        assert said in captured.err and not captured.out, argv
    assert not (tmp_path / "out").exists()
    # A folder the reproduction could not be written to is refused before the run, not
    # found (with a traceback) once the run and its shrink are done.
    (tmp_path / "a-file").write_text("")
    assert main(["--steps", "3", "--out", str(tmp_path / "a-file")]) == 2
    assert "is not one" in capsys.readouterr().err
    assert main(["--steps", "3", "--out", str(tmp_path / "a-file" / "below")]) == 2
    assert "cannot write in" in capsys.readouterr().err
    assert main(["--steps", "3", "--out", str(tmp_path / "new" / "folder")]) == 0
    assert not (tmp_path / "new").exists()  # made only for a failure
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "grant", "account": "a", "amount": 1, "id": "g"}\n')
    assert main(["--replay", str(bad)]) == 2


@pytest.mark.pure_python  # a bug planted in the fold's source
def test_a_failing_run_reports_seed_step_events_and_a_replay_command(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    BUGS["double release on cancel"](monkeypatch)
    assert main(["--seed", "3", "--steps", "500", "--out", str(tmp_path),
                 "--shrink-seconds", "20"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^FAILED: seed 3, step \d+ of 500$", out, re.M), out
    assert "last events (arrival order):" in out
    assert "reproduce the run: python -m tools.sim --seed 3 --steps" in out
    assert "replay it: python -m tools.sim --replay " in out
    (written,) = tmp_path.glob("seed-3-step-*.jsonl")
    assert replay_file(written) is not None
    assert "ran out" not in out and "not shrunk" not in out and "stopped by" not in out
    # A shrink cut short by its time says so: what it wrote depends on the machine.
    assert main(["--seed", "3", "--steps", "500", "--out", str(tmp_path / "no"),
                 "--shrink-seconds", "0"]) == 1
    assert re.search(r"^shrunk to (\d+) of \1 ops \(not shrunk: --shrink-seconds 0\)",
                     capsys.readouterr().out, re.M)


@pytest.mark.pure_python  # a bug planted in the fold's source
def test_the_command_to_reproduce_a_run_fails_at_the_step_it_names(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # The step a whole-journal check finds a bug at depends on how often they come: the
    # command left out a --check-every other than the default, and its run failed at
    # another (earlier) step.
    BUGS["expiry order reversed"](monkeypatch)
    out = _run_main(["--seed", "5", "--steps", "3000", "--check-every", "2500", "--out",
                     str(tmp_path), "--shrink-seconds", "0"], capsys)
    found = re.search(r"^FAILED: seed 5, step (\d+) of 3000$", out, re.M)
    command = re.search(r"^reproduce the run: python -m tools.sim (.*)$", out, re.M)
    assert found is not None and command is not None, out
    step = found[1]
    assert command[1] == f"--seed 5 --steps {step} --check-every 2500"
    # Ten problems shown, and how many more there are.
    shown = re.search(r"^FAILED: .*\n((?:  .*\n)*)last events", out, re.M)
    assert shown is not None and len(shown[1].splitlines()) == 11
    assert re.search(r"^  \.\.\. and \d+ more$", shown[1], re.M)
    again = _run_main([*command[1].split(), "--out", str(tmp_path / "again"),
                       "--shrink-seconds", "0"], capsys)
    assert f"FAILED: seed 5, step {step} of {step}\n" in again


def _run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What `main(argv)` printed, a run that fails."""
    assert main(argv) == 1
    return capsys.readouterr().out


@pytest.mark.pure_python  # a bug planted in the fold's source
@pytest.mark.parametrize("jobs", [1, 2], ids=["alone", "in two jobs"])
def test_a_stop_while_shrinking_still_reports_and_writes_the_failure(
        jobs: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # A shrink takes up to a minute; a signal then (or, with --jobs, another seed's
    # failure) raised out of it: nothing was written, and in a job the failure was not
    # even said (the job reported its seed stopped).
    sim_run = sys.modules["tools.sim.run"]  # (tools.sim.run is also the function)
    BUGS["double release on cancel"](monkeypatch)
    script = sim_run.run_script
    calls = [0]

    def stopping_on_the_third(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 3:
            sim_run.request_stop()
        return script(*args, **kwargs)

    monkeypatch.setattr(sim_run, "run_script", stopping_on_the_third)
    status = main(["--seed", "3", "--seeds", str(jobs), "--jobs", str(jobs), "--steps",
                   "500", "--out", str(tmp_path), "--shrink-seconds", "30"])
    out = capsys.readouterr().out
    assert status == 1, out
    # In two jobs, seeds 3 and 4 run at once, and a failure stops the other seed only
    # if it comes first: which of them report depends on the machine's load.
    failed = re.findall(r"FAILED: seed (\d+), step (\d+) of 500", out)
    possible = [("3", "55")] if jobs == 1 else [("3", "55"), ("4", "61")]
    assert failed and len(set(failed)) == len(failed) \
        and all(f in possible for f in failed), out
    assert "stopped while shrinking, at " in out
    # Replayed as a new command line would: no stop asked for, none to come.
    monkeypatch.setattr(sim_run, "run_script", script)
    sim_run.request_stop(False)
    for seed, step in failed:
        events = tmp_path / f"seed-{seed}-step-{step}.jsonl"
        ops = tmp_path / f"seed-{seed}-step-{step}.ops.jsonl"
        assert f"replay it: python -m tools.sim --replay {events}  (or {ops})" in out
        assert replay_file(events) is not None and replay_file(ops) is not None


def test_a_journal_that_stores_other_than_it_answers_is_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The step's checks work from what each append answered; what the journal holds is
    # read back every K steps and must be the same.
    from eventstore import MemoryJournal

    quick = MemoryJournal._append_new

    def misreported(self: MemoryJournal, events: Any) -> Any:
        recorded = quick(self, events)
        if recorded and recorded[0].type == "consume":
            recorded = [rec._replace(time=rec.time + 1) for rec in recorded]
        return recorded

    monkeypatch.setattr(MemoryJournal, "_append_new", misreported)
    result = run(1, 400, check_every=200)
    assert result.failure is not None
    assert any("not the one it answered" in p for p in result.failure.problems), \
        result.failure.problems


def test_a_charge_whose_lineage_does_not_add_up_is_found_at_its_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The grants a completion names as paying add up to one credit more than it charged.
    # The whole-journal checks are kept away (K beyond the run): the step's own check
    # must find it, on the projection that folded it.
    planted.lineage_overpaid(monkeypatch)
    result = run(1, 1500, check_every=10**6, one_process=True)
    assert result.failure is not None
    assert any("invariant broken: lineage" in p for p in result.failure.problems), \
        result.failure.problems


def test_the_service_group_commit_is_exercised_with_its_faults() -> None:
    # Batches of several callers' commands through the service's own writer: commits
    # that fail (refused, or the database unreachable) and answers lost after a commit.
    rates = Rates(commit_fails=0.3, commit_lost=0.3, answers_lost=0.3)
    result = run(8, 1500, rates=rates, check_every=500)
    assert result.ok, result.failure and result.failure.problems
    for kind in ("commit-fails", "commit-lost", "answers-lost"):
        assert result.faults.get(kind, 0) > 0, result.faults


@pytest.mark.parametrize("bug", ["projection kept after a failed commit",
                                 "unreachable batch retried one at a time"])
def test_a_group_commit_bug_is_found(bug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tools.service import groupcommit

    if bug == "projection kept after a failed commit":
        # The decisions of a batch that never committed stay in the live projection.
        monkeypatch.setattr(groupcommit.GroupCommit, "_recover", lambda self, exc: None)
    else:
        # A lost connection is taken for a refused commit: the group's decisions are
        # tried again one at a time instead of all failing.
        monkeypatch.setattr(groupcommit, "_unreachable", lambda exc: False)
    rates = Rates(commit_fails=0.3, commit_lost=0.3, answers_lost=0.3)
    for seed in (1, 2):
        result = run(seed, FIND_WITHIN, rates=rates, check_every=100)
        assert result.failure is not None, f"{bug}: seed {seed} ran {FIND_WITHIN} ops clean"


def test_verify_carried_on_from_the_last_check_agrees_with_verify(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every K steps the simulator verifies the events since its last check only; that
    # must come to what `verify` says of the whole journal, and find what it finds.
    from projections.replay import fold_canonical, replay, verify
    from tools.sim.checks import Verification
    from tools.sim.run import _epoch_ops, new_world, perform

    director = Director(5, Rates())
    director.new_world()
    world = new_world()
    verification = Verification(world.journal)
    ops = _epoch_ops(director, 1200)
    for _ in range(3):
        chunk = [next(ops) for _ in range(400)]
        _, failure = perform(world, chunk, check_every=10**6, product_verify=False,
                             observe=lambda op: director.observe(op, world))
        assert failure is None, failure.problems
        digest = fold_canonical(world.journal).digest()
        assert verification.since_last(digest) == []
        assert verification.projector.position == world.journal.head()
    assert verify(world.journal).ok
    assert verification.projector.ledger.digest() == replay(world.journal).ledger.digest()
    # A replay that loses what it folds is found at the next check.
    from projections.projector import Projector

    monkeypatch.setattr(Projector, "ingest_batch", lambda self, batch, **_: {})
    world.journal.append([NewEvent("late-grant", "acme", "grant", 1001,
                                   {"account": "acme", "amount": 7, "expiry": 9999})])
    found = verification.since_last(fold_canonical(world.journal).digest())
    assert any("verify: replay to position" in p for p in found), found


def test_whole_journal_checks_space_out_with_a_worlds_length(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every K ops up to GROWTH * K ops into a world, then every 1/GROWTH of the ops the
    world has performed: a long world's fresh folds stay linear in its length. A new
    world starts the schedule again."""
    import sys

    from tools.sim.run import GROWTH

    module = sys.modules["tools.sim.run"]
    full_check = module.full_check
    at: list[int] = []  # the ops performed in the run when each check came
    performed = 0
    original = module.perform

    def perform(world: Any, ops: Any, **options: Any) -> Any:
        def counting() -> Any:
            nonlocal performed
            for op in ops:
                performed += 1
                yield op

        def check(world: Any) -> list[str]:
            at.append(performed)
            return full_check(world)  # type: ignore[no-any-return]

        monkeypatch.setattr(module, "full_check", check)
        return original(world, counting(), **options)

    monkeypatch.setattr(module, "perform", perform)
    k, length = 10, 400
    result = run(3, 2 * length, check_every=k, epoch=length, one_process=True)
    assert result.ok, result.failure and result.failure.problems
    expected: list[int] = []
    for world in (0, length):
        due = k
        while due < length:
            expected.append(world + due)
            due += max(k, due // GROWTH)
        expected.append(world + length)  # the end of each world
    assert at == expected
    # Every K ops up to GROWTH * K (160), then further apart.
    assert expected[GROWTH - 1:GROWTH + 5] == [160, 170, 180, 191, 202, 214]


def test_each_event_is_decoded_as_from_payload_decodes_it() -> None:
    # The checks decode each record once per world from the text the journal stores
    # (the fold's fast way); that must be the event `from_payload` makes of the payload
    # read, or None where it raises, for every record of a run and for payloads that
    # do not decode.
    from eventstore import RecordedEvent
    from projections.events import from_payload
    from tools.sim.run import _epoch_ops, new_world, perform

    director = Director(3, Rates())
    director.new_world()
    world = new_world()
    _, failure = perform(world, _epoch_ops(director, 600), check_every=10**6,
                         product_verify=False, observe=lambda op: director.observe(op, world))
    assert failure is None, failure.problems
    records = list(world.journal.read(order="position"))
    assert {rec.type for rec in records} >= {"grant", "consume", "submit", "complete"}
    odd = [{"account": "a", "amount": 0}, {"account": "a", "amount": 5, "extra": 1},
           {"account": "a", "amount": 1.5}, {"account": "", "amount": 5},
           {"account": "a", "amount": 2**70}, {"account": "a\x00", "amount": 5}, {},
           {"account": "a", "amount": float("nan")}]
    records += [RecordedEvent(len(records) + i, f"odd-{i}", "a", 1, kind, 1, 0, payload, "")
                for i, payload in enumerate(odd) for kind in ("consume", "grant", "adjust")]

    def generic(rec: RecordedEvent) -> Any:
        try:
            return from_payload(rec.type, rec.payload)
        except (ValueError, TypeError):
            return None

    for rec in records:
        assert world.event_of(rec) == generic(rec), rec


def _late_usage_in_a_batch() -> list[dict[str, Any]]:
    """A grant of pool credits, then a batch whose answers are lost: a submit without a
    pool (rejected: the pool's credits are not its own), then a usage report of that pool
    placed before the submit on the timeline."""
    grant = {"account": "dyn", "amount": 50, "expiry": 23028, "id": "g1", "pool": "h100",
             "time": 22988, "type": "grant"}
    submit = {"account": "dyn", "cost": 17, "id": "s2-0", "job": "j2-0", "priority": 3,
              "time": 22993, "type": "submit"}
    late = {"account": "dyn", "amount": 25, "id": "c2-1", "pool": "h100", "time": 22977,
            "type": "consume"}
    return [
        {"step": 1, "actor": "finance", "kind": "grant", "line": grant, "fault": None},
        {"step": 2, "actor": "service", "kind": "batch", "time": 22993,
         "lines": [submit, late], "fault": "answers-lost"},
    ]


def test_a_retry_answers_as_told_though_a_late_event_of_its_own_batch_revised_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by seed 5007 at step 15679: a batch whose answers were lost held a rejected
    # submit, then a usage report placed before it on the timeline (so the reason's
    # figures, as the fold has them now, count the late usage). The retry is told what
    # the first attempt was; a retry told the outcome as revised is found.
    ops = _late_usage_in_a_batch()
    with monkeypatch.context() as planted:
        planted.setattr(LedgerSession, "_as_told", lambda self, recorded: None)
        failure = run_script(ops)
        assert failure is not None and "the retry answered" in str(failure.problems)
    ops = _late_usage_in_a_batch()
    assert run_script(ops) is None
    # Without the late usage the retry must answer exactly as the first attempt did.
    submit, late = ops[1]["lines"]
    ops[1]["lines"] = [submit, {**late, "time": 22993}]
    assert run_script(ops) is None
    # Found by seed 5020 at step 8828: the same submit queued twice in one group, the
    # late usage between the two; the second is decided in the next group, as a retry.
    ops[1].update(lines=[submit, late, submit], fault=None)
    assert run_script(ops) is None


def test_a_late_line_of_a_batch_may_revise_an_answer_of_that_batch_unlisted() -> None:
    # A usage report answered a debt of 9 (7 of them in h100), then a grant of h100
    # credits queued with it, placed before it on the timeline, paid those 7. Both were
    # appended as one batch, which a replay knew at once: it lists no revision inside a
    # batch (docs/architecture.md), and the check wanted one.
    grant = {"account": "new777", "amount": 16, "expiry": 2641, "id": "g1148",
             "priority": 10, "time": 2631, "type": "grant"}
    usage = {"account": "new777", "amount": 23, "id": "c1150", "pool": "h100",
             "time": 2635, "type": "consume"}
    answered = {"account": "new777", "amount": 2, "id": "c1338-0", "time": 2898,
                "type": "consume"}
    late = {"account": "new777", "amount": 55, "expiry": 2888, "id": "g1338-1",
            "pool": "h100", "priority": 90, "time": 2868, "type": "grant"}
    ops: list[dict[str, Any]] = [
        {"step": 1, "actor": "finance", "kind": "grant", "line": grant, "fault": None},
        {"step": 2, "actor": "reporter", "kind": "consume", "line": usage, "fault": None},
        {"step": 3, "actor": "service", "kind": "batch", "time": 2893,
         "lines": [answered, late], "fault": None}]
    assert run_script(ops) is None


def test_a_cancel_queued_twice_answers_cancelled_though_a_late_usage_rejected_its_job(
        ) -> None:
    # Found by seed 7011 at step 6983: a batch cancels a pending job, then a usage report
    # lands before the job's submit on the timeline and makes that submit a rejection; the
    # same cancel, queued twice, is decided again in the next group as a retry. It is
    # told what the first attempt was ("cancelled"), not the job's state now ("rejected").
    job = {"account": "dyn", "cost": 15, "id": "s6978", "job": "j6977", "priority": 2,
           "time": 10889, "type": "submit"}
    cancel = {"id": "c6984-0", "job": "j6977", "time": 10895, "type": "cancel"}
    late = {"account": "dyn", "amount": 16, "id": "c6984-1", "time": 10869, "type": "consume"}
    ops: list[dict[str, Any]] = [
        {"step": 1, "actor": "reporter", "kind": "consume", "fault": None,
         "line": {"account": "dyn", "amount": 15, "id": "c1", "time": 10661,
                  "type": "consume"}},
        {"step": 2, "actor": "finance", "kind": "grant", "fault": None,
         "line": {"account": "dyn", "amount": 51, "expiry": 10924, "id": "g2",
                  "time": 10724, "type": "grant"}},
        {"step": 3, "actor": "reporter", "kind": "consume", "fault": None,
         "line": {"account": "dyn", "amount": 13, "id": "c3", "pool": "h100",
                  "time": 10750, "type": "consume"}},
        {"step": 4, "actor": "w0", "kind": "submit", "fault": None, "line": job},
        {"step": 5, "actor": "service", "kind": "batch", "time": 10895, "fault": None,
         "lines": [cancel, late, cancel]},
    ]
    assert run_script(ops) is None


def test_a_failure_that_needs_its_faults_is_written_as_ops_that_fail_again(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    # A planted bug only a batch whose answers were lost shows: every retry is taken to
    # answer differently from its first attempt. The events alone (a grant, a submit and
    # a usage report) pass; the ops, with the batch and its fault, fail again.
    from tools.sim import __main__ as cli
    from tools.sim.run import Failure, RunResult, file_ops, write_ops

    monkeypatch.setattr(LedgerSession, "_as_told", lambda self, recorded: None)
    ops = _late_usage_in_a_batch()
    failure = run_script(ops)
    assert failure is not None
    lines = tmp_path / "lines.jsonl"
    write_reproduction(lines, reproduction_lines(ops))
    assert replay_file(lines) is None
    written = tmp_path / "ops.jsonl"
    write_ops(written, ops)
    assert file_ops(written.read_text()) == ops
    assert replay_file(written) is not None
    assert main(["--replay", str(written)]) == 1

    cli._report_failure(RunResult(9, 2, 0.1, Failure(2, failure.problems, ops, [])),
                        Failure(2, failure.problems, ops, []), tmp_path / "out", 5.0,
                        cli.EPOCH, {}, "")
    out = capsys.readouterr().out
    assert "the events alone pass" in out
    (ops_file,) = (tmp_path / "out").glob("seed-9-step-2.ops.jsonl")
    assert f"replay it: python -m tools.sim --replay {ops_file}\n" in out
    monkeypatch.undo()
    assert replay_file(ops_file) is None  # without the bug the same ops pass


def test_a_reproduction_line_that_is_an_incomplete_op_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"step": 1, "actor": "service", "kind": "batch", "time": 5}\n')
    with pytest.raises(ValueError, match="line 1: an op of kind 'batch' needs 'lines'"):
        replay_file(path)
    assert main(["--replay", str(path)]) == 2


_GRANT = '{"type": "grant", "account": "a", "amount": 9, "time": 1, "expiry": 5, "id": "g1"}'


@pytest.mark.parametrize(("text", "said"), [
    (_GRANT + "\n{not json\n", "line 2: not JSON: Expecting property name"),
    (_GRANT[:40], "line 1: not JSON: Unterminated string"),
    ("", "no line to perform"),
    ("\n\n", "no line to perform"),
    ("[1, 2]\n", "line 1: expected a JSON object, got list"),
    (_GRANT + "\n" + _GRANT.replace('"time": 1', '"time": "noon"'),
     "line 2: expected a time (an integer), got 'noon'"),
    (_GRANT.replace('"amount": 9', '"amount": "nine"'), "line 1: amount must be an integer"),
    (_GRANT.replace('"account": "a", ', ""), "line 1: grant event is missing account"),
    ('{"type": "cancel", "time": 3, "id": "c1"}', "line 1: cancel event is missing job"),
    (_GRANT.replace('"grant"', '"refund"'),
     "line 1: the simulator performs lines of type account, grant"),
    ('{"account": "a", "amount": 1, "time": 3}', 'line 1: missing "type"'),
    ('{"step": 1, "actor": "w0", "kind": "submit", "line": {}}',
     "line 1: expected a time (an integer), got None"),
    ('{"step": 1, "actor": "w0", "kind": "refund", "line": {"time": 1}}',
     "line 1: an op's kind is one of account, grant"),
    ('{"step": 1, "actor": "auditor", "kind": "audit", "account": "a"}',
     "line 1: an op of kind 'audit' needs 'at'"),
    ('{"step": 1, "actor": "w0", "kind": "grant", "fault": "killed-writer", "line": '
     + _GRANT + '}', "line 1: a killed writer stops at one of deciding, appended"),
], ids=["bad JSON", "cut short", "empty", "blank", "not an object", "bad time",
        "bad amount", "no account", "no job", "unknown type", "no type", "empty op line",
        "unknown op", "incomplete audit", "killed writer without its stop"])
def test_an_edited_or_cut_reproduction_is_bad_input_that_names_its_line(
        text: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Before, such a line was performed and its KeyError or TypeError reported as "the
    # ledger raised" (exit 1), a JSON error named the column's line within the line,
    # and an empty file "passed".
    path = tmp_path / "edited.jsonl"
    path.write_text(text)
    assert main(["--replay", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"tools.sim: error: {path}: ")
    assert captured.err.count("\n") == 1  # one line
    assert said in captured.err and not captured.out, captured.err


def test_what_a_run_writes_is_read_back_by_replay(tmp_path: Path) -> None:
    # Every line a run's reproduction can hold passes the replay's checks: the events of
    # every kind of op, and the ops themselves with every fault.
    rates = Rates(ops=tuple((kind, 0.3 if kind == "batch" else share)
                            for kind, share in Rates().ops),
                  restart=0.02, commit_fails=0.1, answers_lost=0.2, killed_writer=0.05)
    from tools.sim.run import _epoch_ops, _observer, new_world, perform, write_ops

    director = Director(6, rates)
    director.killed_writers = True
    director.new_world()
    world = new_world(None, director.skews)
    observe = _observer(director, world, {})
    ops: list[dict[str, Any]] = []

    def keep(op: dict[str, Any]) -> None:
        observe(op)
        ops.append(dict(op, skew=world.process(op["actor"]).skew))

    perform(world, _epoch_ops(director, 600), check_every=1000, observe=keep,
            product_verify=False)
    assert {op.get("fault") for op in ops} >= {"killed-writer", "lost-answer",
                                                "answers-lost", "restart"}
    events = tmp_path / "events.jsonl"
    write_reproduction(events, reproduction_lines(ops))
    assert len(file_ops(events.read_text())) > 300
    written = tmp_path / "ops.jsonl"
    write_ops(written, ops)
    assert file_ops(written.read_text()) == ops


def test_a_start_that_found_nothing_retries_as_a_new_decision_after_lost_answers() -> None:
    # Found with many lost answers (seed 109 of a heavy-fault mix): a start queued twice
    # in a group found nothing to start the first time (recording nothing) and started
    # the job submitted between the two the second time, under the same id. The first
    # caller's retry answers with that start: its first attempt had recorded nothing.
    grant = {"account": "a", "amount": 50, "expiry": 500, "id": "g1", "time": 100,
             "type": "grant"}
    start = {"id": "s2-1", "time": 110, "type": "start"}
    submit = {"account": "a", "cost": 20, "id": "s2-2", "job": "j2", "priority": 1,
              "time": 110, "type": "submit"}
    ops: list[dict[str, Any]] = [
        {"step": 1, "actor": "finance", "kind": "grant", "line": grant, "fault": None},
        {"step": 2, "actor": "service", "kind": "batch", "time": 110,
         "lines": [start, submit, start], "fault": "answers-lost"},
    ]
    assert run_script(ops) is None


def test_a_heavy_mix_of_service_faults_passes() -> None:
    # The mix that found the start retried after lost answers above: batches six times
    # as often, each more often failing its commit or losing its answers, callers queued
    # twice twice as often, more corrections and restarts.
    more = {"batch": 0.06, "submit": 0.16, "adjust": 0.02, "void": 0.02, "reverse": 0.02}
    ops = tuple((kind, more.get(kind, share)) for kind, share in Rates().ops)
    rates = Rates(ops=ops, late=0.1, commit_fails=0.1, commit_lost=0.1, answers_lost=0.2,
                  queued_twice=0.4, restart=0.002)
    result = run(111, 1000, rates=rates, check_every=500)
    assert result.ok, result.failure and result.failure.problems
    assert result.faults.get("answers-lost", 0) > 5, result.faults


def test_keep_going_reports_every_failing_seed(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    from tools.sim import __main__ as cli
    from tools.sim.run import Failure, RunResult

    monkeypatch.setattr(LedgerSession, "_as_told", lambda self, recorded: None)  # planted
    ops = _late_usage_in_a_batch()
    failure = run_script(ops)
    assert failure is not None

    def run_seed(seed: int, steps: int, **_: Any) -> RunResult:
        if seed == 4:
            return RunResult(seed, steps, 0.1, cpu_seconds=0.1)
        return RunResult(seed, 2, 0.1, Failure(2, failure.problems, ops, []),
                         cpu_seconds=0.1)

    monkeypatch.setattr(cli, "run", run_seed)
    hunt = ["--seed", "3", "--seeds", "3", "--steps", "10", "--out", str(tmp_path),
            "--shrink-seconds", "5"]
    assert main([*hunt, "--keep-going"]) == 1
    out = capsys.readouterr().out
    assert "seed 4: 10 steps" in out and "seed 5: 2 steps" in out
    assert "2 of 3 seeds failed: 3, 5" in out
    assert sorted(p.name for p in tmp_path.glob("*.ops.jsonl")) == [
        "seed-3-step-2.ops.jsonl", "seed-5-step-2.ops.jsonl"]
    assert main(hunt) == 1  # without it, the first failing seed ends the run
    out = capsys.readouterr().out
    assert "seed 3: 2 steps" in out and "seed 4" not in out


# Unreachable, every decision of the group fails; refused, a group of one fails (a
# larger one is decided again one command at a time, which a missed fault also passes).
@pytest.mark.parametrize(("fault", "ids"), [("commit-lost", ["c2", "c3"]),
                                            ("commit-fails", ["c2"])])
def test_a_commit_fault_strikes_a_batch_decided_ahead_on_sqlite(fault: str,
                                                                ids: list[str]) -> None:
    # On a SQL journal a batch the service decided ahead of its transaction is written by
    # `Journal.append_at`, which opens and commits its own: the simulated commit failure
    # must strike there too (it struck only `journal.transaction`, so the second batch
    # below committed, and the check said the group had not failed).
    grant = {"account": "a", "amount": 100, "expiry": 10_000, "id": "g1", "time": 100,
             "type": "grant"}

    def usage(eid: str) -> dict[str, Any]:
        return {"account": "a", "amount": 1, "id": eid, "time": 101, "type": "consume"}

    ops: list[dict[str, Any]] = [
        {"step": 1, "actor": "finance", "kind": "grant", "line": grant, "fault": None},
        {"step": 2, "actor": "service", "kind": "batch", "time": 101,
         "lines": [usage("c1")], "fault": None},
        {"step": 3, "actor": "service", "kind": "batch", "time": 101,
         "lines": [usage(eid) for eid in ids], "fault": fault},
    ]
    assert run_script(ops, sqlite=True) is None


def test_a_void_retried_after_its_writer_was_killed_names_the_grant_s_stream() -> None:
    # Found on SQLite with a heavy fault mix (seed 504): a writer killed after committing
    # a void had put it on a stream of its own guess (it had not learned the grant's
    # account), and the caller's retry, which had, named another stream: the journal
    # refused the retry as another body under the same id. Both now take the grant's
    # stream from the journal.
    grant = {"account": "a", "amount": 100, "expiry": 10_000, "id": "g1", "time": 100,
             "type": "grant"}
    void = {"grant": "g1", "id": "v2", "reason": "simulated contract change", "time": 101,
            "type": "void"}
    ops: list[dict[str, Any]] = [
        {"step": 1, "actor": "finance", "kind": "grant", "line": grant, "fault": None},
        {"step": 2, "actor": "finance", "kind": "void", "line": void,
         "fault": "killed-writer", "stop": "committed"},
    ]
    assert run_script(ops, sqlite=True) is None


def test_a_group_that_writes_nothing_has_no_commit_to_lose_on_sqlite() -> None:
    # Found on SQLite with a heavy fault mix (seed 508): a group whose decisions all
    # recorded nothing (a start with nothing to start), decided ahead of its transaction,
    # never opens one, so the planned lost commit cannot strike it.
    grant = {"account": "a", "amount": 100, "expiry": 10_000, "id": "g1", "time": 100,
             "type": "grant"}
    usage = {"account": "a", "amount": 1, "id": "c1", "time": 101, "type": "consume"}
    ops: list[dict[str, Any]] = [
        {"step": 1, "actor": "finance", "kind": "grant", "line": grant, "fault": None},
        {"step": 2, "actor": "service", "kind": "batch", "time": 101, "lines": [usage],
         "fault": None},
        {"step": 3, "actor": "service", "kind": "batch", "time": 101,
         "lines": [{"id": "s2", "time": 101, "type": "start"}], "fault": "commit-lost"},
    ]
    assert run_script(ops, sqlite=True) is None


def test_a_lost_commit_strikes_the_first_group_that_opens_a_transaction_on_sqlite() -> None:
    # Found on SQLite with a heavy fault mix (seeds 512, 513): the first group of the
    # batch recorded nothing and opened no transaction, so the lost commit struck the
    # second group, which the check did not expect.
    grant = {"account": "a", "amount": 100, "expiry": 10_000, "id": "g1", "time": 100,
             "type": "grant"}
    starts = [{"id": f"s2-{i}", "time": 101, "type": "start"} for i in range(4)]
    usage = {"account": "a", "amount": 1, "id": "c2-4", "time": 101, "type": "consume"}
    ops: list[dict[str, Any]] = [
        {"step": 1, "actor": "finance", "kind": "grant", "line": grant, "fault": None},
        {"step": 2, "actor": "service", "kind": "batch", "time": 101,
         "lines": [{**usage, "id": "c1"}], "fault": None},
        {"step": 3, "actor": "service", "kind": "batch", "time": 101,
         "lines": [*starts, usage], "fault": "commit-lost"},
    ]
    assert run_script(ops, sqlite=True) is None


@pytest.mark.parametrize("fault", ["commit-fails", "commit-lost"])
@pytest.mark.parametrize("sqlite", [False, True], ids=["memory", "sqlite"])
def test_a_failed_commit_is_judged_on_the_group_it_struck(fault: str, sqlite: bool) -> None:
    # Found on the memory journal (seed 11034, step 8212): a first group that records
    # nothing (refusals, starts with nothing to start) opens a transaction there, and the
    # refused commit struck it, with nothing to lose; the check took the next group, the
    # one that recorded something, for the one struck. On SQLite the first group is
    # decided ahead and opens none: the failure strikes the grant's.
    lines = [{"id": "c1", "job": "j7622", "time": 12421, "type": "cancel"},
             {"id": "s2", "time": 12421, "type": "start"},
             {"id": "c3", "job": "j6599", "success": True, "time": 12421,
              "type": "complete"},
             {"id": "s4", "time": 12421, "type": "start"},
             {"account": "new", "amount": 66, "expiry": 12431, "id": "g5", "pool": "h100",
              "time": 12426, "type": "grant"}]
    ops: list[dict[str, Any]] = [{"step": 1, "actor": "service", "kind": "batch",
                                  "time": 12421, "lines": lines, "fault": fault}]
    assert run_script(ops, sqlite=sqlite) is None


def test_a_crash_outside_a_call_says_where_it_was_raised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(world: Any) -> list[str]:
        assert not world  # an assertion says nothing else
        return []

    monkeypatch.setattr(sys.modules["tools.sim.run"], "full_check", broken)
    result = run(1, 20, check_every=10)
    assert result.failure is not None and result.failure.step == 10
    (problem,) = result.failure.problems
    assert problem.startswith("the ledger raised AssertionError: ")
    assert problem.endswith(" (raised at tests/sim/test_sim.py:"
                            f"{broken.__code__.co_firstlineno + 1}, in broken)")


def test_an_audit_between_an_event_and_its_later_reversal_does_not_see_the_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Found by seed 70055 at step 58: a grant at 1024, its reversal recorded at 1039, and
    # an audit at 1037 as known after both. The reversal takes the grant out at every
    # time (docs/semantics.md, "Reverse"): the balance is 0; the check's own model had
    # left the reversal out as later than the audit's time and wanted 19.
    grant = {"account": "acme", "amount": 19, "expiry": 1224, "id": "g19", "time": 1024,
             "type": "grant"}
    reverse = {"event": "g19", "id": "r28", "reason": "simulated mistake", "time": 1039,
               "type": "reverse"}
    ops: list[dict[str, Any]] = [
        {"actor": "finance", "fault": None, "kind": "grant", "line": grant, "skew": 0},
        {"actor": "finance", "fault": None, "kind": "reverse", "line": reverse, "skew": 0},
        {"account": "acme", "actor": "auditor", "as_known_at": 0.97, "at": 1037,
         "kind": "audit", "skew": 0}]
    assert run_script(ops) is None
    # As known before the reversal, the grant counts.
    assert run_script([*ops[:2], {**ops[2], "as_known_at": 0.5}]) is None
    # The audit still judges the answer: one off is found.
    from projections import GPUCreditTracker

    balance = GPUCreditTracker.get_balance
    monkeypatch.setattr(GPUCreditTracker, "get_balance",
                        lambda self, *a, **k: balance(self, *a, **k) + 1)
    failure = run_script(ops)
    assert failure is not None and "get_balance says 1, the reference model 0" in str(
        failure.problems)


REVERSAL_THEN_SUBMITS = (Path(__file__).parent / "scripts"
                         / "reversal-then-submits-decided-ahead.ops.jsonl")


def test_submits_decided_ahead_after_a_reversal_keep_the_chain_the_service_reads() -> None:
    """Found by a hunt (seed 9901, SQLite): a submit decision looked up the event a
    reversal named through the batch decided ahead, which took the lookup for a retry's
    and appended the submit at once; the batch's deferred events then found their
    positions taken. The lookup reads the committed record outside the batch."""
    assert replay_file(REVERSAL_THEN_SUBMITS, sqlite=True) is None


def test_the_service_process_follows_a_projection_rebuilt_after_its_batch_moved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """When a batch decided ahead finds its positions taken, the service rebuilds its
    projection (a new session) and decides the batch again. The worker the simulator
    runs in the service's process shared the old session, which still held the
    decisions that never committed: its next read refused an intact journal
    (ChainBroken). Made to happen here by letting the lookup go through the batch, and
    deferred events follow the head the batch was decided from, as both once did."""
    from tools.service import batching
    from tools.service.batching import BatchJournal
    from tools.service.ledger import LedgerService

    monkeypatch.setattr(BatchJournal, "committed", BatchJournal.get)
    flush = batching._flush

    def keeping_base(batch: Any) -> None:
        base = None if batch.pending else batch.base
        flush(batch)
        if base is not None:
            batch.base = base

    monkeypatch.setattr(batching, "_flush", keeping_base)
    resets = []
    reset = LedgerService.reset

    def counted(self: LedgerService) -> None:
        resets.append(self)
        reset(self)

    monkeypatch.setattr(LedgerService, "reset", counted)
    assert replay_file(REVERSAL_THEN_SUBMITS, sqlite=True) is None
    assert len(resets) >= 2  # opening the service, and the rebuild after the batch moved
