"""A page of revisions costs its own rows, not every revision before and after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, SupportsIndex

import pytest
from fastapi.testclient import TestClient

from tools.service import create_app, reads


class _Counted(list[dict[str, Any]]):
    """The cached revision rows, counting the rows a request reads."""

    touched = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for row in super().__iter__():
            _Counted.touched += 1
            yield row

    def __getitem__(self, index: SupportsIndex | slice) -> Any:  # type: ignore[override]
        found = super().__getitem__(index)
        _Counted.touched += len(found) if isinstance(index, slice) else 1
        return found


def _rows_read(tmp_path: Path, revised: int) -> list[int]:
    """Rows of the cache read by three pages of 5, with `revised` revisions recorded."""
    url = f"sqlite:///{tmp_path / f'{revised}.db'}"
    with TestClient(create_app(url, clock=lambda: 10**6, mount_web=False)) as c:
        c.post("/v1/events", json={"events": [
            {"type": "consume", "account": "a", "amount": 1, "time": 10 + i, "id": f"c{i}"}
            for i in range(revised)]})
        # Paid for late: each report's debt changes, one revision each.
        c.post("/v1/events", json={"events": [
            {"type": "grant", "account": "a", "amount": 10**6, "time": 0, "id": "late"}]})
        counts = []
        for query in ("limit=5", "limit=5&after=20", "limit=5&after=20&account=a"):
            _Counted.touched = 0
            page = c.get(f"/v1/revisions?{query}").json()
            assert len(page["revisions"]) == 5 and page["next"] is not None, page
            counts.append(_Counted.touched)
    return counts


def test_a_page_of_revisions_reads_its_rows_only(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Every page listed all revisions first: paging through them cost the square of
    # their number.
    rows = reads._RevisionCache.rows
    monkeypatch.setattr(reads._RevisionCache, "rows",
                        lambda self, journal: _Counted(rows(self, journal)))
    few = _rows_read(tmp_path, 40)
    many = _rows_read(tmp_path, 400)
    assert many == few, (few, many)
