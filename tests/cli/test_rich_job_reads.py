"""Every job of the rich histories (imports out of order, steps before their submits,
duplicate job ids, reversals) read beside a live projection, from the streams that hold
its events, says what `explain --job` says: the web job page and the service's
`GET /v1/jobs/{job}` of a service that started from a checkpoint both read it so."""

from __future__ import annotations

from pathlib import Path

import pytest
import surfaces

from eventstore import Journal
from projections import queries
from projections.ledger import PENDING
from projections.queries.explain import waiting_reason
from projections.queries.livejob import job_whereabouts, live_job_explanation
from projections.replay import fold_canonical


@pytest.mark.parametrize("name", [f"rich-{seed}" for seed in range(1, 7)])
def test_every_jobs_live_explanation_is_explains(name: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'rich.db'}"
    surfaces.write_journal(url, name)
    with Journal(url) as journal:
        ledger = fold_canonical(journal)
        jobs = sorted(ledger.jobs)
        assert len(jobs) > 10
        for job in jobs:
            live = live_job_explanation(journal, job_whereabouts(journal, ledger, job))
            if live.state == PENDING:
                # Its place in the queue is the whole ledger's, as the job page asks it.
                live.waiting, live.ahead = waiting_reason(ledger, job)
            assert queries.to_dict(live) == queries.to_dict(
                queries.explain_job(journal, job)), (name, job)
