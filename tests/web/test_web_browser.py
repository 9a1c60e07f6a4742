"""The web view in a real browser (Debian's Chromium through Playwright) over a real server:
click through the pages, see the charts drawn, download the CSV, redraw as known earlier,
and no console errors anywhere."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from verdicts import start_and_wait_for_verdict

from tools.web.browsing import open_settled

ACCOUNT = "lumen-health"
LATE_GRANT = 980

Page = tuple[Any, Any]


def chart_is_drawn(tab: Any, selector: str) -> None:
    """The chart's canvas exists and has pixels that are not blank."""
    tab.wait_for_selector(f"{selector}[data-drawn='yes'] canvas", timeout=20_000)
    painted = tab.evaluate(
        """(sel) => {
            const c = document.querySelector(sel + ' canvas');
            if (!c || !c.width || !c.height) return 0;
            const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0;
            for (let i = 3; i < px.length; i += 4) if (px[i] !== 0) n++;
            return n;
        }""", selector)
    assert painted > 100, f"{selector}: only {painted} painted pixels"


def test_click_from_summary_to_account_chart_and_tables(page: Page, base_url: str) -> None:
    tab, log = page
    tab.goto(base_url + "/")
    assert tab.locator("#accounts-table tbody tr").count() >= 20
    tab.get_by_role("link", name=ACCOUNT, exact=True).first.click()
    tab.wait_for_url(f"**/accounts/{ACCOUNT}")
    chart_is_drawn(tab, "#timeline-chart")
    chart_is_drawn(tab, "#burndown-chart")
    assert tab.locator("#grants-table tbody tr").count() > 0
    assert tab.locator("#ledger-table tbody tr").count() > 10
    assert log.errors == []


def test_ledger_filter_is_a_shareable_get_url(page: Page, base_url: str) -> None:
    tab, log = page
    tab.goto(f"{base_url}/accounts/{ACCOUNT}")
    tab.get_by_label("Kind").select_option("grant")
    tab.get_by_role("button", name="Filter").click()
    tab.wait_for_url("**kind=grant**")
    kinds = tab.locator("#ledger-table tbody tr td:nth-child(3)").all_inner_texts()
    assert kinds and all(k.startswith("grant") for k in kinds)
    assert log.errors == []


def test_csv_download(page: Page, base_url: str, tmp_path: Path) -> None:
    tab, log = page
    tab.goto(f"{base_url}/accounts/{ACCOUNT}?kind=consume")
    with tab.expect_download() as info:
        tab.locator("#csv-link").click()
    target = tmp_path / "ledger.csv"
    info.value.save_as(target)
    with target.open() as f:
        rows = list(csv.DictReader(f))
    assert rows and all(row["type"] == "consume" for row in rows)
    assert len(rows) == tab.locator("#ledger-table tbody tr").count()
    assert log.errors == []


def test_as_known_at_redraws_everything_and_marks_revisions(page: Page, base_url: str) -> None:
    tab, log = page
    tab.goto(f"{base_url}/accounts/{ACCOUNT}")
    chart_is_drawn(tab, "#timeline-chart")
    grants_now = tab.locator("#grants-table tbody tr").count()
    tab.get_by_label("As known at (position, or recorded time in UTC)").fill(str(LATE_GRANT - 1))
    tab.get_by_role("button", name="Redraw").click()
    tab.wait_for_url(f"**as_known_at={LATE_GRANT - 1}**")
    assert tab.locator("#known-banner").is_visible()
    chart_is_drawn(tab, "#timeline-chart")
    src = tab.locator("#timeline-chart").get_attribute("data-src")
    assert src is not None and src.endswith(f"as_known_at={LATE_GRANT - 1}")
    assert tab.locator("#grants-table tbody tr").count() < grants_now
    assert "demo42-00980" not in tab.locator("#grants-table").inner_text()
    assert tab.locator("#revisions-table tr.later").count() > 0
    tab.get_by_role("link", name="Show the journal as it stands now").click()
    tab.wait_for_selector("#known-banner", state="detached")
    assert log.errors == []


