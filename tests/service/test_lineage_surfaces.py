"""Every credit traced to the grant that paid for it, on every surface that shows it,
against a small model (`lineage_model`): `explain` (account and job, as known at any
position), the statement's `grants` column (command line and service, JSON and CSV),
`GET /v1/jobs/{job}`, the usage answer and the web view's job page, on generated
journals with late events, voids and reversals, posted in a few batches."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from contextlib import ExitStack
from typing import Any

from contract.kit import Run, cli_runner
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from markupsafe import escape

from service.lineage_model import GENERAL, Folded, fold
from tools.web.browsing import app_for

POOLS = st.sampled_from([None, None, "h100", "a100"])


@st.composite
def journals(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """A few batches of events of account `a`, in the order they are posted."""
    events: list[dict[str, Any]] = [{"type": "account", "account": "a", "id": "open"}]
    grants: list[str] = []
    jobs: list[str] = []
    n = draw(st.integers(2, 22))
    for i in range(n):
        time = draw(st.integers(0, 12))
        kind = draw(st.sampled_from(
            ["grant", "grant", "consume", "consume", "adjust", "submit", "submit",
             "step", "job", "job", "job", "void", "reverse"]))
        eid = f"e{i}"
        if kind == "grant" or (kind == "void" and not grants):
            e: dict[str, Any] = {"type": "grant", "account": "a",
                                 "amount": draw(st.integers(1, 30)), "time": time}
            expiry = draw(st.one_of(st.none(), st.integers(1, 8)))
            if expiry is not None:
                e["expiry"] = time + expiry
            pool = draw(POOLS)
            if pool:
                e["pool"] = pool
            priority = draw(st.sampled_from([None, None, 10, 90]))
            if priority is not None:
                e["priority"] = priority
            grants.append(eid)
        elif kind == "consume":
            e = {"type": "consume", "account": "a", "amount": draw(st.integers(1, 20)),
                 "time": time}
            pool = draw(POOLS)
            if pool:
                e["pool"] = pool
        elif kind == "adjust":
            amount = draw(st.integers(-10, 10).filter(bool))
            e = {"type": "adjust", "account": "a", "amount": amount, "time": time,
                 "reason": "by hand"}
            pool = draw(POOLS)
            if pool:
                e["pool"] = pool
        elif kind == "job":  # a whole life, in order: most journals' jobs
            job = f"j{len(jobs)}"
            jobs.append(job)
            cost = draw(st.integers(1, 10))
            end = draw(st.sampled_from(["complete", "complete", "cancel", None]))
            life: list[dict[str, Any]] = [
                {"type": "submit", "account": "a", "job": job, "cost": cost,
                 "priority": 1, "time": time}]
            if draw(POOLS):
                life[0]["pool"] = draw(st.sampled_from(["h100", "a100"]))
            if end == "complete":
                life.append({"type": "start", "job": job, "time": time + draw(st.integers(0, 2))})
                life.append({"type": "complete", "job": job, "success": draw(st.booleans()),
                             "refund_fraction": draw(st.sampled_from([0.0, 0.3, 0.5, 1.0])),
                             "time": life[-1]["time"] + draw(st.integers(0, 3))})
            elif end == "cancel":
                life.append({"type": "cancel", "job": job,
                             "time": time + draw(st.integers(0, 3))})
            for k, step in enumerate(life):
                step["id"] = f"{eid}-{k}"
            if draw(st.booleans()):  # recorded last step first: filed before its submit
                life.reverse()
            events.extend(life)
            continue
        elif kind == "submit" or (kind == "step" and not jobs):
            job = f"j{len(jobs)}"
            e = {"type": "submit", "account": "a", "job": job,
                 "cost": draw(st.integers(1, 15)), "priority": 1, "time": time}
            pool = draw(POOLS)
            if pool:
                e["pool"] = pool
            jobs.append(job)
        elif kind == "step":
            job = draw(st.sampled_from(jobs))
            steps = [x["type"] for x in events if x.get("job") == job]
            step = "start" if steps[-1] == "submit" else "complete"
            step = draw(st.sampled_from([step, step, step, "start", "complete", "cancel"]))
            # mostly in order after the job's last step, sometimes anywhere (late)
            last = max(x["time"] for x in events if x.get("job") == job)
            time = draw(st.one_of(st.integers(last, last + 3), st.just(time)))
            e = {"type": step, "job": job, "time": time}
            if step == "complete":
                e["success"] = draw(st.booleans())
                if not e["success"]:
                    e["refund_fraction"] = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
        elif kind == "void":
            e = {"type": "void", "grant": draw(st.sampled_from(grants)), "time": time}
        else:
            named = {x["event"] for x in events if x["type"] == "reverse"}
            targets = [x["id"] for x in events if x["id"] not in named | {"open"}]
            if not targets:
                continue
            e = {"type": "reverse", "event": draw(st.sampled_from(targets)), "time": time,
                 "reason": "wrong"}
        e["id"] = eid
        events.append(e)
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(events) - 1)), max_size=2)))
    bounds = [0, *cuts, len(events)]
    return [events[a:b] for a, b in itertools.pairwise(bounds) if events[a:b]]


def _pairs(pairs: Any) -> list[tuple[str, int]]:
    return [(g, n) for g, n in pairs]


def _check_explain(answer: dict[str, Any], model: Folded, where: str) -> None:
    at = answer["at"]
    for b in model.batches.values():  # what expired by the time the answer is at
        if b.amount and not b.live(at):
            model.grants[b.grant].expired += b.amount
            b.amount = 0
    held: dict[str, int] = {}
    for job in model.jobs.values():
        for b, n in job.holds:
            held[b.grant] = held.get(b.grant, 0) + n
    shown = {g["grant"]: g for g in answer["grants"]}
    assert set(shown) == set(model.grants), where
    for gid, fate in model.grants.items():
        g = shown[gid]
        assert g["used"] == sum(u["amount"] for u in g["uses"]), (where, g)
        assert g["used"] + g["paid_debt"] <= g["amount"], (where, g)
        got = (g["amount"], g["paid_debt"], g["used"], g["expired"],
               sum(h[1] if isinstance(h, list) else h["amount"] for h in g["held"]),
               g["remaining"])
        want = (fate.amount, fate.paid_debt, fate.used, fate.expired, held.get(gid, 0),
                model.batches[gid].amount)
        assert got == want, (where, gid, got, want)
    spends = [(s["event_id"], s["amount"], _pairs(s["paid_by"]), s["debt_created"])
              for s in answer["spends"] if s["amount"]]
    want_spends = [(s.event_id, s.amount, s.paid_by, s.debt_created)
                   for s in model.spends if s.amount]
    assert spends == want_spends, where
    for _, amount, paid_by, debt in spends:
        assert sum(n for _, n in paid_by) + debt == amount, where


def _check_job(answer: dict[str, Any], model: Folded, job: str, where: str) -> None:
    want = model.jobs.get(job)
    assert want is not None, (where, answer)
    assert answer["state"] == want.state, (where, answer, want.state)
    charged = answer.get("charge", answer.get("charged"))
    assert charged == want.charge, (where, answer)
    paid_by = answer["paid_by"]
    if paid_by and isinstance(paid_by[0], dict):
        paid_by = [(p["grant"], p["amount"]) for p in paid_by]
    assert _pairs(paid_by or []) == want.paid_by, (where, answer)
    if want.charge:
        assert sum(n for _, n in want.paid_by) == want.charge


def _check_statement(lines: list[dict[str, Any]], model: Folded, where: str) -> None:
    spent = {s.event_id: s for s in model.spends}
    for line in lines:
        if line["type"] in ("consume", "complete") or (
                line["type"] == "adjust" and int(line["change"]) < 0):
            if line["status"] != "ok":
                continue
            s = spent[line["event_id"]]
            assert (_pairs(line["grants"]), int(line["debt_created"])) == (
                s.paid_by, s.debt_created), (where, line)


def _csv_grants(cell: str) -> list[tuple[str, int]]:
    return [(g, int(n)) for g, n in (part.rsplit(":", 1) for part in cell.split())]


def _statement_csv(text: str) -> list[dict[str, Any]]:
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        row["grants"] = _csv_grants(row["grants"])
    return rows


def _web_paid_by(html: str) -> list[tuple[str, int]]:
    found = re.search(r'<table[^>]*id="paid-by".*?<tbody>(.*?)</tbody>', html, re.S)
    if not found:
        return []
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), re.S)
    out = []
    for row in rows:
        cells = [re.sub(r"<[^>]+>", "", c).strip()
                 for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        out.append((cells[0], int(cells[1].replace(",", ""))))
    return out


def _cli_json(cli: Run, *args: str) -> Any:
    result = cli(*args, "--json")
    assert result.exit_code == 0, (args, result.stderr)
    return json.loads(result.stdout)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(batches=journals(), restart=st.integers(1, 4),
       late_usage=st.tuples(st.integers(0, 12), st.integers(1, 20), POOLS))
def test_every_surface_names_the_models_payers(
        tmp_path_factory: Any, batches: list[list[dict[str, Any]]], restart: int,
        late_usage: tuple[int, int, str | None]) -> None:
    note(json.dumps(batches))
    url = f"sqlite:///{tmp_path_factory.mktemp('lineage') / 'j.db'}"
    cli = cli_runner(url)
    events: list[dict[str, Any]] = []
    heads: list[int] = []
    with ExitStack() as running:
        web = running.enter_context(TestClient(app_for(url)))
        for k, batch in enumerate(batches):
            if k == restart:
                # The service restarts: it starts from the checkpoint it left at
                # shutdown, remembering no outcome of the events before it.
                running.close()
                web = running.enter_context(TestClient(app_for(url)))
            r = web.post("/v1/events", json={"events": batch})
            assert r.status_code == 200, (r.text, batch)
            for e, pos in zip(batch, r.json()["positions"], strict=True):
                events.append({**e, "position": pos})
            heads.append(events[-1]["position"])
        if restart == len(batches):
            running.close()
            web = running.enter_context(TestClient(app_for(url)))
        jobs = sorted({e["job"] for e in events if e["type"] == "submit"})
        final = fold(events)
        event(f"charged jobs: {sum(1 for j in final.jobs.values() if j.charge)}")
        event(f"release paid debt: {any(g.paid_debt for g in final.grants.values())}")
        event(f"voided: {any(b.voided for b in final.batches.values())}")
        for known in [*heads[:-1], None]:
            model = fold(events, known)
            tail = () if known is None else ("--as-known-at", str(known))
            where = f"as known at {known}"
            accounts = {e["account"] for e in events
                        if "account" in e and (known is None or e["position"] <= known)}
            if "a" in accounts and (model.grants or model.spends):
                _check_explain(_cli_json(cli, "explain", "a", *tail), model,
                               f"explain a {where}")
                q = {} if known is None else {"as_known_at": known}
                http = web.get("/v1/accounts/a/statement", params=q)
                assert http.status_code == 200, http.text
                _check_statement(http.json()["lines"], model, f"http statement {where}")
                http_csv = web.get("/v1/accounts/a/statement", params=q,
                                   headers={"Accept": "text/csv"})
                _check_statement(_statement_csv(http_csv.text), model,
                                 f"http csv statement {where}")
                _check_statement(_cli_json(cli, "statement", "a", *tail)["lines"], model,
                                 f"cli statement {where}")
                csv_out = cli("statement", "a", "--csv", *tail)
                _check_statement(_statement_csv(csv_out.stdout), model,
                                 f"cli csv statement {where}")
            for job in jobs:
                if job not in model.jobs:
                    continue
                _check_job(_cli_json(cli, "explain", "--job", job, *tail), model, job,
                           f"explain --job {job} {where}")
                if known is None:
                    _check_job_reads(web, model, job)
        # A usage report, late or not, answers the debt right after it.
        time, amount, pool = late_usage
        body: dict[str, Any] = {"amount": amount, "time": time}
        if pool:
            body["pool"] = pool
        r = web.post("/v1/accounts/a/usage", json=body, headers={"Idempotency-Key": "late-u"})
        assert r.status_code == 201, r.text
        events.append({"type": "consume", "account": "a", "amount": amount,
                       "pool": pool or GENERAL, "time": time, "id": "late-u",
                       "position": r.json().get("position", events[-1]["position"] + 1)})
        assert r.json()["debt"] == fold(events).debt_after["late-u"], r.json()
        # ...and every job's answer follows it.
        model = fold(events)
        for job in jobs:
            if job in model.jobs:
                _check_job_reads(web, model, job, "after the usage report")
                _check_job(_cli_json(cli, "explain", "--job", job), model, job,
                           f"explain --job {job} after the usage report")


def _check_job_reads(web: TestClient, model: Folded, job: str, when: str = "") -> None:
    """`GET /v1/jobs/{job}` and the web view's job page name the model's payers."""
    http = web.get(f"/v1/jobs/{job}")
    assert http.status_code == 200, http.text
    _check_job(http.json(), model, job, f"GET /v1/jobs/{job} {when}")
    page = web.get(f"/jobs/{job}")
    assert page.status_code == 200
    if model.jobs[job].state == "rejected":
        reason = http.json()["reason"]
        assert reason and str(escape(reason)) in page.text, (when, reason)
    assert _web_paid_by(page.text) == model.jobs[job].paid_by, f"web /jobs/{job} {when}"
