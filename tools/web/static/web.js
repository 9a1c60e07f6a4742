// Draws the account page's charts with uPlot from the same JSON the page links to, each
// with its figures as a table beside it; keeps the verification's live region busy while
// it runs. Everything else on the pages works without this script.
(function () {
  "use strict";
  var COLORS = ["#1f5fbf", "#d9822b", "#2e9c5b", "#8e44ad", "#c0392b", "#16a085",
                "#7f8c8d", "#b7950b", "#2c3e50", "#e84393", "#0984e3", "#6c5ce7"];
  // Each pool's or grant's line has a dash pattern as well as a colour: series are told
  // apart without colour too (a printout in grey, a reader who does not see the hues).
  var DASHES = [null, [10, 4], [3, 3], [12, 3, 3, 3], [6, 6], [3, 7], [16, 6], [8, 3, 3, 3, 3, 3]];
  function dashOf(i) { return DASHES[i % DASHES.length] || undefined; }
  // The legend's marker of each line drawn as that line is: solid, dashed or dotted.
  function markerDash(u, i) {
    var d = u.series[i].dash;
    return !d || !d.length ? "solid" : d[0] <= 3 ? "dotted" : "dashed";
  }
  var legend = { markers: { dash: markerDash } };

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

  function widthOf(el) { return Math.max(280, el.clientWidth || el.parentNode.clientWidth || 600); }

  function timelineOpts(data, el) {
    var series = [timeSeries];
    var stepped = uPlot.paths.stepped({ align: 1 });
    data.pools.forEach(function (pool, i) {
      series.push({ label: "balance " + pool, stroke: COLORS[i % COLORS.length], width: 2,
                    dash: dashOf(i), paths: stepped, points: { show: false }, value: function (u, v) { return fmt(v); } });
    });
    series.push({ label: "available (all)", stroke: "#111", width: 1.5, dash: [6, 4],
                  paths: stepped, points: { show: false }, value: function (u, v) { return fmt(v); } });
    series.push({ label: "held", stroke: "#8a5a00", width: 2, dash: [3, 2], paths: stepped, points: { show: false },
                  value: function (u, v) { return fmt(v); } });
    series.push({ label: "debt", stroke: "#b3261e", width: 1.5, paths: stepped, points: { show: false },
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
      series.push({ label: g.grant + " (" + g.pool + ")", stroke: COLORS[i % COLORS.length],
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

  // The chart's figures as a table (a time column, then one per line drawn), in a
  // collapsed <details> after the chart: what a screen reader reads instead of the
  // picture, and the exact values at every step where the chart shows only a shape.
  function figuresTable(el, built) {
    var old = document.getElementById(el.id + "-figures");
    if (old) { old.remove(); }
    var details = document.createElement("details");
    details.className = "chart-figures";
    details.id = el.id + "-figures";
    var summary = document.createElement("summary");
    summary.textContent = "The figures of this chart as a table (" + built.data[0].length.toLocaleString("en-US") +
      " time" + (built.data[0].length === 1 ? "" : "s") + ")";
    details.appendChild(summary);
    var box = document.createElement("div");
    box.className = "scroll";
    box.tabIndex = 0;
    box.setAttribute("role", "region");
    box.setAttribute("aria-label", el.getAttribute("aria-label") + ": figures");
    var table = document.createElement("table");
    table.className = "data stack";  // one block per time on a narrow screen
    var caption = document.createElement("caption");
    caption.className = "sr-only";
    caption.textContent = el.getAttribute("aria-label");
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
    var figure = el.closest("figure") || el.parentNode;
    figure.appendChild(details);
  }

  function draw(el, json) {
    el.innerHTML = "";
    var built = el.dataset.kind === "burndown" ? burndownOpts(json, el) : timelineOpts(json, el);
    if (!built.data[0].length) { el.textContent = "Nothing to draw yet."; el.dataset.drawn = "empty"; return; }
    var plot = new uPlot(built.opts, built.data, el);
    figuresTable(el, built);
    el.dataset.drawn = "yes";
    var resize = function () { plot.setSize({ width: widthOf(el), height: built.opts.height }); };
    window.addEventListener("resize", resize);
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
    var running = live.querySelector("#verify-status[data-running]") !== null;
    live.setAttribute("aria-busy", running ? "true" : "false");
  });

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", init); }
  else { init(); }
})();
