"""Reading a web page's tables back as text, for tests that compare them with the API."""

from __future__ import annotations

import re


def cells(html: str, table_id: str) -> list[list[str]]:
    """The text of each body row's cells of the table with that id."""
    found = re.search(rf'<table[^>]*id="{table_id}".*?<tbody>(.*?)</tbody>', html, re.S)
    assert found, f"no table {table_id}"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), re.S)
    return [[re.sub(r"<[^>]+>", "", c).strip()
             for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)] for row in rows]
