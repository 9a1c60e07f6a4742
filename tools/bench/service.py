"""`python -m tools.bench.service [--quick] [--rounds N]`: the HTTP service under load, on
loopback.

Four measurements, each beside its baseline in the same run:

1. single decisions: 16 client processes each send usage reports (one decision per
   request, with an Idempotency-Key) to `gpu-credits serve` on PostgreSQL; committed
   decisions/s and latency p50/p99, beside a bare FastAPI endpoint that only answers,
   driven by the same clients, and beside today's library path (8 worker processes
   deciding through `Scheduler.submit` on 100 accounts, `tools/bench_workers.py`);
2. `POST /v1/events` in batches of 100: events/s, beside raw psycopg inserting one row
   per commit;
3. `GET /v1/accounts/{a}/balance` with 8 clients: requests/s and latency p50/p99;
4. the journal's size: a journal of 10^4 and one of 10^6 events of the realistic mix
   (10^5 with --quick), each checkpointed as `gpu-credits replay` leaves it; `serve`'s
   start-up until /readyz answers 200, and one client's balance latency (p50/p99) on
   each, in alternating rounds with both services running; the latency at the large
   size over the small one (the median round's).

Every loop is bounded (a fixed number of requests per client) and talks to 127.0.0.1
only. The two throughput ratios (1 and 2) are taken over `--rounds` rounds (default 3),
each round driving the baseline and then the service, one after the other; each ratio
shown is the median round's, with every round's beside it: one round's window is about a
second, and on a shared machine one round alone swings by half.

Clients are separate processes (stdlib http.client, one kept-alive connection
each), so the server's two cores are shared with them as they would be on one machine.
With `--new-connections` each request opens a connection of its own and closes it
(stdlib urllib, as the targets' baseline was first measured): every client then pays a
TCP handshake per request, and so does the server.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tools.bench.storage import create_schema, drop_schema, libpq_dsn, pg_base_url, schema_url
from tools.loopback import free_port, wait_ready

ACCOUNTS = 100


def cpu_seconds(pid: int) -> float | None:
    """CPU time (user + system) a process has used so far; None where /proc is missing."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def database_backends(server: int, url: str) -> list[int]:
    """The PostgreSQL backends serving the connections `server` (a pid) holds now, found
    by their client ports (its sockets in /proc, matched in `pg_stat_activity`); empty
    where /proc is missing. A connection opened later is not among them."""
    import psycopg

    inodes: set[str] = set()
    try:
        for fd in Path(f"/proc/{server}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
    except OSError:
        return []
    ports: list[int] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[9] in inodes:
                    ports.append(int(fields[1].rsplit(":", 1)[1], 16))
    if not ports:
        return []
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)",
                            (ports,)).fetchall()
    return [int(pid) for (pid,) in rows]


