"""`python -m tools.sim --jobs J`: seeds run in J processes at once, each the run it makes
alone; failures, dead processes and signals are handled as without `--jobs`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_sim import _late_usage_in_a_batch

from projections.session import LedgerSession
from tools.sim import run, run_script
from tools.sim.__main__ import main
from tools.sim.run import Failure, RunResult, Stopped, stop_requested

_LINE = re.compile(r"^seed (\d+): (\d+) steps, (\d+) events in .*; (ok|FAILED)$", re.M)


def test_each_seed_runs_in_a_job_as_it_runs_alone(capsys: pytest.CaptureFixture[str]
                                                  ) -> None:
    assert main(["--seed", "3", "--seeds", "3", "--steps", "300", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    lines = {int(seed): (int(steps), int(events), ok)
             for seed, steps, events, ok in _LINE.findall(out)}
    assert lines == {seed: (300, run(seed, 300).events, "ok") for seed in (3, 4, 5)}
    assert "all 3 seeds passed: 900 steps in " in out and " in 2 processes (" in out


def test_jobs_are_refused_below_one_and_beside_a_replay(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--jobs", "0", "--steps", "10"]) == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
    script = tmp_path / "script.jsonl"
    script.write_text('{"type": "account", "account": "a", "time": 1, "id": "o1"}\n')
    assert main(["--jobs", "2", "--replay", str(script)]) == 2
    assert ("--jobs 2: an option of a run of seeds, which --replay FILE does not take"
            in capsys.readouterr().err)
    # None of a run's options is silently left unused beside a replay.
    assert main(["--replay", str(script), "--seed", "3", "--steps", "100",
                 "--one-process"]) == 2
    captured = capsys.readouterr()
    assert ("tools.sim: error: --seed 3 --steps 100 --one-process: options of a run of "
            "seeds, which --replay FILE does not take" in captured.err) and not captured.out
    assert main(["--replay", str(script)]) == 0


def _failing_seed(monkeypatch: pytest.MonkeyPatch, failing: set[int], other: Any) -> None:
    """`tools.sim`'s runs replaced: a seed in `failing` fails at its second op (a batch
    whose check a planted bug breaks); any other does `other(seed, steps)`."""
    from tools.sim import __main__ as cli

    monkeypatch.setattr(LedgerSession, "_as_told", lambda self, recorded: None)  # planted
    ops = _late_usage_in_a_batch()
    failure = run_script(ops)
    assert failure is not None

    def run_seed(seed: int, steps: int, **_: Any) -> RunResult:
        if seed in failing:
            return RunResult(seed, 2, 0.1, Failure(2, failure.problems, ops, []),
                             cpu_seconds=0.1)
        return other(seed, steps)  # type: ignore[no-any-return]

    monkeypatch.setattr(cli, "run", run_seed)  # forked into each job


def test_keep_going_in_jobs_reports_every_failing_seed(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    _failing_seed(monkeypatch, {3, 5},
                  lambda seed, steps: RunResult(seed, steps, 0.1, cpu_seconds=0.1))
    assert main(["--seed", "3", "--seeds", "3", "--steps", "10", "--out", str(tmp_path),
                 "--shrink-seconds", "5", "--jobs", "2", "--keep-going"]) == 1
    out = capsys.readouterr().out
    assert "seed 4: 10 steps" in out and "seed 5: 2 steps" in out
    assert "FAILED: seed 3, step 2" in out and "FAILED: seed 5, step 2" in out
    assert "2 of 3 seeds failed: 3, 5 (" in out and " in 2 processes)" in out
    assert sorted(p.name for p in tmp_path.glob("*.ops.jsonl")) == [
        "seed-3-step-2.ops.jsonl", "seed-5-step-2.ops.jsonl"]


def test_without_keep_going_the_first_failure_stops_the_other_jobs_between_ops(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    def endless(seed: int, steps: int) -> RunResult:
        while not stop_requested():  # as `perform` looks before each op
            time.sleep(0.01)
        raise Stopped("stopped before op 7")

    _failing_seed(monkeypatch, {4}, endless)
    began = time.monotonic()
    assert main(["--seed", "3", "--seeds", "4", "--steps", "10", "--out", str(tmp_path),
                 "--shrink-seconds", "5", "--jobs", "2"]) == 1
    assert time.monotonic() - began < 60
    out = capsys.readouterr().out
    assert "FAILED: seed 4, step 2" in out
    assert not re.search(r"^seed [356]:", out, re.M)  # stopped, or never begun
    assert "seeds failed" not in out and "seeds passed" not in out


def test_a_seed_whose_process_dies_fails_and_says_how(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tools.sim import __main__ as cli

    def run_seed(seed: int, steps: int, **_: Any) -> RunResult:
        if seed == 4:
            os.kill(os.getpid(), signal.SIGKILL)
        return RunResult(seed, steps, 0.1, cpu_seconds=0.1)

    monkeypatch.setattr(cli, "run", run_seed)
    assert main(["--seed", "3", "--seeds", "4", "--steps", "10", "--jobs", "2",
                 "--keep-going"]) == 1
    out = capsys.readouterr().out
    assert "seed 4: FAILED: its process ended (killed by SIGKILL) in the middle of the run" \
        in out
    assert all(f"seed {seed}: 10 steps" in out for seed in (3, 5, 6))
    assert "1 of 4 seeds failed: 4 (30 steps in " in out


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_a_ctrl_c_stops_every_job_between_ops_once(tmp_path: Path) -> None:
    # A terminal's Ctrl-C reaches the whole process group: the jobs ignore it and take
    # the command line's SIGTERM, so each stops between ops, once, not at once.
    child = subprocess.Popen(
        [sys.executable, "-m", "tools.sim", "--seeds", "4", "--steps", "100000", "--jobs",
         "2", "--out", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(jobs := _children(child.pid)) < 2:
            assert time.monotonic() < deadline, "no two jobs within 60 s"
            time.sleep(0.1)
        time.sleep(1.0)  # into the ops
        os.killpg(child.pid, signal.SIGINT)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 128 + signal.SIGINT, err.decode()
    said = err.decode()
    assert said.count("stopping before the next op") == 1 and "Traceback" not in said
    assert "the run's worlds were removed" in said
    assert not re.search(rb"^seed \d+: ", out, re.M)  # no seed ran to its end
    assert not any(Path(f"/proc/{pid}").exists() for pid in jobs)


def test_a_sigterm_to_the_group_forwarded_by_make_stops_between_ops_once(
        tmp_path: Path) -> None:
    # `timeout make sim`, or a CI runner cancelling the job, sends SIGTERM to the process
    # group, and make forwards it to its child: the command line gets it twice, and each
    # job gets the group's and the command line's. That is one stop, between ops, with
    # every world removed, not a second signal's stop at once.
    child = subprocess.Popen(
        [sys.executable, "-m", "tools.sim", "--seeds", "4", "--steps", "100000", "--jobs",
         "2", "--sqlite", "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        deadline = time.monotonic() + 60
        while len(jobs := _children(child.pid)) < 2 or len(
                list(tmp_path.glob("gpu-credits-sim-*"))) < 2:
            assert time.monotonic() < deadline, "no two jobs and worlds within 60 s"
            time.sleep(0.1)
        time.sleep(1.0)  # into the ops
        os.killpg(child.pid, signal.SIGTERM)
        time.sleep(0.2)  # make's forward, once it has been scheduled
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    said = err.decode()
    assert child.returncode == 128 + signal.SIGTERM, said
    assert said.count("stopping before the next op") == 1 and "Traceback" not in said
    assert "the run's worlds were removed" in said
    assert b"FAILED" not in out, out.decode()
    assert not list(tmp_path.glob("gpu-credits-sim-*"))  # every world's folder removed
    assert not any(_alive(pid) for pid in jobs)


def test_a_seed_whose_run_raises_fails_with_the_traceback_and_the_others_go_on(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tools.sim import __main__ as cli

    def run_seed(seed: int, steps: int, **_: Any) -> RunResult:
        if seed == 4:
            raise RuntimeError("the simulator's own fault")
        return RunResult(seed, steps, 0.1, cpu_seconds=0.1)

    monkeypatch.setattr(cli, "run", run_seed)
    assert main(["--seed", "3", "--seeds", "4", "--steps", "10", "--jobs", "2",
                 "--keep-going"]) == 1
    out = capsys.readouterr().out
    assert "seed 4: FAILED: the simulator raised\nTraceback" in out
    assert "RuntimeError: the simulator's own fault" in out
    assert all(f"seed {seed}: 10 steps" in out for seed in (3, 5, 6))
    assert "1 of 4 seeds failed: 4 (" in out


def test_jobs_end_once_their_seed_does_when_the_command_line_is_killed() -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "tools.sim", "--seeds", "40", "--steps", "1000", "--jobs",
         "2", "--one-process"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(jobs := _children(child.pid)) < 2:
            assert time.monotonic() < deadline, "no two jobs within 60 s"
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 60  # a seed of 1,000 ops takes about a second
    while any(_alive(pid) for pid in jobs):
        assert time.monotonic() < deadline, "a job outlived the command line by 60 s"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (an orphan's zombie, reaped by init, does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_stop_by_signal_keeps_its_handler_while_a_copy_of_the_signal_may_still_come(
        monkeypatch: Any) -> None:
    # make forwards the group's SIGTERM to its child, late on a busy machine: a copy
    # arriving after the run stopped, but within the same-stop window, must still find
    # the run's handler (the default one killed the process, exit -15 instead of 143).
    import importlib

    from tools.sim import __main__ as sim_main

    # (`tools.sim.run` the attribute is the function the package exports.)
    monkeypatch.setattr(importlib.import_module("tools.sim.run"), "SAME_STOP_SECONDS", 0.5)
    received: list[int] = []
    before = signal.getsignal(signal.SIGTERM)
    with sim_main._stopping_between_ops(received):
        # Before the signal: its handler notes the time it ran, and the wait is counted
        # from there (a reading after `kill` came up to a fraction of a ms late).
        asked = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        assert received == [signal.SIGTERM]
    # The run's handler stayed until a copy could no longer be the same stop.
    assert time.monotonic() - asked >= 0.5
    assert signal.getsignal(signal.SIGTERM) is before
    assert not stop_requested()


def test_a_job_that_does_not_end_when_told_to_is_killed_and_the_run_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A forked job can hang on its way out (a lock another thread of the parent held at
    # the fork): with every seed answered, the run must not wait for it for ever.
    from tools.sim import parallel

    work = parallel._work

    def hanging_on_the_way_out(*args: Any) -> None:
        work(*args)
        time.sleep(3600)

    monkeypatch.setattr(parallel, "_work", hanging_on_the_way_out)
    monkeypatch.setattr(parallel, "JOIN_SECONDS", 0.5)
    began = time.monotonic()
    done = list(parallel.run_seeds([1, 2, 3], 2, _quick_seed, stop_at_failure=True))
    assert sorted(d.seed for d in done) == [1, 2, 3] and all(d.ok for d in done)
    assert time.monotonic() - began < 60


def _quick_seed(seed: int) -> Any:
    from tools.sim.parallel import SeedDone

    return SeedDone(seed, 1, 0.0, 0.0, True, f"seed {seed}: ok\n")
