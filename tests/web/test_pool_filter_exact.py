"""The account page's pool filter names a pool exactly, as every other answer does: a
pool a file brought in with surrounding spaces (`"h100 "`) is another pool than `"h100"`,
and its lines are the only ones the filter keeps."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

from fastapi.testclient import TestClient
from pagetext import cells

from eventstore import Journal
from projections.importing import import_file
from tools.web.browsing import app_for


def test_a_pool_named_with_spaces_filters_its_own_lines(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'pools.db'}"
    journal = Journal(url)
    lines = [{"type": "grant", "account": "a", "amount": 10, "time": 0, "pool": "h100"},
             {"type": "consume", "account": "a", "amount": 4, "time": 1, "pool": "h100"},
             {"type": "consume", "account": "a", "amount": 3, "time": 2, "pool": "h100 "}]
    import_file(journal, "\n".join(json.dumps(line) for line in lines).encode(), "f.jsonl")
    journal.close()
    with TestClient(app_for(url)) as client:
        page = client.get("/accounts/a").text
        # Each pool is offered under its own name, as the browser will send it back.
        offered = [unescape(v) for v in re.findall(r'<option value="([^"]*)"', page)]
        assert {"h100", "h100 "} <= set(offered), offered
        padded = cells(client.get("/accounts/a", params={"pool": "h100 "}).text,
                       "ledger-table")
        assert len(padded) == 1 and padded[0][2].startswith("consume"), padded
        plain = cells(client.get("/accounts/a", params={"pool": "h100"}).text,
                      "ledger-table")
        assert len(plain) == 2, plain
        csv_text = client.get("/accounts/a/ledger.csv", params={"pool": "h100 "}).text
        assert len(csv_text.strip().splitlines()) == 2, csv_text


def test_a_pool_filter_keeps_the_lines_of_the_jobs_in_that_pool(tmp_path: Path) -> None:
    """A job charges the pool it was submitted in: its submit, start and completion are
    that pool's lines (they named no pool, and every pool filter dropped them)."""
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    journal = Journal(url)
    lines = [{"type": "grant", "account": "a", "amount": 50, "time": 0, "pool": "h100"},
             {"type": "grant", "account": "a", "amount": 50, "time": 0},
             {"type": "submit", "account": "a", "job": "train", "cost": 20, "priority": 1,
              "pool": "h100", "time": 1},
             {"type": "start", "job": "train", "time": 2},
             {"type": "complete", "job": "train", "success": True, "time": 3},
             {"type": "submit", "account": "a", "job": "eval", "cost": 5, "priority": 1,
              "time": 4}]
    import_file(journal, "\n".join(json.dumps(line) for line in lines).encode(), "f.jsonl")
    journal.close()
    with TestClient(app_for(url)) as client:
        h100 = cells(client.get("/accounts/a", params={"pool": "h100"}).text, "ledger-table")
        kinds = [row[2].split()[0] for row in h100]
        assert sorted(kinds) == ["complete", "grant", "start", "submit"], h100
        general = cells(client.get("/accounts/a", params={"pool": "general"}).text,
                        "ledger-table")
        assert sorted(row[2].split()[0] for row in general) == ["grant", "submit"], general
        csv_rows = client.get("/accounts/a/ledger.csv", params={"pool": "h100"}).text
        assert len(csv_rows.strip().splitlines()) == 1 + 4, csv_rows