@contextmanager
def _process(args: list[str], port: int, ready: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    try:
        wait_ready(port, proc, ready, timeout=120)
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve(url: str, port: int) -> Any:
    """`gpu-credits serve` on `url`, as it runs by default: its structured access log
    (one JSON line per request) is written, to /dev/null (a terminal would measure the
    terminal)."""
    exe = str(Path(sys.executable).with_name("gpu-credits"))
    return _process([exe, "--db", url, "serve", "--port", str(port)], port, "/readyz")


BARE_APP = """
from fastapi import FastAPI
app = FastAPI()
@app.post("/v1/accounts/{account}/usage", status_code=201)
async def usage(account: str, body: dict) -> dict:
    return {"id": "x", "debt": 0}
"""


def bare(port: int, workdir: Path) -> Any:
    """A FastAPI endpoint that only answers, on the same uvicorn settings."""
    (workdir / "bare_app.py").write_text(BARE_APP)
    return _process([sys.executable, "-c",
                     f"import sys; sys.path.insert(0, {str(workdir)!r}); import uvicorn, "
                     f"bare_app; uvicorn.run(bare_app.app, host='127.0.0.1', port={port}, "
                     "access_log=False, log_level='warning')"], port, "/docs")


# -- clients ------------------------------------------------------------------------------


def _client(port: int, requests: list[tuple[str, str, bytes | None, dict[str, str]]],
            out: Any, go: Any, new_connections: bool = False) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    go.wait()
    cpu = time.process_time()
    for method, path, body, headers in requests:
        began = time.perf_counter()
        if new_connections:
            status = _urlopen(port, method, path, body, headers)
        else:
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            answer.read()
            status = answer.status
        latencies.append(time.perf_counter() - began)
        statuses[status] = statuses.get(status, 0) + 1
    conn.close()
    out.send((latencies, statuses, time.process_time() - cpu))


def _urlopen(port: int, method: str, path: str, body: bytes | None,
             headers: dict[str, str]) -> int:
    """One request on a connection of its own (urllib closes it after the answer); its
    status."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                     headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            answer.read()
            status: int = answer.status
    except urllib.error.HTTPError as exc:  # an answer all the same (4xx, 5xx)
        exc.read()
        status = exc.code
    return status


def drive(port: int, plans: list[Plan], server: int | None = None,
          database: str | None = None, *, new_connections: bool = False
          ) -> dict[str, Any]:
    """Run one client process per plan, all starting together; throughput and latency,
    and with `server` (its pid) the server's CPU per request, which the neighbours on a
    shared machine do not change the way they change the rates; with `database` (its
    PostgreSQL URL) too, the CPU of the backends serving the server's connections (those
    open at the start or the end of the run)."""
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    pipes, procs = [], []
    for plan in plans:
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_client, args=(port, plan, send, go, new_connections))
        p.start()
        pipes.append(recv)
        procs.append(p)
    time.sleep(1.0)  # every client connected and waiting
    backends = [] if server is None or database is None else database_backends(server,
                                                                                database)
    db_before = [cpu_seconds(pid) for pid in backends]
    cpu_before = None if server is None else cpu_seconds(server)
    began = time.perf_counter()
    go.set()
    results = [r.recv() for r in pipes]
    seconds = time.perf_counter() - began
    cpu_after = None if server is None else cpu_seconds(server)
    if server is not None and database is not None:
        # A connection the pool opened during the run: all its CPU is the run's.
        opened = [pid for pid in database_backends(server, database) if pid not in backends]
        backends += opened
        db_before += [0.0] * len(opened)
    db_after = [cpu_seconds(pid) for pid in backends]
    for p in procs:
        p.join()
    latencies = sorted(x for lat, _, _ in results for x in lat)
    statuses: dict[int, int] = {}
    for _, st, _ in results:
        for k, v in st.items():
            statuses[k] = statuses.get(k, 0) + v
    out = {"requests": len(latencies), "seconds": round(seconds, 3),
           "per_second": round(len(latencies) / seconds, 1),
           "p50_ms": round(1000 * statistics.median(latencies), 2),
           "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 2),
           "statuses": statuses,
           # What the clients themselves cost (they share the machine's cores with the
           # server and the database).
           "clients_cpu_ms_per_request": round(
               1000 * sum(cpu for _, _, cpu in results) / len(latencies), 3)}
    if cpu_before is not None and cpu_after is not None:
        out["server_cpu_ms_per_request"] = round(
            1000 * (cpu_after - cpu_before) / len(latencies), 3)
    used = [a - b for a, b in zip(db_after, db_before, strict=True)
            if a is not None and b is not None]
    if used:
        out["database_cpu_ms_per_request"] = round(1000 * sum(used) / len(latencies), 3)
    return out


JSON = {"Content-Type": "application/json"}


Plan = list[tuple[str, str, bytes | None, dict[str, str]]]


def _usage_plans(clients: int, each: int, tag: str) -> list[Plan]:
    return [[("POST", f"/v1/accounts/acct-{(c * each + i) % ACCOUNTS}/usage",
              json.dumps({"amount": 1}).encode(),
              {**JSON, "Idempotency-Key": f"{tag}-{c}-{i}"}) for i in range(each)]
            for c in range(clients)]


def _setup(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    events = [{"type": "grant", "account": f"acct-{a}", "amount": 10**9, "time": 0,
               "id": f"opening-{a}"} for a in range(ACCOUNTS)]
    conn.request("POST", "/v1/events", body=json.dumps({"events": events}), headers=JSON)
    answer = conn.getresponse()
    assert answer.status == 200, answer.read()
    answer.read()


def _writer(port: int) -> dict[str, Any]:
    """The service writer's running totals, as `/readyz` gives them."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("GET", "/readyz")
        answer = conn.getresponse()
        body: dict[str, Any] = json.loads(answer.read())
    finally:
        conn.close()
    return body


