"""The summary's search finds an account however its letters are encoded: `café` typed
in a browser (composed, NFC) finds an account a file brought in decomposed (`cafe` and a
combining accent), which looks exactly the same, and the other way round."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from pagetext import cells

from eventstore import Journal
from projections.importing import import_file
from tools.web.browsing import app_for


def test_the_search_finds_a_name_in_either_unicode_form(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'forms.db'}"
    journal = Journal(url)
    lines = [{"type": "grant", "account": name, "amount": 10, "time": 0}
             for name in ("caf\u00e9-labs", "cafe\u0301-ml", "cafeteria", "ﬁnance")]
    import_file(journal, "\n".join(json.dumps(line) for line in lines).encode(), "f.jsonl")
    journal.close()
    with TestClient(app_for(url)) as client:
        for wanted in ("CAF\u00c9", "cafe\u0301", "Cafe\u0301-"):
            rows = cells(client.get("/", params={"q": wanted}).text, "accounts-table")
            found = sorted(row[0] for row in rows if row[1] == "all")
            assert found == sorted(["caf\u00e9-labs", "cafe\u0301-ml"]), (wanted, found)
        rows = cells(client.get("/", params={"q": "FINANCE"}).text, "accounts-table")
        assert [row[0] for row in rows if row[1] == "all"] == ["ﬁnance"]
