"""What the pages hold in their HTML, for a reader whose browser runs no script, a screen
reader, or a printout: the charts' figures as tables, the filters a ledger was cut by,
titles that say which view it is, and ids that stay unique. Over the demo month, through
the service's app (no browser)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient
from pagetext import cells

from projections.timefmt import format_time

ACCOUNT = "lumen-health"
LATE_GRANT = 980


def test_the_balance_chart_s_figures_are_a_table_in_the_page(client: TestClient) -> None:
    """Every point the chart draws, each pool's balance, available, held and debt: in the
    page itself, so they are read without the script that draws the chart."""
    html = client.get(f"/accounts/{ACCOUNT}").text
    data = client.get(f"/accounts/{ACCOUNT}/timeline.json").json()
    points = [p for p in data["points"] if p["time"] is not None]
    pools = data["pools"]
    rows = cells(html, "timeline-chart-table")
    assert len(rows) == len(points) > 1
    for row, p in zip(rows, points, strict=True):
        figures = [p["pools"].get(pool, 0) for pool in pools] + [p["available"], p["held"],
                                                                 p["debt"]]
        assert row == [format_time(p["time"])] + [f"{v:,}" for v in figures]
    assert 'id="timeline-chart-figures"' in html
    head = html.split('id="timeline-chart-table"')[1].split("</thead>")[0]
    assert [f">balance {pool}<" in head for pool in pools] == [True] * len(pools)


def test_the_burn_down_s_figures_are_a_table_in_the_page(client: TestClient) -> None:
    """Each grant's column holds what remained of it at each of its steps, and nothing
    before it was granted."""
    html = client.get(f"/accounts/{ACCOUNT}").text
    data = client.get(f"/accounts/{ACCOUNT}/timeline.json").json()
    rows = cells(html, "burndown-chart-table")
    times = sorted({s[0] for g in data["grants"] for s in g["steps"]})
    assert [r[0] for r in rows] == [format_time(t) for t in times]
    for column, grant in enumerate(data["grants"], start=1):
        by_time = {format_time(t): f"{left:,}" for t, left in grant["steps"]}
        shown = {r[0]: r[column] for r in rows}
        for t, left in by_time.items():
            assert shown[t] == left, (grant["grant"], t)
        first = format_time(grant["steps"][0][0])
        assert all(r[column] == "" for r in rows[:[r[0] for r in rows].index(first)])
    head = html.split('id="burndown-chart-table"')[1].split("</thead>")[0]
    for grant in data["grants"]:
        assert f"{grant['grant']} ({grant['pool']})" in head


def test_a_figures_table_escapes_the_names_it_labels_its_cells_with() -> None:
    from tools.web.templating import figure_rows

    html = str(figure_rows(['g"><script>x</script> (a100)'], [(12, [None]), (13, [1234])]))
    assert "<script>" not in html and "&#34;&gt;&lt;script&gt;" in html
    assert html.count("<tr>") == 2 and '<td class="num"' in html and ">1,234</td>" in html
    assert '<th scope="row" class="time" data-label="Time (UTC)">12</th>' in html


def _paragraph(html: str, pid: str) -> str:
    found = re.search(rf'<p[^>]*id="{pid}"[^>]*>(.*?)</p>', html, re.S)
    assert found, f"no paragraph {pid}"
    return " ".join(re.sub(r"<[^>]+>", "", found.group(1)).split())


def test_a_filtered_ledger_says_what_it_was_filtered_by_outside_its_form(
        client: TestClient) -> None:
    """The filters' form is not printed: the line that counts the ledger's lines names
    the filters, so a printed statement says which lines it holds."""
    html = client.get(f"/accounts/{ACCOUNT}?pool=a100&kind=consume"
                      "&from=2026-11-05T00:00:00Z&to=2026-11-20T12:00:00Z").text
    note = _paragraph(html, "ledger-note")
    for said in ("pool a100", "kind consume", "from 2026-11-05T00:00:00Z",
                 "to 2026-11-20T12:00:00Z"):
        assert said in note, note
    whole = _paragraph(client.get(f"/accounts/{ACCOUNT}").text, "ledger-note")
    assert "pool" not in whole and "kind" not in whole, whole


def test_a_page_s_title_says_which_view_it_is(client: TestClient) -> None:
    """The title, a printout's header and a tab's name, tells an account as known earlier
    from the account now, and one page of the journal from another."""
    def title(path: str) -> str:
        found = re.search(r"<title>(.*?)</title>", client.get(path).text, re.S)
        assert found
        return found.group(1)

    assert title(f"/accounts/{ACCOUNT}").startswith(f"Account {ACCOUNT} ·")
    assert title(f"/accounts/{ACCOUNT}?as_known_at={LATE_GRANT - 1}").startswith(
        f"Account {ACCOUNT} as known at #{LATE_GRANT - 1:,} ·")
    assert title("/journal?after=50").startswith("Journal, events 51 to 100 ·")
    assert title("/?q=lumen").startswith("Accounts matching lumen ·")
    # The heading stays the page's name: the view is said below it.
    assert "<h1>Journal</h1>" in client.get("/journal?after=50").text
    assert "<h1>Accounts</h1>" in client.get("/?q=lumen").text


class _Rows(HTMLParser):
    """Per table id: for each body row, how many of its cells are row headers."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[int]] = {}
        self.table: str | None = None
        self.in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table":
            self.table = a.get("id") or "?"
            self.tables[self.table] = []
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body and self.table:
            self.tables[self.table].append(0)
        elif tag == "th" and self.in_body and self.table and a.get("scope") == "row":
            self.tables[self.table][-1] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self.in_body = False


