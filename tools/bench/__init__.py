"""The benchmark harness: `python -m tools.bench [--quick] [--only SCENARIO ...]`.

Runs every scenario, each beside its baselines in the same run, and
writes `docs/benchmarks.md` and `docs/benchmarks-throughput.png`.

- `runner.py`    what a case, a target and a scenario are; running a case in a fresh process
- `workload.py`  the seeded work every implementation is given
- `storage.py`   SQLite files and PostgreSQL schemas for the runs
- `appends.py`, `replay.py` (full replay, late event), `tracker.py`, `scheduler.py`,
  `workers.py`   one module per scenario group
- `baselines.py` plain in-memory designs; `rawdb.py` the raw drivers; `esapp.py` eventsourcing
- `report.py`    the markdown report and the chart
"""
