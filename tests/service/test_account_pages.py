"""`GET /v1/accounts` in pages (`after`, `limit`, a `Link` to the next page): walked
from page to page it lists every account once, in order, with the figures of the whole
list; without `limit` it is the whole list, as the contract gives it."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import MemoryJournal, NewEvent
from projections import queries
from tools.service import reads
from tools.service.app import create_app

# Valid names only: the one space a name may hold is U+0020 (`str.isprintable`); a grant
# naming an account with another space (U+00A0) is refused by the fold and opens nothing.
NAMES = st.text(st.characters(codec="utf-8", categories=("L", "N", "P"),
                              include_characters=" "),
                min_size=1, max_size=6).filter(lambda n: n == n.strip())


def _journal(names: list[str]) -> MemoryJournal:
    journal = MemoryJournal()
    journal.append([NewEvent(f"g{i}", name, "grant", i, {"account": name, "amount": i + 1})
                    for i, name in enumerate(names)])
    return journal


def _walk(client: TestClient, first: str) -> tuple[list[dict[str, Any]], int]:
    """Every page from `first` on, by each page's `Link`; the rows, and the pages read."""
    rows: list[dict[str, Any]] = []
    url: str | None = first
    pages = 0
    while url is not None:
        answer = client.get(url)
        assert answer.status_code == 200, answer.text
        rows += answer.json()
        pages += 1
        link = answer.headers.get("link")
        url = None if link is None else re.fullmatch(r'<(.+)>; rel="next"', link)[1]  # type: ignore[index]
    return rows, pages


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(NAMES, min_size=0, max_size=12, unique=True),
       limit=st.integers(1, 5), at=st.sampled_from([None, 3]))
def test_pages_walked_by_their_links_are_the_whole_list(names: list[str], limit: int,
                                                        at: int | None) -> None:
    query = "" if at is None else f"&at={at}"
    with TestClient(create_app(_journal(names), clock=lambda: 1_000,
                               mount_web=False)) as client:
        whole = client.get(f"/v1/accounts?{query}")
        assert "link" not in whole.headers
        rows, pages = _walk(client, f"/v1/accounts?limit={limit}{query}")
    assert rows == whole.json()
    # The i-th name is granted at time i: at `at`, the later ones are not opened yet.
    listed = sorted(names if at is None else names[:at + 1])
    assert [r["account"] for r in rows] == listed
    # Each page but the last is full, and no empty page follows a full last one.
    assert pages == max(1, -(-len(listed) // limit))


def test_after_lists_the_names_sorting_after_it_and_the_link_keeps_the_query() -> None:
    with TestClient(create_app(_journal(["a", "b", "c", "d"]), clock=lambda: 1_000,
                               mount_web=False)) as client:
        page = client.get("/v1/accounts", params={"limit": 2, "at": 2, "as_known_at": 3})
        assert [r["account"] for r in page.json()] == ["a", "b"]
        # As known at position 3: d is not recorded yet, and at time 2, c (granted at 2)
        # already counts.
        assert page.headers["link"] == \
            '</v1/accounts?limit=2&at=2&as_known_at=3&after=b>; rel="next"'
        last = client.get("/v1/accounts", params={"limit": 2, "at": 2, "as_known_at": 3,
                                                  "after": "b"})
        assert [r["account"] for r in last.json()] == ["c"] and "link" not in last.headers
        # `after` need not be a name the ledger holds; with no limit, all that follow.
        assert [r["account"] for r in client.get("/v1/accounts?after=bb").json()] == \
            ["c", "d"]
        assert client.get("/v1/accounts?after=d&limit=3").json() == []


# `limit` in digits, as the journal's and the revisions' pages read it: the other
# spellings of an int Python takes (`1_000`, `%2B5`, `5.0`) were read as a limit here.
@pytest.mark.parametrize("query", ["limit=0", "limit=10001", "limit=x", "after=",
                                   "limit=1_000", "limit=%2B5", "limit=5.0"])
def test_a_bad_page_is_refused(query: str) -> None:
    with TestClient(create_app(_journal(["a"]), clock=lambda: 1_000,
                               mount_web=False)) as client:
        answer = client.get(f"/v1/accounts?{query}")
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")


def test_a_long_list_is_read_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # The figures of 10^5 accounts take seconds: read on the event loop, they kept every
    # other client of the process waiting that long.
    threads: list[bool] = []
    figures_of = queries.Figures.of

    def noting(account: Any, at: int) -> queries.Figures:
        try:
            asyncio.get_running_loop()
            threads.append(True)
        except RuntimeError:
            threads.append(False)
        return figures_of(account, at)

    monkeypatch.setattr(queries.Figures, "of", noting)
    with TestClient(create_app(_journal(["a", "b", "c"]), clock=lambda: 1_000,
                               mount_web=False)) as client:
        monkeypatch.setattr(reads, "ACCOUNTS_ON_THE_LOOP", 2)
        assert len(client.get("/v1/accounts").json()) == 3
        assert threads == [False] * 3
        threads.clear()
        # So is a long page, or all the names after one (a page without its limit).
        assert len(client.get("/v1/accounts?limit=3").json()) == 3
        assert len(client.get("/v1/accounts?after=0").json()) == 3
        assert threads == [False] * 6
