"""The account page's grants table lists the refill bucket as what it is: made when the
refill first put credits in it, used at the default grant priority."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from pagetext import cells

from eventstore import Journal
from projections.importing import import_file
from tools.web.browsing import app_for


def test_the_refill_bucket_row_gives_its_time_and_priority(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'refill.db'}"
    journal = Journal(url)
    lines = [{"type": "account", "account": "a", "refill_rate": 60, "refill_cap": 10,
              "time": 0},
             {"type": "grant", "account": "a", "amount": 3, "time": 600, "priority": 10,
              "id": "g"}]
    import_file(journal, "\n".join(json.dumps(line) for line in lines).encode(), "f.jsonl")
    journal.close()
    with TestClient(app_for(url)) as client:
        rows = {row[0]: row for row in cells(client.get("/accounts/a").text, "grants-table")}
    bucket, grant = rows["refill:a (refill)"], rows["g"]
    assert bucket[1] == grant[1] != "start"  # made at 600, with the grant's touch
    assert (bucket[9], grant[9]) == ("50", "10")
