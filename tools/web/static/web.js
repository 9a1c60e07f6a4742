// Draws the account page's charts with uPlot from the same JSON the page's figures tables
// are rendered from (those tables are in the HTML, read without this script); keeps the
// verification's live region busy while it runs. Everything else on the pages works
// without this script.
(function () {
  "use strict";
  // Every line's colour stands at least 3:1 against the white chart (WCAG 1.4.11).
  var COLORS = ["#1f5fbf", "#b8621b", "#2e9c5b", "#8e44ad", "#c0392b", "#16a085",
                "#7f8c8d", "#8c7a00", "#2c3e50", "#e84393", "#0984e3", "#6c5ce7"];
  // Each line of a chart has a dash pattern no other line of it has, as well as a colour:
  // lines are told apart without colour too (a printout in grey, a reader who does not
  // see the hues), debt from a balance above all. The balance chart's own lines have
  // patterns of their own; the pools' and grants' lines take the list's in turn, then
  // patterns made from their index, so no two lines of a chart ever share one.
  var AVAILABLE = [8, 4], HELD = [2, 3], DEBT = [14, 4, 2, 4];
  var DASHES = [[], [16, 5], [4, 4], [12, 3, 3, 3], [1, 4], [20, 4, 4, 4], [6, 2, 1, 2],
                [10, 3, 1, 3, 1, 3]];
  function dashOf(i) { return i < DASHES.length ? DASHES[i] : [i, 2, 1, 2]; }
  function colorOf(i) { return COLORS[i % COLORS.length]; }
  // No marker of uPlot's own (a square can only be solid, dashed or dotted): each line's
  // marker is drawn as the line is (patternMarkers).
  var legend = { markers: { show: false } };
  var SVG = "http://www.w3.org/2000/svg";
  function patternMarkers(u, series) {
    u.root.querySelectorAll(".u-legend .u-series").forEach(function (row, i) {
      if (i === 0 || !series[i]) { return; }
      var svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("class", "u-marker pattern");
      svg.setAttribute("width", "30");
      svg.setAttribute("height", "10");
      svg.setAttribute("aria-hidden", "true");
      var line = document.createElementNS(SVG, "line");
      [["x1", "0"], ["y1", "5"], ["x2", "30"], ["y2", "5"], ["stroke", series[i].stroke],
       ["stroke-width", "2"],
       ["stroke-dasharray", series[i].dash && series[i].dash.length ? series[i].dash.join(" ") : "none"]]
        .forEach(function (a) { line.setAttribute(a[0], a[1]); });
      svg.appendChild(line);
      var label = row.querySelector(".u-label");
      label.insertBefore(svg, label.firstChild);
    });
  }

  // A click on a legend's entry hides its line (uPlot's own handler on the entry's
  // cell), one more shows it. Each entry becomes a toggle button: reached with Tab,
  // pressed with Enter or Space, saying whether its line is shown. The picture alone is
  // the image (a screen reader reads nothing inside an image, so no button may be there);
  // the legend beside it is a list of buttons, not a data table.
  function keyboardLegend(u, el) {
    var wrap = u.root.querySelector(".u-wrap");
    if (wrap) {
      wrap.setAttribute("role", "img");
      wrap.setAttribute("aria-label", el.dataset.label);
      el.removeAttribute("role");
      el.removeAttribute("aria-label");
    }
    var legendTable = u.root.querySelector(".u-legend");
    if (legendTable) { legendTable.setAttribute("role", "presentation"); }
    var entries = [];
    u.root.querySelectorAll(".u-legend tr.u-series").forEach(function (row, i) {
      if (i === 0) { return; }
      var cell = row.querySelector("th");
      if (!cell) { return; }
      cell.tabIndex = 0;
      cell.setAttribute("role", "button");
      entries.push([cell, i]);
      cell.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); cell.click(); }
      });
      cell.addEventListener("click", pressed);  // after uPlot's own: every entry's state
    });
    function pressed() {
      entries.forEach(function (entry) {
        entry[0].setAttribute("aria-pressed", u.series[entry[1]].show ? "true" : "false");
      });
    }
    pressed();
  }

  function utc(ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }
  // Times as the tables show them (projections/timefmt.py, format_time): ISO 8601 in UTC
  // for epoch seconds from 2000 to 2100, any other integer as it is (a seed's t = 12 is
  // no day of 1970; uPlot's own times are M/D, local style).
  function looksLikeEpoch(ts) { return ts >= 946684800 && ts < 4102444800; }
  function iso(ts) {
    if (ts == null) { return "-"; }
    return looksLikeEpoch(ts) ? new Date(ts * 1e3).toISOString().replace(".000Z", "Z") : String(ts);
  }
  function isoTick(ts) {
    var s = iso(ts);
    if (!looksLikeEpoch(ts)) { return s; }
    return s.slice(11, 19) === "00:00:00" ? s.slice(0, 10) : s.slice(0, 10) + "\n" + s.slice(11, 16) + "Z";
  }
  var timeAxis = { space: 80, values: function (u, vs) { return vs.map(isoTick); } };
  var timeSeries = { label: "time (UTC)", value: function (u, v) { return iso(v); } };
  function fmt(v) { return v == null ? "-" : Math.round(v).toLocaleString("en-US"); }

  // The width between a sheet's margins (A4 and Letter less 12 mm each side, @page in
  // web.css), in CSS px: a chart is printed at most this wide.
  var PRINT_WIDTH = 700;
  function widthOf(el) { return Math.max(280, el.clientWidth || el.parentNode.clientWidth || 600); }

  function timelineOpts(data, el) {
    var series = [timeSeries];
    var stepped = uPlot.paths.stepped({ align: 1 });
    data.pools.forEach(function (pool, i) {
      series.push({ label: "balance " + pool, stroke: colorOf(i), width: 2,
                    dash: dashOf(i), paths: stepped, points: { show: false }, value: function (u, v) { return fmt(v); } });
    });
    series.push({ label: "available (all)", stroke: "#111111", width: 1.5, dash: AVAILABLE,
                  paths: stepped, points: { show: false }, value: function (u, v) { return fmt(v); } });
    series.push({ label: "held", stroke: "#8a5a00", width: 2, dash: HELD, paths: stepped, points: { show: false },
                  value: function (u, v) { return fmt(v); } });
    series.push({ label: "debt", stroke: "#b3261e", width: 2, dash: DEBT, paths: stepped, points: { show: false },
                  fill: "rgba(179,38,30,0.08)", value: function (u, v) { return fmt(v); } });
    var xs = [], cols = series.slice(1).map(function () { return []; });
    data.points.forEach(function (p) {
      if (p.time == null) { return; }  // the start of the timeline: no place on a time axis
      xs.push(p.time);
      data.pools.forEach(function (pool, i) { cols[i].push(p.pools[pool] || 0); });
      var n = data.pools.length;
      cols[n].push(p.available); cols[n + 1].push(p.held); cols[n + 2].push(p.debt);
    });
    return { opts: { width: widthOf(el), height: 300, tzDate: utc, padding: [null, 40, null, null], series: series, legend: legend,
                     axes: [timeAxis, { values: function (u, vs) { return vs.map(fmt); }, size: 70 }] },
             data: [xs].concat(cols) };
  }

  function burndownOpts(data, el) {
    var grants = data.grants;
    var times = {};
    grants.forEach(function (g) { g.steps.forEach(function (s) { times[s[0]] = true; }); });
    var xs = Object.keys(times).map(Number).sort(function (a, b) { return a - b; });
    var series = [timeSeries];
    var cols = [];
    var stepped = uPlot.paths.stepped({ align: 1 });
    grants.forEach(function (g, i) {
      series.push({ label: g.grant + " (" + g.pool + ")", stroke: colorOf(i),
                    width: 1.5, dash: dashOf(i), paths: stepped, points: { show: false }, spanGaps: false,
                    value: function (u, v) { return fmt(v); } });
      var col = [], k = 0, cur = null, first = g.steps.length ? g.steps[0][0] : Infinity;
      var last = g.steps.length ? g.steps[g.steps.length - 1] : null;
      xs.forEach(function (t) {
        while (k < g.steps.length && g.steps[k][0] <= t) { cur = g.steps[k][1]; k++; }
        var ended = last && last[1] === 0 && t > last[0];
        col.push(t < first || ended ? null : cur);
      });
      cols.push(col);
    });
    return { opts: { width: widthOf(el), height: 260, tzDate: utc, padding: [null, 40, null, null], series: series, legend: legend,
                     axes: [timeAxis, { values: function (u, vs) { return vs.map(fmt); }, size: 70 }] },
             data: [xs].concat(cols) };
  }

  // The chart's figures as a table (a time column, then one per line drawn), collapsed
  // after the chart, where the page did not list them (too many: pages.FIGURES_CELLS):
  // the same table the page lists for a smaller chart (templates/_tables.html).
  function figuresTable(el, built) {
    if (document.getElementById(el.id + "-figures")) { return; }  // listed by the page
    var details = document.createElement("details");
    details.className = "chart-figures";
    details.id = el.id + "-figures";
    var summary = document.createElement("summary");
    var n = built.data[0].length;
    summary.textContent = el.dataset.title + ": the figures as a table (" +
      n.toLocaleString("en-US") + " time" + (n === 1 ? "" : "s") + ")";
    details.appendChild(summary);
    var box = document.createElement("div");
    box.className = "scroll";
    box.tabIndex = 0;
    box.setAttribute("role", "region");
    box.setAttribute("aria-label", el.dataset.label + ": figures");
    var table = document.createElement("table");
    table.className = "data stack";  // one block per time on a narrow screen
    table.id = el.id + "-table";
    var caption = document.createElement("caption");
    caption.className = "sr-only";
    caption.textContent = el.dataset.label;
    table.appendChild(caption);
    var head = table.createTHead().insertRow();
    var names = built.opts.series.map(function (s, i) { return i === 0 ? "Time (UTC)" : s.label; });
    names.forEach(function (name, i) {
      var th = document.createElement("th");
      th.scope = "col";
      th.textContent = name;
      if (i > 0) { th.className = "num"; }
      head.appendChild(th);
    });
    var body = table.createTBody();
    built.data[0].forEach(function (t, row) {
      var tr = body.insertRow();
      var th = document.createElement("th");
      th.scope = "row";
      th.className = "time";
      th.textContent = iso(t);
      th.dataset.label = names[0];
      tr.appendChild(th);
      for (var c = 1; c < built.data.length; c++) {
        var td = tr.insertCell();
        td.className = "num";
        td.dataset.label = names[c];
        var v = built.data[c][row];
        td.textContent = v == null ? "" : fmt(v);
      }
    });
    box.appendChild(table);
    details.appendChild(box);
    var figure = el.closest("figure") || el;
    figure.parentNode.insertBefore(details, figure.nextSibling);
  }

  function draw(el, json) {
    el.innerHTML = "";
    var built = el.dataset.kind === "burndown" ? burndownOpts(json, el) : timelineOpts(json, el);
    // No picture: its words are read, not named as an image that is not there.
    if (!built.data[0].length) {
      el.removeAttribute("role");
      el.removeAttribute("aria-label");
      el.textContent = "Nothing to draw yet.";
      el.dataset.drawn = "empty";
      return;
    }
    var series = built.opts.series.map(function (sr) { return { stroke: sr.stroke, dash: sr.dash }; });
    var plot = new uPlot(built.opts, built.data, el);
    patternMarkers(plot, series);
    figuresTable(el, built);
    keyboardLegend(plot, el);
    el.dataset.drawn = "yes";
    var printing = false;
    var resize = function () {
      var width = printing ? Math.min(widthOf(el), PRINT_WIDTH) : widthOf(el);
      plot.setSize({ width: width, height: built.opts.height });
    };
    window.addEventListener("resize", resize);
    // Drawn for a wide window, then shrunk to the sheet, its axes' figures would print at
    // half their size: drawn anew at the sheet's width for the print, at the window's after.
    window.addEventListener("beforeprint", function () { printing = true; resize(); });
    window.addEventListener("afterprint", function () { printing = false; resize(); });
  }

  var fetched = {};
  function load(src) {
    if (!fetched[src]) {
      fetched[src] = fetch(src, { headers: { Accept: "application/json" } }).then(function (r) {
        if (!r.ok) { throw new Error("chart data: HTTP " + r.status); }
        return r.json();
      });
    }
    return fetched[src];
  }

  function init() {
    document.querySelectorAll(".chart[data-src]").forEach(function (el) {
      load(el.dataset.src).then(function (json) { draw(el, json); }, function (err) {
        el.removeAttribute("role");
        el.removeAttribute("aria-label");
        el.textContent = "The chart could not be drawn (" + err.message + "); the tables below hold the same figures.";
        el.dataset.drawn = "failed";
      });
    });
  }

  // A verification's status is swapped whole each second while it runs; the live region
  // around it stays busy until the verdict comes, which is then announced once.
  document.addEventListener("htmx:afterSettle", function () {
    var live = document.getElementById("verify-live");
    if (!live) { return; }
    var trouble = document.getElementById("verify-trouble");
    if (trouble) { trouble.remove(); }  // an answer came through: what it shows is current
    var running = live.querySelector("#verify-status[data-running]") !== null;
    live.setAttribute("aria-busy", running ? "true" : "false");
  });

  // htmx swaps nothing for an error answer (or none at all): the button would seem to do
  // nothing, and a progress shown would stand still as if current. Say so in the live
  // region, not busy, so it is announced; the same words again are not re-announced.
  function verifyTrouble(evt) {
    var live = document.getElementById("verify-live");
    var elt = evt.detail && evt.detail.elt;
    if (!live || !elt) { return; }
    var starting = elt.matches && elt.matches("form[hx-post='/journal/verify']");
    if (!starting && elt.id !== "verify-status") { return; }
    var xhr = evt.detail.xhr, why = "the service did not answer";
    if (evt.type === "htmx:responseError" && xhr) {
      why = "HTTP " + xhr.status;
      try { var problem = JSON.parse(xhr.responseText); if (problem.title) { why += ", " + problem.title; } }
      catch (e) { /* not a problem document: the status says enough */ }
    }
    var text = starting ? "The verification could not be started (" + why + "). Try again in a moment."
      : "The verification's progress could not be read (" + why + "): what is shown may be out of date. Reload the page to see where it stands.";
    var trouble = document.getElementById("verify-trouble");
    if (!trouble) {
      trouble = document.createElement("p");
      trouble.id = "verify-trouble";
      trouble.className = "problem";
      live.appendChild(trouble);
    }
    live.setAttribute("aria-busy", "false");
    if (trouble.textContent !== text) { trouble.textContent = text; }
  }
  ["htmx:responseError", "htmx:sendError", "htmx:timeout"].forEach(function (name) {
    document.addEventListener(name, verifyTrouble);
  });

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); }
  else { init(); }
})();
