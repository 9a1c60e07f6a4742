"""Reads of a second replica on one PostgreSQL journal, as operators run them: real
`gpu-credits serve` processes, decisions and late imports (reversals, voids, events
earlier on the timeline) sent to replica A, job reads and revisions asked of replica B,
across a SIGKILL of B and its restart from the checkpoint `gpu-credits replay` wrote.
B's answers, once it has caught up, must be A's and the command line's
(`explain --job --json`, `revisions --json`): for jobs finished before the checkpoint
B started from, its job reads fold the jobs' streams rather than remember outcomes."""

from __future__ import annotations

import json
import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.service import server
from tests.service.http_kit import call
from tools.cli import app as cli_app

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ACCOUNTS = ("acct-0", "acct-1", "acct-2")


def cli(url: str, *args: str) -> Any:
    result = CliRunner().invoke(cli_app, ["--db", url, *args], catch_exceptions=False)
    assert result.exit_code == 0, (args, result.stderr)
    return json.loads(result.stdout)


def cli_job(url: str, job: str) -> dict[str, Any] | None:
    """`explain --job --json` in the fields of `GET /v1/jobs/{job}`; None for a job never
    submitted (its submit reversed), which the API does not know (404)."""
    e = cli(url, "explain", "--job", job, "--json")
    if e["state"] == "never submitted":
        return None
    return {"job": e["job"], "account": e["account"], "state": e["state"], "cost": e["cost"],
            "priority": e["priority"], "pool": e["pool"], "charged": e["charge"],
            "paid_by": [{"grant": g, "amount": a} for g, a in e["paid_by"]],
            "reason": e["reason"]}


def api_job(base: str, job: str) -> dict[str, Any] | None:
    status, answer = call(base, "GET", f"/v1/jobs/{job}")
    assert status in (200, 404), (job, status, answer)
    return answer if status == 200 else None


