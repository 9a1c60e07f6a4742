"""A deterministic simulator that hunts for lost or double-spent credits.

One seeded random source drives every actor (workers, usage reporters, finance,
importers, auditors, the HTTP service's group-commit writer) and every fault (crashes
before a commit, answers lost after one, retries, duplicated and late deliveries, skewed
clocks, restarted processes, a group's commit failing), so a seed and a step count
reproduce a run exactly. After every op the simulator checks what the op touched
(`projections.invariants`, what was appended against what was answered); every K ops it
checks the whole journal and carries `verify` on from the last check
(`tools.sim.checks`). A failure is shrunk to the fewest
ops that still fail and written as a JSON Lines file that `--replay` performs again.

    python -m tools.sim --seed 7 --steps 20000
"""

from tools.sim.run import Failure, RunResult, replay_file, run, run_script, shrink

__all__ = ["Failure", "RunResult", "replay_file", "run", "run_script", "shrink"]
