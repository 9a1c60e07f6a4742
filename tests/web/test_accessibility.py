"""The web view for auditors who use a keyboard or a screen reader, zoom the page, or print
it for a file: axe-core on every kind of page, the skip link and the focus indicator, the
verification's live region, the charts' figures as tables, reflow at 320 px and the print
stylesheet. In Debian's Chromium through Playwright, over the demo month."""

from __future__ import annotations

import json
from typing import Any
from urllib.request import urlopen

import pytest
from verdicts import start_and_wait_for_verdict

from tools.web.browsing import open_settled

ACCOUNT = "lumen-health"
Page = tuple[Any, Any]

PAGES = (
    "/",
    f"/accounts/{ACCOUNT}",
    f"/accounts/{ACCOUNT}?as_known_at=979",
    "/jobs/lumen-0191",
    "/jobs/cobalt-0074",
    "/events/980",
    "/journal",
    "/accounts/nobody",
    "/acounts/lumen-health",
    "/journal?after=x",
)
"""A page of each kind: the summary, an account (now and as known earlier), a job (paid,
rejected), an event, the journal, a 404 (an unknown account, a mistyped path) and a 422."""

SERIOUS = {"serious", "critical"}


def opened(tab: Any, url: str) -> int:
    """Open `url` and wait for its charts, if any, to be drawn; the page's status."""
    status: int = open_settled(tab, url).status
    return status