def _batches(before: dict[str, Any], after: dict[str, Any], seconds: float
             ) -> dict[str, Any]:
    """The batches committed between two readings of `/readyz`: how many, their mean
    size, and per batch the wall clock of the run and of each of the writer's phases.
    When batches do not overlap, what the phases leave of the run's time per batch is
    the answers going out, the clients turning around and their requests coming in."""
    batches = after["batches"] - before["batches"]
    if batches <= 0:
        return {"batches": 0}
    out: dict[str, Any] = {
        "batches": batches,
        "mean_size": round((after["decisions"] - before["decisions"]) / batches, 1),
        "wall_ms_per_batch": round(1000 * seconds / batches, 2)}
    for phase in ("linger", "decide", "write"):
        spent = after[f"{phase}_seconds"] - before[f"{phase}_seconds"]
        out[f"{phase}_ms_per_batch"] = round(1000 * spent / batches, 2)
    return out


def _warm(port: int, requests: Plan) -> None:
    """Each route once before timing: a first request pays for lazy set-up (FastAPI
    builds a route's validators on its first call) that no later one pays."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for method, path, body, headers in requests:
        conn.request(method, path, body=body, headers=headers)
        conn.getresponse().read()
    conn.close()


def _batch(client: int, number: int, round_: int = 0) -> bytes:
    return json.dumps({"events": [
        {"type": "consume", "account": f"acct-{(number * 100 + i) % ACCOUNTS}", "amount": 1,
         # After every live decision of the run, and one time for every batch: appended
         # in order, not late. (A time per batch number made the client that ran ahead
         # turn the other's batches into late events, each refolding accounts.)
         "time": 4_000_000_000, "id": f"batch-{round_}-{client}-{number}-{i}"}
        for i in range(100)]}
    ).encode()


# -- raw psycopg --------------------------------------------------------------------------


def raw_one_per_commit(url: str, rows: int, round_: int = 0) -> float:
    """Rows/s of psycopg inserting one JSON row per transaction (autocommit); `round_`
    keeps each round's ids apart."""
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS raw_events (position bigserial primary key, "
                     "event_id text unique, payload jsonb)")
        payload = json.dumps({"type": "grant", "account": "a", "amount": 1, "time": 0})
        began = time.perf_counter()
        for i in range(rows):
            conn.execute("INSERT INTO raw_events (event_id, payload) VALUES (%s, %s)",
                         (f"raw-{round_}-{i}", payload))
        return rows / (time.perf_counter() - began)


# -- the run ------------------------------------------------------------------------------


PARTS = ("decisions", "events", "balance", "library", "journal")
"""The cases `--only` can choose: the single decisions (with the bare endpoint), the
batches of events (with raw psycopg), the balance reads, the library path and the
journal's size."""