ROW_HEADED = {
    "/": ("accounts-table", "expiring-table"),
    f"/accounts/{ACCOUNT}": ("grants-table", "ledger-table", "revisions-table",
                             "timeline-chart-table", "burndown-chart-table"),
    "/jobs/lumen-0191": ("job-events", "paid-by"),
    "/events/980": ("fields-table", "changed-table"),
    "/journal": ("journal-table", "revisions-table"),
}


@pytest.mark.parametrize("path", ROW_HEADED)
def test_every_row_of_a_table_has_a_header_a_screen_reader_names_it_by(
        client: TestClient, path: str) -> None:
    """Moving down a column, a screen reader says which row it is in: a ledger line's
    time, a grant's id, an event's position; not the bare figure."""
    parser = _Rows()
    parser.feed(client.get(path).text)
    for table in ROW_HEADED[path]:
        rows = parser.tables[table]
        assert rows and rows == [1] * len(rows), (table, rows[:10])


class _Links(HTMLParser):
    """Each link's visible text and its aria-label, where it has one."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[list[str]] = []
        self.open = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            label = dict(attrs).get("aria-label")
            self.open = label is not None
            if self.open:
                self.links.append([label or "", ""])

    def handle_data(self, data: str) -> None:
        if self.open:
            self.links[-1][1] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self.open = False


def test_a_link_s_spoken_name_holds_the_text_it_shows(client: TestClient) -> None:
    """A speech user says what they see ("click 1,026"): a link named for a screen reader
    holds its visible text (WCAG 2.5.3), thousands separator and all."""
    parser = _Links()
    parser.feed(client.get(f"/accounts/{ACCOUNT}").text)
    assert parser.links and any("," in text for _, text in parser.links)
    for label, text in parser.links:
        assert text.strip() in label, (label, text)


def test_a_search_of_the_accounts_says_what_it_searched_for_outside_its_form(
        client: TestClient) -> None:
    """The search form is not printed: the count of accounts found names the search."""
    note = _paragraph(client.get("/?q=lumen").text, "accounts-note")
    assert "match “lumen”" in note, note
    assert "match" not in _paragraph(client.get("/").text, "accounts-note")


class _Ids(HTMLParser):
    """Every id of a page, and every id its labels and ARIA attributes point to."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.pointed: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(a["id"] or "")
        for name in ("aria-labelledby", "aria-describedby", "aria-controls", "for"):
            self.pointed += (a.get(name) or "").split()


@pytest.mark.parametrize("path", (
    "/", "/?q=lumen", f"/accounts/{ACCOUNT}", f"/accounts/{ACCOUNT}?as_known_at=979",
    "/jobs/lumen-0191", "/jobs/cobalt-0074", "/events/980", "/journal", "/accounts/nobody"))