def api_revisions(base: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    after: int | None = 0
    while after is not None:
        status, page = call(base, "GET", f"/v1/revisions?after={after}&limit=7")
        assert status == 200, page
        found += page["revisions"]
        after = page["next"]
    return found


def caught_up(replica: str, position: int) -> None:
    """Wait until `replica`'s projection has read the journal up to `position` (a read
    makes it look again once its last look is older than 50 ms)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        call(replica, "GET", "/v1/accounts")
        status, ready = call(replica, "GET", "/readyz")
        if status == 200 and ready["position"] >= position:
            return
        time.sleep(0.06)
    raise AssertionError(f"{replica} never read up to {position}")


def agree(url: str, a: str, b: str, jobs: set[str]) -> int:
    """B's job reads and revisions are A's and the command line's; how many revisions."""
    head = call(a, "GET", "/v1/journal/head")[1]["position"]
    caught_up(a, head)
    caught_up(b, head)
    for job in sorted(jobs):
        assert api_job(b, job) == api_job(a, job) == cli_job(url, job), job
    revisions = cli(url, "revisions", "--json")
    assert api_revisions(b) == api_revisions(a) == revisions
    return len(revisions)


class Writer:
    """Random decisions and late imports sent to one replica."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.time = 10_000
        self.n = 0
        self.jobs: set[str] = set()
        self.running: list[str] = []
        self.grants: list[str] = []
        self.ids: list[str] = []

    def open(self, base: str) -> None:
        for account in ACCOUNTS:
            status, _ = call(base, "POST", "/v1/accounts",
                             {"account": account, "max_running": 2, "time": self.time})
            assert status == 201
            status, grant = call(base, "POST", f"/v1/accounts/{account}/grants",
                                 {"amount": 200, "time": self.time})
            assert status == 201, grant
            self.grants.append(grant["id"])

    def step(self, base: str) -> None:
        rng = self.rng
        self.n += 1
        n = self.n
        self.time += rng.randint(1, 5)
        t = self.time
        account = rng.choice(ACCOUNTS)
        kind = rng.choice(["submit"] * 4 + ["start"] * 3 + ["complete"] * 3
                          + ["usage", "grant", "late", "late", "late", "reverse", "void"])
        if kind == "submit":
            status, answer = call(base, "POST", "/v1/jobs", {
                "job": f"j{n}", "account": account, "cost": rng.randint(5, 80),
                "priority": rng.randint(0, 3), "time": t})
            assert status == 201, answer
            self.jobs.add(f"j{n}")
            self.ids.append(answer["id"])
        elif kind == "start":
            status, answer = call(base, "POST", "/v1/jobs/start-next", {"time": t})
            assert status in (200, 204), answer
            if status == 200:
                self.running.append(answer["job"])
        elif kind == "complete" and self.running:
            job = self.running.pop(rng.randrange(len(self.running)))
            status, answer = call(base, "POST", f"/v1/jobs/{job}/complete",
                                  {"success": rng.random() < 0.7, "time": t})
            # 409: a late event refused its submit; 404: its submit was reversed
            assert status in (200, 404, 409), answer
        elif kind == "usage":
            status, answer = call(base, "POST", f"/v1/accounts/{account}/usage",
                                  {"amount": rng.randint(1, 30), "time": t})
            assert status == 201, answer
            self.ids.append(answer["id"])
        elif kind == "grant":
            status, answer = call(base, "POST", f"/v1/accounts/{account}/grants",
                                  {"amount": rng.randint(20, 100), "time": t})
            assert status == 201, answer
            self.grants.append(answer["id"])
            self.ids.append(answer["id"])
        elif kind == "late":  # earlier on the timeline than what is recorded
            early = rng.randint(10_000, t - 1)
            events: list[dict[str, Any]]
            which = rng.random()
            if which < 0.4:
                events = [{"type": "consume", "account": account, "time": early,
                           "amount": rng.randint(10, 120), "id": f"late-{n}"}]
            elif which < 0.7:
                events = [{"type": "grant", "account": account, "time": early,
                           "amount": rng.randint(10, 100), "id": f"lg-{n}"}]
                self.grants.append(f"lg-{n}")
            else:
                job = f"lj{n}"
                events = [{"type": "submit", "account": account, "job": job,
                           "cost": rng.randint(5, 60), "priority": 1, "time": early,
                           "id": f"ls-{n}"},
                          {"type": "start", "job": job, "time": early + 1, "id": f"lst-{n}"},
                          {"type": "complete", "job": job, "success": True,
                           "time": early + 2, "id": f"lc-{n}"}]
                self.jobs.add(job)
            status, answer = call(base, "POST", "/v1/events", {"events": events})
            assert status == 200, answer
            self.ids += [e["id"] for e in events]
        elif kind == "reverse" and self.ids:
            call(base, "POST", "/v1/events", {"events": [{
                "type": "reverse", "event": rng.choice(self.ids), "reason": "wrong",
                "time": t, "id": f"rev-{n}"}]})  # a second reversal of one event is 422
        elif kind == "void" and len(self.grants) > len(ACCOUNTS):  # not an opening grant
            status, answer = call(base, "POST", "/v1/events", {"events": [{
                "type": "void", "grant": rng.choice(self.grants[len(ACCOUNTS):]),
                "reason": "x", "time": t, "id": f"void-{n}"}]})
            assert status == 200, answer


@pytest.mark.parametrize("seed", [3, 8])
def test_replica_b_reads_jobs_and_revisions_as_a_and_the_command_line(
        tmp_path: Path, pg_fresh_url: str, seed: int) -> None:
    url = pg_fresh_url
    writer = Writer(seed)
    a = server.start(url, tmp_path / "a.log")
    b = server.start(url, tmp_path / "b.log")
    try:
        writer.open(a.base)
        for _ in range(30):
            writer.step(a.base)
        assert agree(url, a.base, b.base, writer.jobs) > 0
        # A checkpoint of everything so far; B killed and started again from it: the
        # jobs finished so far are older than anything it folded itself.
        cli(url, "replay", "--json")
        b.stop(signal.SIGKILL)
        b = server.start(url, tmp_path / "b-again.log")
        agree(url, a.base, b.base, writer.jobs)
        for _ in range(30):
            writer.step(a.base)
        agree(url, a.base, b.base, writer.jobs)
    finally:
        for replica in (a, b):
            if replica.process.poll() is None:
                replica.process.kill()
                replica.process.wait()
