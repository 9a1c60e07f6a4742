"""The service's reads that used to fold the whole journal, beside what they cost before.

`python -m tools.bench.service_reads [--events N] [--rounds R]` writes a SQLite journal of
the realistic mix (2% of events a little late, appended 20 at a time, so that imports
revise outcomes), checkpoints it as `gpu-credits replay` does, opens the service on it
in this process (so it starts from the checkpoint, remembering no outcome from before)
and times, in CPU seconds, medians of R rounds:

- `GET /v1/jobs/{job}` of a finished job, against what answered it before: the outcome of
  each of the job's events refolded by the live session (`LedgerSession.outcome_of`);
- `GET /v1/revisions` after a write elsewhere, against what answered it before: a replay
  of the whole journal, its rows and their accounts;
- the revisions' first pass (`RevisionLog`), against `replay()`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.workload import append_mix, realistic_mix, with_late_arrivals


def _cpu(call: Callable[[], Any]) -> float:
    began = time.process_time()
    call()
    return time.process_time() - began


def _journal(path: Path, events: int) -> str:
    from eventstore import Journal
    from projections.replay import replay

    url = f"sqlite:///{path}"
    with Journal(url) as journal:
        append_mix(journal, with_late_arrivals(realistic_mix(events), 0.02), 20)
        replay(journal, checkpoint=True, checkpoint_every=journal.head())
    return url


def run(events: int, rounds: int) -> dict[str, Any]:
    """The medians, in milliseconds of CPU, and their ratios."""
    from fastapi.testclient import TestClient

    from projections import owners, queries
    from projections.replay import fold_canonical, replay
    from projections.revisionlog import RevisionLog
    from tools import wording
    from tools.service.app import create_app

    with tempfile.TemporaryDirectory() as tmp:
        url = _journal(Path(tmp) / "reads.db", events)
        app = create_app(url, mount_web=False)
        with TestClient(app) as client:
            service = app.state.ledger
            journal = service.journal
            ledger = fold_canonical(journal)
            finished = [job.id for job in ledger.jobs.values() if job.state == "succeeded"]
            job = finished[len(finished) // 2]  # half way through the timeline
            session = service.session

            def old_job() -> None:
                with service.reading() as live:
                    for rec in owners.job_events(journal, live, job):
                        session.outcome_of(rec)

            def old_revisions() -> None:
                report = replay(journal)
                accounts = owners.revision_accounts(journal, report.ledger,
                                                    (r.event_id for r in report.revisions))
                [{**wording.to_dict(row), "account": accounts[row.revision.event_id]}
                 for row in queries.revision_rows(journal, report.revisions)]

            figures: dict[str, list[float]] = {name: [] for name in (
                "job", "job_before", "revisions_after_write", "revisions_before",
                "first_pass", "replay")}
            client.get("/v1/revisions?limit=1")  # the first pass, timed apart below
            for n in range(rounds):
                assert client.get(f"/v1/jobs/{job}").status_code == 200
                figures["job"].append(_cpu(lambda: client.get(f"/v1/jobs/{job}")))
                figures["job_before"].append(_cpu(old_job))
                usage = {"type": "consume", "account": "acct-00001", "amount": 1,
                         "time": journal.max_time(), "id": f"bench-usage-{n}"}
                assert client.post("/v1/events", json={"events": [usage]}).status_code == 200
                figures["revisions_after_write"].append(
                    _cpu(lambda: client.get("/v1/revisions?limit=100")))
                figures["revisions_before"].append(_cpu(old_revisions))
                figures["first_pass"].append(_cpu(lambda: RevisionLog(journal).revisions()))
                figures["replay"].append(_cpu(lambda: replay(journal)))
    ms = {name: round(statistics.median(values) * 1000, 1) for name, values in figures.items()}
    return {"events": events, "rounds": rounds, "job": job, "cpu_ms": ms,
            "ratios": {"job_read_faster": round(ms["job_before"] / ms["job"], 1),
                       "revisions_after_write_faster": round(
                           ms["revisions_before"] / ms["revisions_after_write"], 1),
                       "first_pass_over_replay": round(ms["first_pass"] / ms["replay"], 2)}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.service_reads",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=80_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    result = run(args.events, args.rounds)
    for name, value in result["cpu_ms"].items():
        print(f"{name:>28}: {value:>10,.1f} ms of CPU (median of {result['rounds']})")
    for name, value in result["ratios"].items():
        print(f"{name:>28}: {value}x")


if __name__ == "__main__":
    main()
