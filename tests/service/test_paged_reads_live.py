"""Pages walked on a real `gpu-credits serve` process while writers append (usage reports
and grants, late ones among them, on SQLite and on PostgreSQL): `GET /v1/journal` lists
every position once and in order, and `GET /v1/revisions`, by account, every revision once,
`after` each page's cursor."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

from tests.service import http_kit, server
from tests.service.http_kit import call

WRITERS = 3
WRITES = 40


def _write(base: str, worker: int, stop: threading.Event, errors: list[str]) -> None:
    rng = random.Random(worker)
    for i in range(WRITES):
        account = rng.choice(http_kit.ACCOUNTS)
        if rng.random() < 0.3:  # a late grant, before the usage already recorded
            path, body = f"/v1/accounts/{account}/grants", {"amount": rng.randint(1, 20),
                                                             "time": rng.randint(0, 50)}
        else:
            path, body = f"/v1/accounts/{account}/usage", {"amount": rng.randint(1, 30)}
        status, answer = call(base, "POST", path, body, key=f"w{worker}-{i}")
        if status != 201:
            errors.append(f"{path}: {status} {answer}")
    stop.set()


def _walk(base: str, path: str, cursor: Any, done: threading.Event,
          rng: random.Random) -> tuple[list[dict[str, Any]], Any]:
    """Pages of `path` until writers are done and a page says the end; each page `after`
    the cursor the last one gave."""
    got: list[dict[str, Any]] = []
    after = 0
    while True:
        finished = done.is_set()
        sep = "&" if "?" in path else "?"
        status, page = call(base, "GET", f"{path}{sep}after={after}&limit={rng.randint(1, 7)}")
        assert status == 200, page
        items = page["events"] if "events" in page else page["revisions"]
        got += items
        after = cursor(page, after, items)
        if finished and page["next"] is None:
            return got, after


def test_pages_walked_while_writers_append_list_each_item_once(
        database_url: str, tmp_path: Path) -> None:
    with server.running(database_url, tmp_path / "serve.log") as live:
        http_kit.open_accounts(live.base)
        stops = [threading.Event() for _ in range(WRITERS)]
        done = threading.Event()
        errors: list[str] = []
        writers = [threading.Thread(target=_write, args=(live.base, w, stops[w], errors))
                   for w in range(WRITERS)]
        for thread in writers:
            thread.start()

        def all_stopped() -> None:
            for stop in stops:
                stop.wait()
            done.set()

        threading.Thread(target=all_stopped).start()
        rng = random.Random(7)
        account = http_kit.ACCOUNTS[0]
        results: dict[str, list[dict[str, Any]]] = {}

        def journal_cursor(page: dict[str, Any], after: int,
                           items: list[dict[str, Any]]) -> int:
            return page["next"] if page["next"] is not None else (
                items[-1]["position"] if items else after)

        def revisions_cursor(page: dict[str, Any], after: int,
                             items: list[dict[str, Any]]) -> int:
            return int(page["seen"])

        walkers = [
            threading.Thread(target=lambda: results.__setitem__("journal", _walk(
                live.base, "/v1/journal", journal_cursor, done, rng)[0])),
            threading.Thread(target=lambda: results.__setitem__("revisions", _walk(
                live.base, f"/v1/revisions?account={account}", revisions_cursor, done,
                random.Random(8))[0])),
        ]
        for thread in walkers:
            thread.start()
        for thread in writers + walkers:
            thread.join(timeout=300)
        assert not errors, errors[:3]
        status, head = call(live.base, "GET", "/v1/journal/head")
        assert status == 200, head
        positions = [e["position"] for e in results["journal"]]
        assert positions == list(range(1, head["position"] + 1))
        status, whole = call(live.base, "GET", "/v1/revisions?limit=1000")
        assert status == 200 and whole["next"] is None, whole
        mine = [r for r in whole["revisions"] if r["account"] == account]
        assert mine, "the late grants revised nothing of the account: nothing was walked"
        assert results["revisions"] == mine