def test_ledger_line_links_to_event_and_job(page: Page, base_url: str) -> None:
    tab, log = page
    tab.goto(f"{base_url}/accounts/{ACCOUNT}?kind=complete")
    tab.locator("#ledger-table tbody tr td.detail a").first.click()
    tab.wait_for_url("**/jobs/**")
    assert tab.locator("#job-events tbody tr").count() >= 1
    tab.locator("#job-events tbody a").first.click()
    tab.wait_for_url("**/events/**")
    assert tab.locator("#event-facts").is_visible()
    assert log.errors == []


def test_journal_pages_and_background_verify(page: Page, base_url: str) -> None:
    tab, log = page
    tab.goto(base_url + "/journal")
    assert tab.locator("#journal-table tbody tr").count() == 50
    tab.get_by_role("link", name="Later →").click()
    tab.wait_for_url("**after=50**")
    assert tab.locator("#journal-table tbody tr").first.inner_text().startswith("51")
    start_and_wait_for_verdict(
        tab, tab.get_by_role("button", name="Verify the journal").click)
    assert tab.locator("#verify-status.verify-ok").count() == 1
    assert "OK" in tab.locator("#verify-status").inner_text()
    assert log.errors == []


def test_keyboard_reaches_the_controls(page: Page, base_url: str) -> None:
    tab, log = page
    tab.goto(f"{base_url}/accounts/{ACCOUNT}")
    seen = []
    for _ in range(400):
        tab.keyboard.press("Tab")
        seen.append(tab.evaluate("document.activeElement.id"))
        if seen[-1] == "csv-link":
            break
    assert "as_known_at" in seen and "f-kind" in seen and seen[-1] == "csv-link"
    tab.keyboard.press("Shift+Tab")
    tab.keyboard.press("Enter")  # the focused Filter button submits the form
    tab.wait_for_url("**/accounts/**#ledger")
    assert log.errors == []


EVERY_PAGE = ("/", f"/accounts/{ACCOUNT}", f"/accounts/{ACCOUNT}?as_known_at={LATE_GRANT - 1}",
              f"/accounts/{ACCOUNT}?kind=complete&pool=a100", "/jobs/lumen-0191",
              "/jobs/cobalt-0074", "/journal", "/journal?after=2550", f"/events/{LATE_GRANT}",
              "/events/1", "/accounts/nobody", "/jobs/nothing", "/events/0")
"""Every kind of page, the error pages included."""


def test_no_console_errors_on_any_page_at_either_width(browser: Any, base_url: str) -> None:
    errors: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":
            errors.append(message.text)

    for width in (1280, 390):
        context = browser.new_context(viewport={"width": width, "height": 900})
        tab = context.new_page()
        tab.on("console", on_console)
        tab.on("pageerror", lambda error: errors.append(f"page error: {error}"))
        try:
            for path in EVERY_PAGE:
                errors.clear()
                answer = open_settled(tab, base_url + path)
                if answer is not None and answer.status >= 400:
                    # The browser logs an error page's own status; nothing else may be logged.
                    own = f"the server responded with a status of {answer.status}"
                    errors[:] = [e for e in errors if own not in e]
                assert errors == [], f"{path} at {width} px: {errors}"
        finally:
            context.close()


