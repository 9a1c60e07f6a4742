"""Every output people and scripts read, rendered from one journal: the command line's
tables, `--json` and CSV, the HTTP service's bodies and the web view's pages.

The journals are written with a pinned recorded-at clock, so their records, chain hashes
and every output are the same on every run: `test_surfaces_golden.py` compares the
outputs with digests taken from the code as it was, so a change in how an answer is
worded or serialised shows as the list of outputs that changed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from eventstore import Journal
from projections import importing
from projections.demo import write_demo
from projections.replay import fold_canonical
from tools.cli import app
from tools.web.browsing import app_for

ACCOUNTS = ("a", "b", "c")
POOLS = (None, None, "h100", "a100")


def rich_batches(seed: int, events: int = 120) -> list[list[dict[str, Any]]]:
    """A seeded history in three imports: grants (pools, expiries, priorities, memos),
    usage past the credits (debt), manual credits and debits, voids, reversals (and a
    reversal of a reversal), jobs accepted, rejected, run, failed with partial refunds
    and cancelled, late events, and anomalies (job events for unknown or finished jobs,
    a job id submitted twice, a submit for an unknown account)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = [
        {"type": "account", "account": "c", "max_running": 1, "id": "open-c"},
        *({"type": "grant", "account": a, "amount": rng.randint(60, 160), "time": 0,
           "id": f"start-{a}", "expiry": rng.choice((None, 90))} for a in ACCOUNTS)]
    # Credits held by a job that lapse while it runs, released when it fails.
    out += [{"type": "grant", "account": "b", "amount": 30, "time": 0, "expiry": 5,
             "id": "short"},
            {"type": "submit", "account": "b", "job": "held", "cost": 10, "priority": 9,
             "time": 1, "id": "held-submit"},
            {"type": "start", "job": "held", "time": 2, "id": "held-start"},
            {"type": "complete", "job": "held", "success": False, "refund_fraction": 0.5,
             "time": 8, "id": "held-done"}]
    for event in out:
        if event.get("expiry", 0) is None:
            del event["expiry"]
    grants: list[str] = []
    spends: list[str] = []
    jobs: list[str] = []
    time = 0
    for n in range(events):
        time += rng.randint(0, 4)
        at = time - rng.randint(5, 30) if rng.random() < 0.15 else time
        account = rng.choice(ACCOUNTS)
        pool = rng.choice(POOLS)
        kind = rng.choices(
            ("grant", "consume", "adjust", "void", "reverse", "submit", "start", "complete",
             "cancel", "ghost"), weights=(14, 12, 5, 3, 3, 14, 10, 9, 4, 1))[0]
        event: dict[str, Any] = {"id": f"e{n}", "type": kind, "time": at}
        if kind == "grant":
            event.update(account=account, amount=rng.randint(5, 60))
            if rng.random() < 0.7:
                event["expiry"] = at + rng.choice((rng.randint(2, 12), rng.randint(10, 80)))
            if rng.random() < 0.3:
                event["priority"] = rng.randint(0, 100)
            if rng.random() < 0.2:
                event["memo"] = f"PO {rng.randint(1000, 9999)}"
            grants.append(event["id"])
        elif kind == "consume":
            event.update(account=account, amount=rng.randint(1, 45))
            spends.append(event["id"])
        elif kind == "adjust":
            event.update(account=account, amount=rng.choice((-1, 1)) * rng.randint(1, 30),
                         reason=rng.choice(("double-billed run", "goodwill credit")))
            spends.append(event["id"])
        elif kind == "void":
            if not grants:
                continue
            event["grant"] = rng.choice(grants)
            if rng.random() < 0.5:
                event["reason"] = "contract cancelled"
        elif kind == "reverse":
            targets = spends + grants + [e["id"] for e in out if e["type"] == "reverse"]
            if not targets:
                continue
            event.update(event=rng.choice(targets), reason="entered twice")
        elif kind == "submit":
            job = rng.choice(jobs) if jobs and rng.random() < 0.05 else f"j{n}"
            event.update(account=rng.choice((*ACCOUNTS, "nobody")) if rng.random() < 0.05
                         else account, job=job, cost=rng.randint(0, 40),
                         priority=rng.randint(1, 3))
            if rng.random() < 0.3:
                event["pool"] = rng.choice(POOLS[2:])
            jobs.append(job)
        elif kind in ("start", "complete", "cancel"):
            if not jobs:
                continue
            event["job"] = rng.choice(jobs[-8:])
            if kind == "complete":
                event["success"] = rng.random() < 0.6
                if rng.random() < 0.5:
                    event["refund_fraction"] = rng.choice((0, 0.25, 0.5, 1))
        else:
            event.update(type="start", job="ghost")
        if pool is not None and kind in ("grant", "consume", "adjust"):
            event["pool"] = pool
        out.append(event)
    third = len(out) // 3
    return [out[:third], out[third:2 * third], out[2 * third:]]