def test_ids_are_unique_and_what_names_a_thing_points_at_it(client: TestClient,
                                                           path: str) -> None:
    """As served, and with the verification's status swapped in as htmx swaps it (by the
    button's post or the poll): one element per id, and every label, heading or control
    an attribute names is there."""
    html = client.get(path, headers={"accept": "text/html"}).text
    pages = [html]
    if 'id="verify-status"' in html:
        fragment = client.get("/journal/verify").text
        start = html.index('<div id="verify-status"')
        end = html.index("</div>", start) + len("</div>")
        assert html[start:end].count("<div") == 1  # the status holds no div of its own
        pages.append(html[:start] + fragment + html[end:])
    for page in pages:
        parser = _Ids()
        parser.feed(page)
        assert sorted({i for i in parser.ids if parser.ids.count(i) > 1}) == []
        assert [i for i in parser.pointed if i not in parser.ids] == []


def test_each_chart_s_figures_open_from_a_control_named_for_that_chart(
        client: TestClient) -> None:
    """A screen reader's list of controls tells the balance chart's table from the
    burn-down's."""
    html = client.get(f"/accounts/{ACCOUNT}").text
    names = [" ".join(re.sub(r"<[^>]+>", "", s).split())
             for s in re.findall(r"<summary>(.*?)</summary>", html, re.S)]
    assert len(names) == 2 and names[0].startswith("Balance over time: the figures as a table")
    assert names[1].startswith("Grant burn-down: the figures as a table")


@pytest.mark.parametrize(("path", "title"), (
    ("/accounts/nobody", "Unknown account: account nobody ·"),
    (f"/accounts/{ACCOUNT}?kind=nothing", f"Bad filter: account {ACCOUNT} ·"),
    ("/jobs/no-such-job", "Unknown job: job no-such-job ·"),
    ("/events/999999", "No such event: event #999,999 ·"),
))
def test_an_error_page_s_title_names_what_was_asked_for(client: TestClient, path: str,
                                                        title: str) -> None:
    """A tab or a printout of an error page says which account, job or event it was."""
    html = client.get(path).text
    found = re.search(r"<title>(.*?)</title>", html, re.S)
    assert found and found.group(1).startswith(title), found and found.group(1)
    assert f"<h1>{title.split(':')[0]}</h1>" in html


def test_a_ledger_prints_whole_from_its_all_lines_page(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """A page of the ledger prints that page: for a whole statement on paper the ledger's
    pager links to every line on one page, filters kept, which prints them all."""
    from projections.queries import statement
    from tools.web import pages

    monkeypatch.setattr(pages, "LEDGER_PAGE", 50)
    every = statement(client.app.state.ledger.journal, ACCOUNT).lines  # type: ignore[attr-defined]
    paged = client.get(f"/accounts/{ACCOUNT}").text
    assert f'href="/accounts/{ACCOUNT}?page=all#ledger"' in paged
    whole = client.get(f"/accounts/{ACCOUNT}?page=all")
    assert whole.status_code == 200
    rows = cells(whole.text, "ledger-table")
    assert [r[5] for r in rows] == [f"{line.balance:,}" for line in every]
    assert 'aria-label="Ledger pages"' not in whole.text  # one page: no pager
    note = _paragraph(whole.text, "ledger-note")
    assert note.startswith(f"{len(every):,} matching"), note
    assert f'href="/accounts/{ACCOUNT}#ledger">The ledger 50 lines a page' in whole.text
    kinds = cells(client.get(f"/accounts/{ACCOUNT}?kind=complete&page=all").text,
                  "ledger-table")
    assert kinds and {r[2].split()[0] for r in kinds} == {"complete"}
    monkeypatch.setattr(pages, "ALL_LINES", 100)
    too_many = client.get(f"/accounts/{ACCOUNT}?page=all")
    assert too_many.status_code == 422 and "ledger.csv" in too_many.text
    assert "?page=all" not in client.get(f"/accounts/{ACCOUNT}").text


def test_a_chart_of_many_times_leaves_its_figures_to_the_script(
        client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """Listed in the page, the figures of an account of 10,000 events made it 4 MB: past
    `FIGURES_CELLS` cells the page says how many times there are and the script lists
    them, as it draws the chart, from the chart's JSON."""
    from tools.web import pages

    monkeypatch.setattr(pages, "FIGURES_CELLS", 500)  # the burn-down (48 x 5) stays
    html = client.get(f"/accounts/{ACCOUNT}").text
    assert 'id="timeline-chart-table"' not in html and 'id="burndown-chart-table"' in html
    note = _paragraph(html, "timeline-chart-figures-note")
    assert "164 times" in note and "timeline.json" in html, note