def test_every_table_fits_a_narrow_screen(browser: Any, base_url: str) -> None:
    """At 390 px nothing scrolls sideways, neither the page nor any table in its box: wide
    tables are stacked, one block per row, each value beside its column's name."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    tab = context.new_page()
    try:
        for path in EVERY_PAGE:
            tab.goto(base_url + path)
            width = tab.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, f"{path} is {width} px wide at 390"
            wide = tab.evaluate("""() => [...document.querySelectorAll('table')]
                .map(t => [t.id, (t.closest('.scroll') || t.parentElement)])
                .filter(([id, box]) => box.scrollWidth > box.clientWidth + 1)
                .map(([id, box]) => id + ': ' + box.scrollWidth + ' > ' + box.clientWidth)""")
            assert wide == [], f"{path}: {wide}"
            labels = tab.evaluate("""() => [...document.querySelectorAll(
                    'table.stack td, table.stack tbody th')]
                .filter(td => !td.hasAttribute('colspan') && !td.dataset.label).length""")
            assert labels == 0, f"{path}: stacked cells without their column's name"
    finally:
        context.close()


def test_tables_and_filters_work_without_javascript(browser: Any, base_url: str) -> None:
    context = browser.new_context(java_script_enabled=False)
    tab = context.new_page()
    try:
        tab.goto(f"{base_url}/accounts/{ACCOUNT}")
        assert tab.locator("#ledger-table tbody tr").count() > 10
        tab.get_by_label("Pool", exact=True).select_option("a100")
        tab.get_by_role("button", name="Filter").click()
        tab.wait_for_url("**pool=a100**")
        pools = tab.locator("#ledger-table tbody tr td:nth-child(4)").all_inner_texts()
        assert pools and set(pools) == {"a100"}
        tab.goto(base_url + "/journal")
        tab.get_by_role("button", name="Verify the journal").click()  # a plain form post
        tab.wait_for_url("**/journal#verify")
        assert tab.locator("#verify-status").is_visible()
    finally:
        context.close()


@contextmanager
def _tabs_on(browser: Any, tmp_path: Path, lines: list[dict[str, Any]], *,
             allow_far_times: bool = False) -> Iterator[Iterator[tuple[int, str, Any]]]:
    """A service on a journal of these import lines, and a tab at each width (1280, 390
    px) in turn: (width, base URL, tab)."""
    import json

    from eventstore import Journal
    from projections.importing import import_file
    from tools.web.browsing import app_for, serving

    url = f"sqlite:///{tmp_path / 'lines.db'}"
    with Journal(url) as journal:
        import_file(journal, "\n".join(map(json.dumps, lines)).encode(), "lines.jsonl",
                    allow_far_times=allow_far_times)

    def tabs(base: str) -> Iterator[tuple[int, str, Any]]:
        for width in (1280, 390):
            context = browser.new_context(viewport={"width": width, "height": 900})
            try:
                yield width, base, context.new_page()
            finally:
                context.close()

    with serving(app_for(url)) as base:
        yield tabs(base)


def test_long_names_do_not_make_a_page_scroll_sideways(browser: Any, tmp_path: Path) -> None:
    """Names may be 200 characters without a space: they wrap, at either width."""
    account, job, pool, grant = "A" * 200, "J" * 200, "P" * 200, "G" * 200
    lines = [{"type": "grant", "account": account, "amount": 100, "time": 1793491200,
              "expiry": 1793577600, "pool": pool, "id": grant},
             {"type": "submit", "account": account, "job": job, "cost": 10, "priority": 1,
              "time": 1793491300, "pool": pool}]
    with _tabs_on(browser, tmp_path, lines) as tabs:
        for width, base, tab in tabs:
            for path in ("/", f"/accounts/{account}", f"/jobs/{job}", "/accounts/nobody",
                         "/journal", "/events/1"):
                open_settled(tab, base + path)
                wide = tab.evaluate("document.documentElement.scrollWidth")
                assert wide <= width, f"{path} is {wide} px wide at {width}"


def test_long_free_text_and_ids_keep_every_table_in_its_box(browser: Any, tmp_path: Path) -> None:
    """A memo of one long word (a URL, a hash), a long job, event or grant id and a long
    account or pool name wrap inside their cells: no table is wider than its box, at
    1280 px or at 390 px, while numbers and times stay on one line."""
    link = "https://tickets.example.com/finance/approvals/" + "0123456789abcdef" * 12
    job, account, pool = "job-" + "x" * 196, "L" * 200, "P" * 200
    lines = [{"type": "grant", "account": "a", "amount": 100, "time": 1, "id": "G" * 200,
              "memo": link},
             {"type": "consume", "account": "a", "amount": 5, "time": 2, "id": "E" * 200,
              "memo": "M" * 1000},
             {"type": "submit", "account": "a", "job": job, "cost": 5, "priority": 1,
              "time": 3, "id": "s1"},
             {"type": "grant", "account": account, "amount": 1, "time": 1, "pool": pool,
              "id": "g2", "memo": "N" * 300}]
    with _tabs_on(browser, tmp_path, lines) as tabs:
        for width, base, tab in tabs:
            for path in ("/", "/accounts/a", f"/accounts/{account}", f"/jobs/{job}",
                         "/journal", "/events/1", "/events/2", "/events/3", "/events/4"):
                open_settled(tab, base + path)
                wide = tab.evaluate("""() => [...document.querySelectorAll('table')]
                    .map(t => [t.id, t.closest('.scroll') || t.parentElement])
                    .filter(([id, box]) => box.scrollWidth > box.clientWidth + 1)
                    .map(([id, box]) => `${id}: ${box.scrollWidth} > ${box.clientWidth}`)""")
                assert wide == [], f"{path} at {width} px: {wide}"
                broken = tab.evaluate("""() => [...document.querySelectorAll(
                        'td.num, td.time, tbody th.num, tbody th.time')]
                    .filter(td => {
                        const range = document.createRange();
                        range.selectNodeContents(td);
                        const tops = [...range.getClientRects()].map(r => Math.round(r.top));
                        return new Set(tops).size > 1;
                    })
                    .map(td => td.textContent.trim())""")
                assert broken == [], f"{path} at {width} px: numbers broken over lines {broken}"


def test_the_api_docs_render_from_this_origin_alone(page: Page, base_url: str) -> None:
    """Swagger UI draws every operation under the page's policy, with no request to any
    other site and no console error (a script the policy blocked would log one)."""
    tab, log = page
    elsewhere: list[str] = []
    refused: list[str] = []
    tab.on("request", lambda r: None if r.url.startswith(base_url) else elsewhere.append(r.url))
    tab.on("response", lambda r: refused.append(f"{r.status} {r.url}") if r.status >= 400
           else None)
    tab.goto(f"{base_url}/docs")
    tab.wait_for_selector(".swagger-ui .info .title", timeout=20_000)
    assert "gpu-credits" in tab.inner_text(".swagger-ui .info .title")
    tab.wait_for_selector(".opblock-summary-path[data-path='/v1/jobs/start-next']")
    assert tab.locator(".opblock").count() >= 16
    tab.click(".opblock-summary-path[data-path='/v1/journal/head']")
    tab.click("button.try-out__btn")
    tab.click("button.execute")
    status = ".live-responses-table tr.response .response-col_status"
    tab.wait_for_selector(status)
    assert tab.inner_text(status).strip().startswith("200")
    assert elsewhere == [] and refused == [] and log.errors == []


def test_chart_figures_show_times_as_the_tables_do(browser: Any, tmp_path: Path) -> None:
    """The charts' figures tables spell a time as every table of the page does: a seed's
    small integer as it is (not a day of 1970), epoch seconds as ISO 8601."""
    lines = [{"type": "grant", "account": "a", "amount": 10, "time": 5, "expiry": 12},
             {"type": "grant", "account": "a", "amount": 7, "time": 1793491200,
              "expiry": 1793491200_000000},
             {"type": "consume", "account": "a", "amount": 3, "time": 1793491300}]
    with _tabs_on(browser, tmp_path, lines) as tabs:
        for _width, base, tab in tabs:
            times = _chart_times(tab, base + "/accounts/a")
            assert {"5", "12", "2026-11-01T00:00:00Z"} <= times, times
            assert not any(t.startswith("1970") for t in times), times


def _chart_times(tab: Any, url: str) -> set[str]:
    """The times in the figures tables of the charts of the page at `url`, once both
    charts are drawn without a script error."""
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    open_settled(tab, url)
    for chart in ("#timeline-chart", "#burndown-chart"):
        tab.wait_for_selector(f"{chart}[data-drawn='yes']", timeout=20_000)
    assert errors == []
    return set(tab.locator(".chart-figures tbody th").all_text_contents())


def test_charts_draw_times_a_browser_date_cannot_hold(browser: Any, tmp_path: Path) -> None:
    """Event times up to 2**53 - 1 are valid (far ones allowed): the charts draw them and
    their figures show the integers, where a JavaScript date (up to the year 275760)
    threw and left both charts undrawn."""
    lines = [{"type": "grant", "account": "a", "amount": 10, "time": 9007199254740000,
              "expiry": 9007199254740991},
             {"type": "consume", "account": "a", "amount": 1, "time": 9007199254740990}]
    with _tabs_on(browser, tmp_path, lines, allow_far_times=True) as tabs:
        for _width, base, tab in tabs:
            times = _chart_times(tab, base + "/accounts/a")
            assert {"9007199254740000", "9007199254740990"} <= times, times
