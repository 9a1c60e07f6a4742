"""The account page's links and forms, with its three tables paged at once: every link
the page itself makes is one it takes (never a 422), and moving through one table's
pages keeps the page shown of the others, the filters and the view's position."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

import pytest
from fastapi.testclient import TestClient

from eventstore import MemoryJournal
from tools.service.app import create_app

NAME = "lab/α b+c&d"  # a slash, beyond ASCII, a space, a plus and an ampersand
N = 101  # one more than a page of grants (100) and of revisions (100); 2N+1 ledger rows


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """An account with N grants, N usage reports (two ledger pages) and a late report
    that revised N of them (two pages of revisions): two pages of each table are enough
    for every pager's links, and a third made the crawl twice as long."""
    journal = MemoryJournal()
    with TestClient(create_app(journal, clock=lambda: 10**6)) as c:
        events = [{"type": "grant", "account": NAME, "amount": 1, "time": 100 + i,
                   "id": f"g{i:03}"} for i in range(N)]
        events += [{"type": "consume", "account": NAME, "amount": 1, "time": 1000 + i,
                    "id": f"u{i:03}"} for i in range(N)]
        assert c.post("/v1/events", json={"events": events}).status_code == 200
        late = {"type": "consume", "account": NAME, "amount": 300, "time": 50, "id": "late"}
        assert c.post("/v1/events", json={"events": [late]}).status_code == 200
        yield c


LINK = re.compile(r'(?:href|data-src|hx-get|action)="([^"]*)"')
FORM = re.compile(r"<form\b[^>]*>.*?</form>", re.S)


def links_of(url: str, page: str, under: str = "/") -> list[str]:
    """Every URL of this site under `under` the page links to, and each GET form as
    submitted."""
    found = []
    for raw in LINK.findall(page):
        link = html.unescape(raw)
        if link.startswith("/") and not link.startswith(under):
            # A path of its own, elsewhere (each ledger row's event): it resolves to
            # itself, so it is left before the join, most of the time a page took here.
            continue
        target = urljoin(url, link).split("#")[0]
        if target.startswith(under) and not target.startswith("/static/"):
            found.append(target)
    for form in FORM.findall(page):
        if 'method="get"' not in form:
            continue
        action = re.search(r'action="([^"]*)"', form)
        fields = [(html.unescape(name), html.unescape(value)) for name, value in re.findall(
            r'<(?:input|select)[^>]*\bname="([^"]*)"(?:[^>]*\bvalue="([^"]*)")?', form)]
        base = urljoin(url, html.unescape(action.group(1)) if action else url)
        target = f"{base.split('#')[0]}?{urlencode(fields)}"
        if target.startswith(under):
            found.append(target)
    return found


def test_every_link_of_the_account_pages_is_taken(client: TestClient) -> None:
    account = f"/accounts/{NAME.replace('/', '%2F')}"
    start = [account, f"{account}?as_known_at={N + 20}", f"{account}?page=1&grants_page=1",
             f"{account}?kind=consume&revisions_page=1&as_known_at={N + 80}"]
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    queue = list(start)
    while queue:
        url = queue.pop()
        # Pagers and forms write one state's parameters in different orders: a state
        # is taken once, whatever the order (the same state reached seven ways before).
        parts = urlsplit(url)
        state = (parts.path, tuple(sorted(parse_qsl(parts.query, keep_blank_values=True))))
        if state in seen or not url.startswith("/accounts/"):
            continue
        seen.add(state)
        r = client.get(url)
        assert r.status_code == 200, (url, r.text[:500])
        if r.headers["content-type"].startswith("text/html"):
            queue += links_of(url, r.text, under="/accounts/")
    assert len(seen) > 20
    reached = {pair for _, query in seen for pair in query}
    assert {("page", "2"), ("grants_page", "2"), ("revisions_page", "2")} <= reached


def test_the_ledger_pager_keeps_the_pages_of_grants_and_revisions(
        client: TestClient) -> None:
    account = f"/accounts/{NAME.replace('/', '%2F')}"
    r = client.get(f"{account}?grants_page=1&revisions_page=2&page=2")
    assert r.status_code == 200
    ledger = re.search(r'<nav class="pager" aria-label="Ledger pages">.*?</nav>', r.text, re.S)
    assert ledger is not None
    for href in re.findall(r'href="([^"]*)"', ledger.group(0)):
        query = dict(parse_qsl(urlsplit(html.unescape(href)).query))
        assert query.get("grants_page") == "1" and query.get("revisions_page") == "2", href


def test_a_page_of_revisions_asked_while_they_are_still_being_found(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A link to the second page of revisions, followed while a restarted view still
    replays the journal in the background, shows the page without them, as the first
    page does, not a 422 saying there is only one page."""
    import threading

    from projections.revisionlog import RevisionLog
    from tools.web import source as source_module

    monkeypatch.setattr(source_module, "SYNC_REPLAY_LIMIT", 10)
    release = threading.Event()
    found = RevisionLog.revisions

    def slow(self: RevisionLog) -> object:
        release.wait(30)
        return found(self)

    monkeypatch.setattr(RevisionLog, "revisions", slow)
    journal = MemoryJournal()
    try:
        with TestClient(create_app(journal, clock=lambda: 10**6)) as c:
            events = [{"type": "grant", "account": "a", "amount": 1, "time": 100 + i,
                       "id": f"g{i:03}"} for i in range(20)]
            assert c.post("/v1/events", json={"events": events}).status_code == 200
            for query in ("", "?revisions_page=2"):
                r = c.get(f"/accounts/a{query}")
                assert r.status_code == 200, r.text[:500]
                assert "Revisions are still being found" in r.text
            assert c.get("/accounts/a?revisions_page=0").status_code == 422
            assert c.get("/accounts/a?revisions_page=x").status_code == 422
            release.set()
    finally:
        release.set()


def test_a_view_as_known_at_the_head_pages_on_as_the_journal_stands(
        client: TestClient) -> None:
    """`as_known_at` the head is the journal as it stands: every pager leaves it out, as
    the ledger's always did, so a later page is not pinned to a position the journal
    has since moved past."""
    account = f"/accounts/{NAME.replace('/', '%2F')}"
    head = client.get("/v1/journal/head").json()["position"]
    r = client.get(f"{account}?as_known_at={head}&page=2")
    assert r.status_code == 200
    navs = re.findall(r'<nav class="pager" aria-label="(\w+) pages">(.*?)</nav>', r.text, re.S)
    assert {name for name, _ in navs} == {"Grant", "Revision", "Ledger"}
    for name, nav in navs:
        for href in re.findall(r'href="([^"]*)"', nav):
            assert "as_known_at" not in html.unescape(href), (name, href)
    earlier = client.get(f"{account}?as_known_at={head - 1}&page=2")
    for name, nav in re.findall(r'<nav class="pager" aria-label="(\w+) pages">(.*?)</nav>',
                                earlier.text, re.S):
        for href in re.findall(r'href="([^"]*)"', nav):
            assert f"as_known_at={head - 1}" in html.unescape(href), (name, href)