def _pinned(journal: Journal) -> None:
    """Recorded-at times from a counter: the same records and hashes on every run."""
    ticks = itertools.count(1_780_000_000_000_000, 1_000_003)
    journal._clock = lambda: next(ticks)


def write_journal(url: str, name: str) -> None:
    """Write the journal `name` ("demo", or "rich-SEED") into the database at `url`."""
    journal = Journal(url)
    try:
        _pinned(journal)
        if name == "demo":
            write_demo(journal, 42)
            return
        for i, batch in enumerate(rich_batches(int(name.removeprefix("rich-")))):
            lines = [json.dumps(e) for e in batch]
            while lines:
                data = ("\n".join(lines) + "\n").encode()
                try:
                    importing.import_file(journal, data, f"part{i}.jsonl")
                    break
                except importing.ImportRejected as exc:
                    bad = {p.line for p in exc.problems}
                    lines = [line for n, line in enumerate(lines, start=1) if n not in bad]
    finally:
        journal.close()


def reconcile_file(url: str, path: Path) -> Path:
    """A charges file that hits every verdict: matched, amount differs, missing from the
    ledger (unknown job, uncharged job, reversed or unknown event, another account's
    charge), duplicate rows, and (by its time range) charges missing from the file."""
    journal = Journal(url)
    try:
        ledger = fold_canonical(journal)
        rows = ["account,job,id,amount,time"]
        charged = sorted((j for j in ledger.jobs.values() if j.charge is not None),
                         key=lambda j: j.id)
        for n, job in enumerate(charged[:12]):
            amount = job.charge if n % 3 else (job.charge or 0) + 1
            rows.append(f"{job.account},{job.id},,{amount},")
        if charged:
            rows.append(f"{charged[0].account},{charged[0].id},,1,")
            rows.append(f"zz-other,{charged[-1].id},,{charged[-1].charge},")
        uncharged = sorted(j.id for j in ledger.jobs.values() if j.charge is None)
        for job_id in uncharged[:3]:
            rows.append(f"{ledger.jobs[job_id].account},{job_id},,5,")
        rows.append("a,no-such-job,,5,")
        consumes = [rec for rec in journal.read() if rec.type == "consume"]
        for rec in consumes[:6]:
            rows.append(f"{rec.payload['account']},,{rec.id},{rec.payload['amount']},"
                        f"{rec.time}")
        for event_id in sorted(ledger.excluded)[:2]:
            rows.append(f"a,,{event_id},3,")
        rows.append("b,,no-such-event,4,")
        path.write_text("\n".join(rows) + "\n")
        return path
    finally:
        journal.close()


HASH = re.compile(r"\b[0-9a-f]{64}\b")


def _masked(text: str, work: Path) -> str:
    """The output without what differs between runs by design: the folder of the run,
    and hashes (a personal field's salted hash reaches the chain)."""
    return HASH.sub("<hash>", text.replace(str(work), "<work>"))


def _invoke(runner: CliRunner, url: str, *args: str) -> str:
    result = runner.invoke(app, [*args, "--db", url], catch_exceptions=False)
    return f"exit {result.exit_code}\n{result.stdout}"


