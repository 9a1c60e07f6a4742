"""Client processes for the multi-process service tests: random decisions over HTTP.

A plain module (not a conftest) so spawned children can import it by name. Each client
talks to one or more `gpu-credits serve` processes over loopback with the standard
library only, and writes down what it was told, in the shape
`tests/concurrency/concurrency_kit.check_linearizable` compares with its own model.
"""

from __future__ import annotations

import http.client
import json
import random
import traceback
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ACCOUNTS = ("acct-a", "acct-b", "acct-c", "acct-d")
MAX_RUNNING = 2
OPENING = 120


def call(base: str, method: str, path: str, body: Any = None, key: str | None = None,
         timeout: float = 60.0) -> tuple[int, Any]:
    """One request; (status, decoded JSON body or None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key is not None:
        request.add_header("Idempotency-Key", key)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, _body(answer.status, answer.headers, answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, _body(exc.code, exc.headers, exc.read())


def _body(status: int, headers: Any, raw: bytes) -> Any:
    """The decoded body of a complete answer; `IncompleteRead` for one a dying server cut
    short: http.client takes a status line cut mid-way, or headers cut before their end,
    for a whole answer without a body, so every answer but a 204 must say its length."""
    length = headers.get("content-length")
    headless = status != 204 and length is None
    if headless or (length is not None and int(length) != len(raw)):
        raise http.client.IncompleteRead(raw)
    return json.loads(raw) if raw else None


def open_accounts(base: str) -> None:
    for account in ACCOUNTS:
        status, body = call(base, "POST", "/v1/accounts",
                            {"account": account, "max_running": MAX_RUNNING},
                            key=f"open-{account}")
        assert status == 201, body
        status, body = call(base, "POST", f"/v1/accounts/{account}/grants",
                            {"amount": OPENING}, key=f"opening-{account}")
        assert status == 201, body


def client(bases: list[str], worker: int, ops: int, seed: int, out: str) -> None:
    """`ops` random decisions against random replicas; what it was told goes to `out`."""
    try:
        result = _client(bases, worker, ops, seed)
    except BaseException:
        result = {"crash": traceback.format_exc()}
    Path(out).write_text(json.dumps(result))


def _client(bases: list[str], worker: int, ops: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    told: dict[str, dict[str, Any]] = {"submits": {}, "submit_ids": {}, "consumes": {},
                                       "starts": {}, "completes": {}, "cancels": {}}
    pending: list[str] = []
    running: list[str] = []
    problems: list[str] = []
    statuses: dict[str, int] = {}

    def send(path: str, body: Any, key: str, allowed: tuple[int, ...]) -> tuple[int, Any]:
        base = rng.choice(bases)
        status, answer = call(base, "POST", path, body, key)
        statuses[str(status)] = statuses.get(str(status), 0) + 1
        if status not in allowed:
            problems.append(f"{key} {path}: {status} {answer}")
        if rng.random() < 0.1:  # a retry, maybe on the other replica: the same answer
            # (when the first one recorded something: a 204 or a 4xx recorded nothing,
            # so the key is still free and the retry is decided afresh)
            again = call(rng.choice(bases), "POST", path, body, key)
            if again != (status, answer) and status in (200, 201):
                problems.append(f"{key}: retry answered {again}, first {(status, answer)}")
        return status, answer

    for i in range(ops):
        key = f"w{worker}-{i}"
        r = rng.random()
        if r < 0.30:
            job = f"w{worker}-j{i}"
            status, answer = send("/v1/jobs", {"job": job, "account": rng.choice(ACCOUNTS),
                                               "cost": rng.randint(5, 45),
                                               "priority": rng.randint(0, 3)}, key, (201,))
            if status == 201:
                told["submits"][job] = answer["accepted"]
                told["submit_ids"][job] = key
                if answer["accepted"]:
                    pending.append(job)
        elif r < 0.52:
            status, answer = send("/v1/jobs/start-next", {}, key, (200, 204))
            if status == 200:
                told["starts"][key] = answer["job"]
                running.append(answer["job"])
        elif r < 0.72:
            job = (running.pop(rng.randrange(len(running))) if running and rng.random() < 0.9
                   else f"w{rng.randrange(4)}-j{rng.randrange(max(1, ops))}")
            status, _ = send(f"/v1/jobs/{job}/complete",
                             {"success": rng.random() < 0.7,
                              "refund_fraction": rng.choice((1.0, 0.5, 0.0))},
                             key, (200, 404, 409))
            if status == 200:
                told["completes"][key] = job
        elif r < 0.82:
            job = (pending.pop(rng.randrange(len(pending))) if pending and rng.random() < 0.8
                   else f"w{rng.randrange(4)}-j{rng.randrange(max(1, ops))}")
            status, _ = send(f"/v1/jobs/{job}/cancel", {}, key, (200, 404, 409))
            if status == 200:
                told["cancels"][key] = job
        elif r < 0.95:
            account = rng.choice(ACCOUNTS)
            status, answer = send(f"/v1/accounts/{account}/usage",
                                  {"amount": rng.randint(1, 12)}, key, (201,))
            if status == 201:
                told["consumes"][key] = answer["debt"]
        else:
            account = rng.choice(ACCOUNTS)
            send(f"/v1/accounts/{account}/grants", {"amount": rng.randint(20, 70)}, key,
                 (201,))
    return {"told": told, "problems": problems, "statuses": statuses}


def usage_client(base: str, worker: int, ops: int, out: str) -> None:
    """Usage reports with keys until `ops` are sent or the server goes away; writes
    {key: debt} of the acknowledged ones, and the keys sent without an answer."""
    acked: dict[str, int] = {}
    unanswered: list[str] = []
    try:
        for i in range(ops):
            key = f"kill-w{worker}-{i}"
            account = ACCOUNTS[i % len(ACCOUNTS)]
            try:
                status, answer = call(base, "POST", f"/v1/accounts/{account}/usage",
                                      {"amount": 1 + i % 5}, key, timeout=20)
            except (OSError, urllib.error.URLError, http.client.HTTPException, ValueError):
                # A server killed mid-answer can cut the response anywhere: a reset, a
                # truncated body, a missing status line. None of these is an answer.
                unanswered.append(key)
                break
            if status == 201:
                acked[key] = answer["debt"]
            else:
                unanswered.append(key)
                if status != 503:
                    break
    finally:
        Path(out).write_text(json.dumps({"acked": acked, "unanswered": unanswered}))
