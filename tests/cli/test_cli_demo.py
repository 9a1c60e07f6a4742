"""demo: a deterministic, realistic month; a second run appends nothing."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from cli_helpers import ROOT, as_json, error_lines
from typer.testing import CliRunner

from eventstore import Journal, MemoryJournal
from projections.demo import ACCOUNTS, MONTH_START, DemoPlan, simulate
from projections.ledger import CANCELLED, FAILED, REJECTED
from projections.replay import replay
from projections.timefmt import parse_time
from tools.cli import app


@pytest.fixture(scope="module")
def plan() -> DemoPlan:
    return simulate(42)


@pytest.fixture(scope="module")
def month(plan: DemoPlan) -> MemoryJournal:
    journal = MemoryJournal()
    for batch in plan.batches:
        journal.append(batch)
    return journal


def test_simulation_is_deterministic(plan: DemoPlan) -> None:
    assert simulate(42).batches == plan.batches
    other = simulate(4)
    assert other.batches[0][0].id == "demo4-00001"
    assert [e.payload for e in other.batches[0]] != [e.payload for e in plan.batches[0]]


def test_the_month_has_what_the_demo_promises(month: MemoryJournal) -> None:
    report = replay(month)
    ledger = report.ledger
    assert sorted(n for n, a in ledger.accounts.items() if a.opened) == sorted(ACCOUNTS)
    pools = Counter(rec.payload.get("pool", "general") for rec in month.read()
                    if rec.type == "grant")
    assert {"h100", "a100", "general"} <= set(pools)
    times = [rec.time for rec in month.read()]
    assert parse_time("2026-11-01") == MONTH_START <= min(times)
    assert max(times) < parse_time("2026-12-01")
    states = Counter(job.state for job in ledger.jobs.values())
    assert states[REJECTED] and states[FAILED] and states[CANCELLED]
    assert any(a.max_running for a in ledger.accounts.values())
    assert any(a.book.debt_total for a in ledger.accounts.values())
    assert any(a.book.totals.expired for a in ledger.accounts.values())
    assert report.revisions, "late events should revise some outcomes"
    late = [r for r in month.read(order="position")]
    assert any(r.time < max(x.time for x in late[: r.position - 1]) for r in late[1:])
    assert not report.anomalies


def test_duplicates_and_late_events_are_counted(plan: DemoPlan) -> None:
    assert plan.duplicates == 4 and plan.late == 6
    ids = [e.id for batch in plan.batches for e in batch]
    assert len(ids) - len(set(ids)) == plan.duplicates


def test_demo_twice_appends_nothing(demo_db: str) -> None:
    journal = Journal(demo_db)
    head = journal.head()
    journal.close()
    runner = CliRunner()
    digest = as_json(runner.invoke(app, ["replay", "--json", "--db", demo_db]))["digest"]  # type: ignore[index]
    again = runner.invoke(app, ["demo", "--db", demo_db])
    assert again.exit_code == 0, again.stderr
    assert "already in the database" in again.stdout
    for text in ("Balances at 2026-11-30", "Audit summary", "credits expired unused",
                 "rejected submits", "revisions by late events", "State digest:",
                 "explain --job"):
        assert text in again.stdout, text
    assert again.stderr == ""
    journal = Journal(demo_db)
    assert journal.head() == head
    journal.close()
    after = as_json(runner.invoke(app, ["replay", "--json", "--db", demo_db]))["digest"]  # type: ignore[index]
    assert after == digest


def test_demo_refuses_a_database_with_other_events(demo_db: str) -> None:
    result = CliRunner().invoke(app, ["demo", "--seed", "7", "--db", demo_db])
    assert result.exit_code == 2
    assert len(error_lines(result)) == 1
    assert "not the demo for seed 7" in result.stderr


def test_a_refused_demo_suggests_a_database_it_would_write(
        demo_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another seed on ./demo.db was told "use another --db, e.g. --db sqlite:///demo.db":
    the very database refused, so following the hint failed the same way."""
    monkeypatch.chdir(tmp_path)
    shutil.copyfile(demo_file, tmp_path / "demo.db")
    result = CliRunner().invoke(app, ["demo", "--seed", "7", "--db", "sqlite:///demo.db"])
    assert result.exit_code == 2
    (line,) = error_lines(result)
    suggested = line.rsplit("--db ", 1)[1].split()[0]
    assert suggested != "sqlite:///demo.db", line
    again = CliRunner().invoke(app, ["demo", "--seed", "7", "--db", suggested])
    assert again.exit_code == 0, again.stderr


def test_queries_on_the_demo(demo_db: str) -> None:
    runner = CliRunner()
    account = ACCOUNTS[2]
    bal = as_json(runner.invoke(app, ["balance", account, "--json", "--db", demo_db]))
    st = as_json(runner.invoke(app, ["statement", account, "--json", "--db", demo_db]))
    assert isinstance(bal, dict) and isinstance(st, dict)
    assert st["closing"]["balance"] == bal["balance"]
    assert sum(bal["pools"].values()) == bal["balance"]
    assert not [line for line in st["lines"] if line["type"] == "adjust"]
    revisions = as_json(runner.invoke(app, ["revisions", "--json", "--db", demo_db]))
    assert isinstance(revisions, list) and revisions
    # The same rows as the service's, each with the account of the event it revised.
    from fastapi.testclient import TestClient

    from tools.service.app import create_app

    with TestClient(create_app(demo_db, mount_web=False)) as http:
        served = http.get("/v1/revisions?limit=1000").json()
    assert served["next"] is None and served["revisions"] == revisions
    assert all(isinstance(r["account"], str) for r in revisions)
    verify = runner.invoke(app, ["verify", "--db", demo_db])
    assert verify.exit_code == 0, verify.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("extra", [[], ["DEMO_DB=sqlite:///elsewhere.db"]])
def test_make_serve_serves_the_database_make_demo_writes(extra: list[str]) -> None:
    # What `make -n` would run (nothing is run): every gpu-credits command of the two
    # targets names the same database, the CLI's own default when none is given.
    env = {k: v for k, v in os.environ.items() if k != "GPU_CREDITS_DB"}
    done = subprocess.run(["make", "-n", "-s", "-C", str(ROOT), "demo", "serve", *extra],
                          capture_output=True, text=True, env=env, check=True)
    commands = [shlex.split(line) for line in done.stdout.splitlines()
                if "bin/gpu-credits " in line]
    assert [c[-1] for c in commands if "demo" in c] == ["demo", "/dev/null"]
    assert any("serve" in c for c in commands)
    databases = {c[c.index("--db") + 1] if "--db" in c else None for c in commands}
    assert databases == {extra[0].partition("=")[2] if extra else None}