def serious_violations(tab: Any) -> list[str]:
    """axe-core's serious and critical violations on the page as it stands, one line each."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(tab)
    return [f"{v['id']} ({v['impact']}): {v['help']}: "
            + "; ".join(str(n["target"]) for n in v["nodes"][:5])
            for v in results.response["violations"] if v["impact"] in SERIOUS]


@pytest.mark.parametrize("path", PAGES)
def test_axe_finds_no_serious_violation(page: Page, base_url: str, path: str) -> None:
    tab, log = page
    status = opened(tab, base_url + path)
    # The charts' tables too, opened as a reader would.
    for summary in tab.locator("details.chart-figures > summary").all():
        summary.click()
    assert serious_violations(tab) == []
    # An error page's own status is logged as a failed load: nothing else may be.
    expected = [f"console: Failed to load resource: the server responded with a status of {status}"]
    assert [e.split(" (")[0] for e in log.errors] == (expected if status >= 400 else [])


@pytest.mark.parametrize("path", ("/", f"/accounts/{ACCOUNT}", "/jobs/lumen-0191",
                                  "/events/980", "/journal"))
def test_reflows_at_320_px(browser: Any, base_url: str, path: str) -> None:
    """At 320 px (1280 px zoomed to 400 %) nothing scrolls sideways, neither the page nor,
    on the demo month, a table in its box (wider figures would scroll there, not the
    page), and axe finds nothing serious (the stacked tables' labels, the wrapped header)."""
    context = browser.new_context(viewport={"width": 320, "height": 700})
    try:
        tab = context.new_page()
        opened(tab, base_url + path)
        outside = tab.evaluate("""() => {
            const width = document.documentElement.clientWidth, out = [];
            if (document.documentElement.scrollWidth > width) out.push('the page');
            for (const el of document.querySelectorAll('body *')) {
                if (el.closest('.scroll, .sr-only, .skip')) continue;
                if (el.getBoundingClientRect().right > width + 1)
                    out.push(el.outerHTML.slice(0, 80));
            }
            return out;
        }""")
        assert outside == []
        boxes = tab.evaluate("""() => [...document.querySelectorAll('.scroll')]
            .filter(box => box.scrollWidth > box.clientWidth + 1)
            .map(box => `${box.firstElementChild.id}: ${box.scrollWidth} > ${box.clientWidth}`)""")
        assert boxes == []
        assert serious_violations(tab) == []
    finally:
        context.close()


def test_every_table_is_named_by_its_heading(page: Page, base_url: str) -> None:
    """A screen reader's list of tables names each, as its region is named."""
    tab, _ = page
    opened(tab, f"{base_url}/accounts/{ACCOUNT}")
    for name in ("Grants", "Revisions", "Ledger"):
        assert tab.get_by_role("table", name=name, exact=True).count() == 1, name
    tab.goto(base_url + "/jobs/lumen-0191")
    unnamed = tab.evaluate("""() => [...document.querySelectorAll('table.data')]
        .filter(t => !(t.getAttribute('aria-labelledby') || '').split(' ')
            .map(id => document.getElementById(id)).some(h => h && h.textContent.trim()))
        .map(t => t.id)""")
    assert unnamed == []


def test_skip_link_is_the_first_stop_and_leads_into_main(page: Page, base_url: str) -> None:
    tab, log = page
    opened(tab, f"{base_url}/accounts/{ACCOUNT}")
    tab.keyboard.press("Tab")
    skip = tab.evaluate("""() => {
        const a = document.activeElement, r = a.getBoundingClientRect(), s = getComputedStyle(a);
        return [a.textContent, r.left >= 0 && r.top >= 0 && r.width > 0,
                s.outlineStyle, s.outlineWidth]; }""")
    assert skip == ["Skip to content", True, "solid", "3px"]
    tab.keyboard.press("Enter")
    tab.keyboard.press("Tab")
    assert tab.evaluate("() => document.activeElement.closest('main') !== null")
    assert log.errors == []


FOCUSABLE = (".top nav a", ".top .brand", "#as_known_at", "#f-kind", "button[type=submit]",
             "#csv-link", "#ledger-table a", ".scroll", "details.chart-figures > summary")
"""A control of every kind on the account page."""


OUTLINE = """() => {
    const rgb = c => c.match(/[\\d.]+/g).map(Number);
    const lum = c => { const [r, g, b] = rgb(c).slice(0, 3).map(v => v / 255)
        .map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
        return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
    const el = document.activeElement, s = getComputedStyle(el);
    let bg = el.parentElement;  // the outline is drawn beside the element, on its parent
    while (bg && (rgb(getComputedStyle(bg).backgroundColor)[3] === 0)) bg = bg.parentElement;
    const back = bg ? getComputedStyle(bg).backgroundColor : 'rgb(255, 255, 255)';
    const [hi, lo] = [lum(s.outlineColor), lum(back)].sort((a, b) => b - a);
    return [s.outlineStyle, s.outlineWidth, Math.round((hi + 0.05) / (lo + 0.05) * 100) / 100];
}"""
"""The focused element's outline style, width, and its contrast with the background
around it."""


def test_every_kind_of_control_shows_where_focus_is(page: Page, base_url: str) -> None:
    """A 3 px outline, at least 3:1 against the background it is drawn on (WCAG 1.4.11)."""
    tab, _ = page
    opened(tab, f"{base_url}/accounts/{ACCOUNT}")
    tab.keyboard.press("Tab")  # a keyboard user: focus from here on is shown
    for selector in FOCUSABLE:
        tab.locator(selector).first.focus()
        style, width, contrast = tab.evaluate(OUTLINE)
        assert (style, width) == ("solid", "3px"), selector
        assert contrast >= 3, f"{selector}: outline contrast {contrast}"


def test_verification_is_announced_and_keeps_the_focus(page: Page, base_url: str) -> None:
    """Started from the keyboard; the verdict lands in the live region that was there
    before it (a region added by a swap is not announced), no longer busy, and the focus
    stays on the button."""
    tab, log = page
    opened(tab, base_url + "/journal")
    tab.evaluate("() => { window.liveBefore = document.getElementById('verify-live'); }")
    tab.locator("#verify-button").focus()
    start_and_wait_for_verdict(tab, lambda: tab.keyboard.press("Enter"))
    assert tab.locator("#verify-status.verify-ok").count() == 1
    live = tab.evaluate("""() => { const live = document.getElementById('verify-live');
        return [live === window.liveBefore, live.getAttribute('role'),
                live.getAttribute('aria-live'), live.getAttribute('aria-busy'),
                live.contains(document.getElementById('verify-status')),
                document.querySelectorAll('[aria-live]').length,
                document.activeElement.id]; }""")
    assert live == [True, "status", "polite", "false", True, 1, "verify-button"]
    assert log.errors == []


def _timeline(tab: Any, base_url: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The account page opened in `tab`: its balance chart's JSON, and the points of it
    with a time (the ones its figures table lists)."""
    opened(tab, f"{base_url}/accounts/{ACCOUNT}")
    src = tab.locator("#timeline-chart").get_attribute("data-src")
    with urlopen(base_url + src) as r:
        data: dict[str, Any] = json.load(r)
    return data, [p for p in data["points"] if p["time"] is not None]


def test_charts_have_their_figures_as_tables_and_lines_told_apart_without_colour(
        page: Page, base_url: str) -> None:
    tab, log = page
    data, points = _timeline(tab, base_url)
    pools = data["pools"]

    figures = tab.locator("#timeline-chart-figures")
    figures.locator("summary").click()
    table = figures.get_by_role("table")
    headers = table.locator("thead th").all_inner_texts()
    assert headers == (["Time (UTC)"] + [f"balance {p}" for p in pools]
                       + ["available (all)", "held", "debt"])
    rows = table.locator("tbody tr")
    assert rows.count() == len(points)
    last = rows.nth(len(points) - 1).locator("th, td").all_inner_texts()
    final = points[-1]
    assert last[1:] == [f"{final['pools'].get(p, 0):,}" for p in pools] + [
        f"{final['available']:,}", f"{final['held']:,}", f"{final['debt']:,}"]

    burn = tab.locator("#burndown-chart-figures table thead th").all_text_contents()
    assert burn == ["Time (UTC)"] + [f"{g['grant']} ({g['pool']})" for g in data["grants"]]

    # Each pool's line has its own dash, and the legend's marker shows it.
    styles = tab.locator("#timeline-chart .u-legend .u-marker line").evaluate_all(
        "ls => ls.map(l => l.getAttribute('stroke-dasharray'))")
    assert len(pools) >= 2 and len(set(styles[:2])) == 2, styles
    assert log.errors == []


@pytest.mark.parametrize("path", ("/", f"/accounts/{ACCOUNT}", "/jobs/lumen-0191",
                                  "/events/980", "/journal"))
def test_printed_pages_hold_tables_whole_without_navigation(
        browser: Any, base_url: str, path: str) -> None:
    """As printed on A4 (about 700 CSS px between the margins): no navigation, form or
    pager; no table cut off by its scrolling box; each table's header repeated per sheet."""
    context = browser.new_context(viewport={"width": 700, "height": 1000})
    try:
        tab = context.new_page()
        opened(tab, base_url + path)
        tab.emulate_media(media="print")
        shown = tab.evaluate("""() => [...document.querySelectorAll('.skip, nav, form, .pager')]
            .filter(el => getComputedStyle(el).display !== 'none')
            .map(el => el.outerHTML.slice(0, 60))""")
        assert shown == []
        cut = tab.evaluate("""() => [...document.querySelectorAll('.scroll')]
            .filter(s => s.offsetParent !== null && s.scrollWidth > s.clientWidth + 1)
            .map(s => s.firstElementChild.id + ' ' + s.scrollWidth + '/' + s.clientWidth)""")
        assert cut == []
        assert tab.evaluate("() => document.documentElement.scrollWidth") <= 700
        heads = tab.locator("table.data thead").evaluate_all(
            "hs => hs.map(h => getComputedStyle(h).display)")
        assert heads and set(heads) == {"table-header-group"}
    finally:
        context.close()


LINES = """chart => [...document.querySelectorAll(`#${chart} .u-legend .u-series`)].slice(1)
    .map(row => { const line = row.querySelector('.u-marker line');
        return [row.querySelector('.u-label').textContent,
                line ? line.getAttribute('stroke-dasharray') : null,
                line ? getComputedStyle(line).stroke : null]; })"""
"""Each line of a chart as its legend shows it: label, dash pattern, colour."""

CONTRAST_ON_WHITE = """c => { const [r, g, b] = c.match(/[\\d.]+/g).slice(0, 3).map(Number)
    .map(v => v / 255).map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 1.05 / (0.2126 * r + 0.7152 * g + 0.0722 * b + 0.05); }"""


@pytest.mark.parametrize("chart", ("timeline-chart", "burndown-chart"))
def test_every_line_of_a_chart_has_a_pattern_of_its_own_shown_in_its_legend(
        page: Page, base_url: str, chart: str) -> None:
    """Debt is not told from a balance by its colour alone, nor any line from another:
    each is drawn with a dash pattern no other line of the chart has, its legend marker
    draws that pattern, and its colour stands 3:1 against the white chart (WCAG 1.4.11)."""
    tab, log = page
    opened(tab, f"{base_url}/accounts/{ACCOUNT}")
    lines = tab.evaluate(LINES, chart)
    assert len(lines) >= 3, lines
    patterns = [pattern for _, pattern, _ in lines]
    assert None not in patterns, lines
    assert len(set(patterns)) == len(patterns), lines
    for label, _, colour in lines:
        assert tab.evaluate(CONTRAST_ON_WHITE, colour) >= 3, (label, colour)
    assert log.errors == []


def test_an_account_page_without_javascript_shows_its_figures(browser: Any,
                                                             base_url: str) -> None:
    """The charts are not drawn, but their figures are in the page: the tables open from
    the keyboard as they do with the script."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  java_script_enabled=False)
    try:
        tab = context.new_page()
        tab.goto(f"{base_url}/accounts/{ACCOUNT}")
        for chart in ("timeline-chart", "burndown-chart"):
            figures = tab.locator(f"#{chart}-figures")
            figures.locator("summary").focus()
            tab.keyboard.press("Enter")
            table = figures.get_by_role("table")
            assert table.is_visible()
            assert table.locator("tbody tr").count() > 1
        assert tab.get_by_role("table", name="Ledger", exact=True).locator("tbody tr").count() > 1
        # No blank box where a chart would be, and no picture a screen reader would name
        # that is not there.
        assert tab.evaluate("""() => [...document.querySelectorAll('.chart')]
            .map(c => getComputedStyle(c).display)""") == ["none", "none"]
        assert tab.get_by_role("img").count() == 0
    finally:
        context.close()


def test_a_chart_s_figures_opened_print_and_closed_do_not(browser: Any, base_url: str) -> None:
    """A page prints what it shows: the balance chart's figures, opened, print with it;
    the burn-down's, left closed, print as its picture only."""
    context = browser.new_context(viewport={"width": 700, "height": 1000})
    try:
        tab = context.new_page()
        opened(tab, f"{base_url}/accounts/{ACCOUNT}")
        tab.locator("#timeline-chart-figures > summary").click()
        tab.emulate_media(media="print")
        shown = tab.evaluate("""() => ['timeline-chart-figures', 'burndown-chart-figures']
            .map(id => getComputedStyle(document.getElementById(id)).display)""")
        assert shown[0] != "none" and shown[1] == "none", shown
        assert tab.locator("#timeline-chart-table tbody tr").last.is_visible()
        cut = tab.evaluate("""() => {
            const s = document.querySelector('#timeline-chart-figures .scroll');
            return [s.scrollHeight - s.clientHeight, s.scrollWidth - s.clientWidth]; }""")
        assert cut == [0, 0]
    finally:
        context.close()


def test_a_verification_the_service_cannot_start_is_said_in_the_live_region(
        page: Page, base_url: str) -> None:
    """htmx swaps nothing for an error answer: without a word in the live region the button
    would seem to do nothing. The answer's status is said there, and announced (not busy);
    a later answer that comes through takes the word away."""
    tab, log = page
    opened(tab, base_url + "/journal")
    tab.route("**/journal/verify", lambda route: route.fulfill(
        status=503, content_type="application/problem+json",
        body='{"title": "Database unavailable", "status": 503}'))
    tab.locator("#verify-button").focus()
    tab.keyboard.press("Enter")
    trouble = tab.locator("#verify-live #verify-trouble")
    trouble.wait_for()
    assert "503" in trouble.inner_text() and "could not be started" in trouble.inner_text()
    assert tab.evaluate("""() => [document.getElementById('verify-live').getAttribute('aria-busy'),
        document.activeElement.id]""") == ["false", "verify-button"]
    tab.unroute("**/journal/verify")
    start_and_wait_for_verdict(tab, lambda: tab.keyboard.press("Enter"))
    assert trouble.count() == 0
    assert [e for e in log.errors if "503" not in e] == []


BROKEN_WORDS = """selector => {
    const broken = [];
    for (const el of document.querySelectorAll(selector)) {
        const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
        for (let node = walk.nextNode(); node; node = walk.nextNode()) {
            for (const m of node.data.matchAll(/\\S+/g)) {
                const range = document.createRange();
                range.setStart(node, m.index);
                range.setEnd(node, m.index + m[0].length);
                const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                if (tops.size > 1) broken.push(m[0]);
            }
        }
    }
    return broken; }"""
"""The words of the elements `selector` picks that are split over two lines."""


def test_printed_tables_keep_their_short_words_whole(browser: Any, base_url: str) -> None:
    """On the sheet, the tables are squeezed to its width: ids and free text may break
    anywhere, but a column's name and a link such as "before it" keep their words whole."""
    context = browser.new_context(viewport={"width": 700, "height": 1000})
    try:
        tab = context.new_page()
        opened(tab, f"{base_url}/accounts/{ACCOUNT}?as_known_at={979}")
        tab.emulate_media(media="print")
        assert tab.evaluate(BROKEN_WORDS, "table.data thead th, table.data td.words") == []
    finally:
        context.close()


def test_a_chart_s_lines_are_hidden_and_shown_from_the_keyboard(page: Page,
                                                                base_url: str) -> None:
    """A click on a legend's entry hides its line, and one more shows it: from the
    keyboard too, each entry a toggle button (outside the picture, whose content a
    screen reader does not read) that says whether its line is shown."""
    tab, log = page
    opened(tab, f"{base_url}/accounts/{ACCOUNT}")
    entries = tab.locator("#timeline-chart .u-legend tr.u-series [role=button]")
    lines = tab.evaluate(LINES, "timeline-chart")
    assert entries.count() == len(lines)
    assert tab.evaluate("""() => [...document.querySelectorAll('.u-legend [role=button]')]
        .filter(b => b.closest('[role=img]') || b.tabIndex !== 0).length""") == 0
    debt = entries.nth(len(lines) - 1)
    assert "debt" in debt.inner_text() and debt.get_attribute("aria-pressed") == "true"
    tab.keyboard.press("Tab")  # from the keyboard: focus is shown from here on
    debt.focus()
    style, width, contrast = tab.evaluate(OUTLINE)
    assert (style, width) == ("solid", "3px") and contrast >= 3
    tab.keyboard.press("Enter")
    row = tab.locator("#timeline-chart .u-legend tr.u-series").nth(len(lines))
    assert "u-off" in (row.get_attribute("class") or "")
    assert debt.get_attribute("aria-pressed") == "false"
    tab.keyboard.press(" ")
    assert "u-off" not in (row.get_attribute("class") or "")
    assert debt.get_attribute("aria-pressed") == "true"
    assert tab.evaluate("() => document.activeElement.getAttribute('role')") == "button"
    assert tab.locator("#timeline-chart [role=img]").count() == 1
    assert log.errors == []


def test_a_chart_that_could_not_be_drawn_says_so_to_a_screen_reader(
        page: Page, base_url: str) -> None:
    """Its words are not inside an image, whose content a screen reader does not read."""
    tab, _ = page
    tab.route("**/timeline.json*", lambda route: route.fulfill(
        status=503, content_type="application/problem+json", body="{}"))
    opened(tab, f"{base_url}/accounts/{ACCOUNT}")
    chart = tab.locator("#timeline-chart")
    assert "could not be drawn" in chart.inner_text()
    assert chart.get_attribute("role") is None
    assert tab.get_by_role("img").count() == 0


def test_a_chart_printed_from_a_wide_window_is_drawn_at_the_sheet_s_width(
        page: Page, base_url: str) -> None:
    """Drawn for a 1,240 px window and shrunk to a sheet's 700 px, its axes' figures
    printed at half their size; it is drawn anew at the sheet's width for the print, and
    at the window's again after."""
    tab, log = page
    opened(tab, f"{base_url}/accounts/{ACCOUNT}")
    widths = """() => [...document.querySelectorAll('.chart .u-wrap')].map(w => w.offsetWidth)"""
    before = tab.evaluate(widths)
    assert len(before) == 2 and min(before) > 1000, before
    tab.evaluate("() => window.dispatchEvent(new Event('beforeprint'))")
    assert max(tab.evaluate(widths)) <= 700
    tab.evaluate("() => window.dispatchEvent(new Event('afterprint'))")
    assert tab.evaluate(widths) == before
    assert log.errors == []


def test_a_printed_chart_s_legend_names_its_lines_without_the_pointer_s_readings(
        browser: Any, base_url: str) -> None:
    """On screen the legend shows the figures under the pointer; on paper there is no
    pointer, only a column of dashes: the legend prints each line's pattern and name."""
    context = browser.new_context(viewport={"width": 700, "height": 1000})
    try:
        tab = context.new_page()
        opened(tab, f"{base_url}/accounts/{ACCOUNT}")
        tab.emulate_media(media="print")
        shown = tab.evaluate("""() => [...document.querySelectorAll('.chart .u-legend')]
            .map(l => l.innerText.replace(/\\s+/g, ' ').trim())""")
        assert len(shown) == 2 and all("balance a100" in s or "(a100)" in s for s in shown)
        assert [s for s in shown if "-" in s.replace("demo42-", "") or "time" in s] == []
    finally:
        context.close()


def test_the_script_lists_the_figures_of_a_chart_the_page_does_not(
        page: Page, base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past `FIGURES_CELLS` the page does not list a chart's figures: the script does, as
    the page would have, from the chart's JSON."""
    from tools.web import pages

    monkeypatch.setattr(pages, "FIGURES_CELLS", 500)
    tab, log = page
    _, points = _timeline(tab, base_url)
    figures = tab.locator("#timeline-chart-figures")
    assert figures.locator("summary").inner_text() == (
        f"Balance over time: the figures as a table ({len(points)} times)")
    figures.locator("summary").click()
    table = figures.get_by_role("table")
    assert table.locator("tbody tr").count() == len(points)
    assert table.locator("tbody tr").last.locator("th").inner_text() == (
        tab.evaluate("t => new Date(t * 1000).toISOString().replace('.000Z', 'Z')",
                     points[-1]["time"]))
    assert tab.locator("#burndown-chart-figures").count() == 1  # listed by the page
    assert serious_violations(tab) == []
    assert log.errors == []
