"""What the pages hold in their HTML, for a reader whose browser runs no script, a screen
reader, or a printout: the charts' figures as tables, the filters a ledger was cut by,
titles that say which view it is, and ids that stay unique. Over the demo month, through
the service's app (no browser)."""

from __future__ import annotations

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
