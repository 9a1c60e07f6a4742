"""The account page's ledger filtered `to` a date holds that whole day, as `statement --to`
does: a window written with dates ends at its last day's last second."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from pagetext import cells

from eventstore import Journal
from projections.importing import import_file
from projections.timefmt import parse_time
from tools.web.browsing import app_for


def test_the_ledger_to_a_date_holds_that_whole_day(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'month.db'}"
    journal = Journal(url)
    lines = [
        {"type": "grant", "account": "a", "amount": 100, "time": parse_time("2026-11-01")},
        {"type": "consume", "account": "a", "amount": 7,
         "time": parse_time("2026-11-30T12:00Z")},
        {"type": "consume", "account": "a", "amount": 5, "time": parse_time("2026-12-01")},
    ]
    import_file(journal, "\n".join(json.dumps(line) for line in lines).encode(), "f.jsonl")
    journal.close()
    with TestClient(app_for(url)) as client:
        window = {"from": "2026-11-01", "to": "2026-11-30"}
        rows = cells(client.get("/accounts/a", params=window).text, "ledger-table")
        assert [row[0][:10] for row in rows] == ["2026-11-01", "2026-11-30"], rows
        csv_text = client.get("/accounts/a/ledger.csv", params=window).text
        assert len(csv_text.strip().splitlines()) == 3, csv_text  # the header and two
        moment = cells(client.get("/accounts/a", params={"to": "2026-11-30T00:00Z"}).text,
                       "ledger-table")
        assert [row[0][:10] for row in moment] == ["2026-11-01"], moment