def _names(url: str) -> tuple[list[str], list[str], list[str], int]:
    """(accounts, jobs worth explaining, event ids worth a page, head)."""
    journal = Journal(url)
    try:
        ledger = fold_canonical(journal)
        by_state: dict[str, list[str]] = {}
        for job in sorted(ledger.jobs.values(), key=lambda j: j.id):
            by_state.setdefault(job.state, []).append(job.id)
        jobs = sorted(j for ids in by_state.values() for j in ids[:4])
        events = [rec.id for rec in journal.read()][::7]
        return sorted(ledger.accounts), [*jobs, "ghost"], events, journal.head()
    finally:
        journal.close()


def render_all(url: str, work: Path) -> Iterator[tuple[str, str]]:
    """(name, output) of every surface over the journal at `url`: the command line's
    reads (text, --json, --csv), then the HTTP service's bodies and the web pages."""
    for name, text in _render_all(url, work):
        yield name, _masked(text, work)


def _render_all(url: str, work: Path) -> Iterator[tuple[str, str]]:
    accounts, jobs, events, head = _names(url)
    runner = CliRunner()
    charges = reconcile_file(url, work / "charges.csv")
    mid = max(1, head // 2)
    for account in accounts:
        for form in ((), ("--json",), ("--csv",)):
            yield f"statement {account} {form}", _invoke(runner, url, "statement", account,
                                                         *form)
        yield f"statement {account} window", _invoke(
            runner, url, "statement", account, "--from", "20", "--to", "120", "--json")
        for form in ((), ("--json",)):
            yield f"explain {account} {form}", _invoke(runner, url, "explain", account, *form)
            yield f"balance {account} {form}", _invoke(runner, url, "balance", account, *form)
        yield f"statement {account} known", _invoke(
            runner, url, "statement", account, "--as-known-at", str(mid), "--json")
    for job in jobs:
        for form in ((), ("--json",)):
            yield f"explain --job {job} {form}", _invoke(runner, url, "explain", "--job", job,
                                                         *form)
    for form in ((), ("--json",)):
        for command in (("revisions",), ("jobs",), ("accounts",), ("expiring",),
                        ("expiring", "--within", "1000d")):
            yield f"{command} {form}", _invoke(runner, url, *command, *form)
    for form in ((), ("--json",), ("--csv",)):
        yield f"reconcile {form}", _invoke(runner, url, "reconcile", str(charges), *form)
    with TestClient(app_for(url)) as client:
        paths = [f"/v1/accounts/{a}/statement" for a in accounts]
        paths += [f"/v1/accounts/{a}/statement?as_known_at={mid}" for a in accounts]
        paths += [f"/v1/accounts/{a}/balance" for a in accounts]
        paths += [f"/v1/jobs/{j}" for j in jobs]
        paths += ["/v1/revisions", "/v1/accounts"]
        paths += [f"/accounts/{a}" for a in accounts]
        paths += [f"/accounts/{a}?as_known_at={mid}" for a in accounts]
        paths += [f"/accounts/{a}/ledger.csv" for a in accounts]
        paths += [f"/accounts/{a}/timeline.json" for a in accounts]
        paths += [f"/jobs/{j}" for j in jobs]
        paths += [f"/event?id={e}" for e in events]
        paths += [f"/events/{p}" for p in range(1, head + 1, max(1, head // 15))]
        for path in paths:
            response = client.get(path)
            yield f"GET {path}", f"{response.status_code}\n{response.text}"
        csv = client.get(f"/v1/accounts/{accounts[0]}/statement",
                         headers={"accept": "text/csv"})
        yield "GET statement csv", f"{csv.status_code}\n{csv.text}"


def digests(url: str, work: Path) -> dict[str, str]:
    """name -> the first 16 hex digits of the sha256 of each output (what the golden
    file holds)."""
    return digests_of(render_all(url, work))


def digests_of(outputs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The digests of outputs `render_all` gave."""
    return {name: hashlib.sha256(text.encode()).hexdigest()[:16] for name, text in outputs}