def run(quick: bool, parts: Sequence[str] = PARTS, rounds: int | None = None, *,
        new_connections: bool = False) -> dict[str, Any]:
    """Every case of `parts`; the two throughput ratios over `rounds` alternating rounds
    (default 3, 1 with `quick`), each round the service right after its baseline, so a
    swing of the shared machine's load moves both; each ratio is the median round's.
    `new_connections`: the single decisions and their bare endpoint with a connection
    per request (see the module doc)."""
    rounds = (1 if quick else 3) if rounds is None else rounds
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    base = pg_base_url()
    schema = f"bench_service_{os.getpid()}"
    create_schema(base, schema)
    url = schema_url(base, schema)
    each = 40 if quick else 150
    out: dict[str, Any] = {}
    decisions: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            bare_port, bare_proc = 0, None
            if "decisions" in parts:
                bare_port = free_port()
                bare_proc = stack.enter_context(bare(bare_port, Path(tmp)))
                _warm(bare_port, _usage_plans(1, 3, "warm-bare")[0])
            if {"decisions", "events", "balance"} & set(parts):
                port = free_port()
                proc = stack.enter_context(serve(url, port))
                _setup(port)
                _warm(port, [*_usage_plans(1, 3, "warm")[0],
                             ("GET", "/v1/accounts/acct-0/balance", None, {})])
                for n in range(rounds):
                    if bare_proc is not None:
                        bare_run = drive(bare_port, _usage_plans(16, each, f"bare-{n}"),
                                         bare_proc.pid, new_connections=new_connections)
                        before = _writer(port)
                        single = drive(port, _usage_plans(16, each, f"single-{n}"),
                                       proc.pid, url, new_connections=new_connections)
                        single["writer"] = _batches(before, _writer(port), single["seconds"])
                        decisions.append({"bare_16": bare_run, "decisions_16": single,
                                          "ratio": round(single["per_second"]
                                                         / bare_run["per_second"], 2)})
                    if "events" in parts:
                        batches = 10 if quick else 40
                        plans: list[Plan] = [[("POST", "/v1/events", _batch(c, b, n), JSON)
                                              for b in range(batches)] for c in range(2)]
                        before = _writer(port)
                        batch_run = drive(port, plans, proc.pid, url)
                        batch_run["writer"] = _batches(before, _writer(port),
                                                       batch_run["seconds"])
                        batch_run["events_per_second"] = round(batch_run["per_second"] * 100,
                                                               1)
                        raw = round(raw_one_per_commit(url, 300 if quick else 2000, n), 1)
                        events.append({"events_batches_of_100": batch_run,
                                       "raw_psycopg_rows_per_second": raw,
                                       "ratio": round(batch_run["events_per_second"] / raw,
                                                      1)})
                if "balance" in parts:
                    reads = 100 if quick else 400
                    out["balance_8"] = drive(port, [[
                        ("GET", f"/v1/accounts/acct-{(c + i) % ACCOUNTS}/balance", None, {})
                        for i in range(reads)] for c in range(8)], proc.pid)
        if "library" in parts:
            # Today's library path: 8 worker processes, each deciding through
            # Scheduler.submit on a random one of 100 accounts (tools/bench_workers.py's
            # measurement).
            from tools import bench_workers

            library = bench_workers.measure(bench_workers.WORKLOADS[1], 8,
                                            3.0 if quick else 10.0, base)
            out["library_8_workers_per_second"] = round(library["per_second"], 1)
    finally:
        drop_schema(base, schema)
    if "journal" in parts:
        out.update(journal_sizes(base, (10_000, 100_000 if quick else 1_000_000), rounds))
    if decisions:
        middle = _median_round(decisions)
        out["bare_16"], out["decisions_16"] = middle["bare_16"], middle["decisions_16"]
        out["ratio_decisions_to_bare"] = middle["ratio"]
        out["ratio_decisions_to_bare_each_round"] = [r["ratio"] for r in decisions]
        if "library" in parts:
            out["ratio_decisions_to_library_8"] = round(
                middle["decisions_16"]["per_second"] / out["library_8_workers_per_second"], 2)
    if events:
        middle = _median_round(events)
        out["events_batches_of_100"] = middle["events_batches_of_100"]
        out["raw_psycopg_rows_per_second"] = middle["raw_psycopg_rows_per_second"]
        out["ratio_events_to_raw"] = middle["ratio"]
        out["ratio_events_to_raw_each_round"] = [r["ratio"] for r in events]
    return out


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose ratio is the median (the lower middle one of an even number), so
    that the figures shown beside the ratio are the ones it came from."""
    ordered = sorted(rounds, key=lambda r: r["ratio"])
    return ordered[(len(ordered) - 1) // 2]


def journal_sizes(base: str, sizes: tuple[int, int], rounds: int,
                  reads: int = 400) -> dict[str, Any]:
    """`serve` on a checkpointed journal of each size: seconds until ready, then one
    client's balance reads (the latency a caller sees, not a throughput) in `rounds`
    alternating rounds, the small journal's service right before the large one's, both
    running throughout; the latency ratio is the median round's, with every round's.

    One round of 400 sub-millisecond reads swings by half with whatever else the machine
    does (the large journal's build and checkpoint had just ended when it was read
    alone), so the two sizes are read side by side, as the throughput ratios are."""
    from eventstore import Journal
    from projections.replay import replay
    from tools.bench.workload import account_name, append_mix, mix_accounts, realistic_mix

    out: dict[str, Any] = {}
    urls: dict[int, str] = {}
    with contextlib.ExitStack() as stack:
        for n in sizes:
            schema = f"bench_service_{n}_{os.getpid()}"
            create_schema(base, schema)
            stack.callback(drop_schema, base, schema)
            urls[n] = schema_url(base, schema)
            with Journal(urls[n]) as journal:
                began = time.perf_counter()
                append_mix(journal, realistic_mix(n), 5000)
                out[f"journal_{n}"] = {"events": n,
                                       "build_seconds": round(time.perf_counter() - began, 1)}
                # What `gpu-credits replay` leaves: a checkpoint of the whole journal.
                replay(journal, checkpoint=True, checkpoint_every=journal.head())
        exe = str(Path(sys.executable).with_name("gpu-credits"))
        plans: dict[int, Plan] = {}
        ports: dict[int, int] = {}
        for n in sizes:
            ports[n] = port = free_port()
            began = time.perf_counter()
            proc = stack.enter_context(_process([exe, "--db", urls[n], "serve", "--port",
                                                 str(port)], port, "/readyz"))
            out[f"journal_{n}"]["ready_seconds"] = round(time.perf_counter() - began, 2)
            # On a shared machine the wall clock measures the neighbours as well: the
            # CPU the process used until ready does not.
            used = cpu_seconds(proc.pid)
            out[f"journal_{n}"]["ready_cpu_seconds"] = None if used is None else round(used, 2)
            accounts = mix_accounts(n)
            plans[n] = [("GET", f"/v1/accounts/{account_name(i % accounts)}/balance",
                         None, {}) for i in range(reads)]
            _warm(port, plans[n][:3])
        small, large = sizes
        each: list[dict[str, Any]] = []
        for _ in range(rounds):
            runs = {n: drive(ports[n], [plans[n]]) for n in sizes}
            each.append({"runs": runs,
                         "ratio": round(runs[large]["p50_ms"] / runs[small]["p50_ms"], 2)})
        middle = _median_round(each)
        for n in sizes:
            out[f"journal_{n}"]["balance_1"] = middle["runs"][n]
        out["ratio_balance_p50_large_to_small"] = middle["ratio"]
        out["ratio_balance_p50_large_to_small_each_round"] = [r["ratio"] for r in each]
    return out


def main(argv: list[str] | None = None) -> None:
    # The docstring's first paragraph whole: its first line alone stopped mid-sentence.
    parser = argparse.ArgumentParser(prog="python -m tools.bench.service",
                                     description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--quick", action="store_true", help="fewer requests per client")
    parser.add_argument("--only", action="append", choices=PARTS, metavar="PART",
                        help="run only this case with its baseline (repeatable; one of "
                        f"{', '.join(PARTS)}; default: all)")
    parser.add_argument("--rounds", type=int, default=None, metavar="N",
                        help="alternating rounds of each throughput case and its baseline; "
                        "the ratio is the median round's (default 3, 1 with --quick)")
    parser.add_argument("--new-connections", action="store_true",
                        help="single decisions and the bare endpoint with a new connection "
                        "per request (stdlib urllib) instead of one kept alive per client")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    out = run(args.quick, args.only or PARTS, args.rounds,
              new_connections=args.new_connections)
    if args.new_connections:
        out["clients"] = "a new connection per request (urllib)"
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

