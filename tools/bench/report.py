"""Writing the results: `docs/benchmarks.md` (machine, command, tables, targets, profiles)
and the throughput chart (matplotlib, Agg backend, log-log)."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from tools.bench.runner import Config, Results, Scenario, Stat, Target, evaluate, fmt_ratio


@dataclass
class Meta:
    """What the report says about the run itself."""

    command: str
    started: str  # UTC, ISO format
    seconds: float
    pg_version: str | None
    pg_where: str
    scenarios: list[str]
    commit: str  # read when the run starts, before the run writes the chart


# -- the machine -------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def commit() -> str:
    """The checked-out commit, and whether the work tree differs from it."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + (" (with uncommitted changes in the work tree)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def machine_rows(meta: Meta) -> list[tuple[str, str]]:
    return [
        ("CPU", f"{_cpu_model()}, {os.cpu_count()} cores (shared, noisy: compare ratios "
                "from the same run rather than absolute rates)"),
        ("memory", _memory()),
        ("OS", platform.platform()),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
        ("SQLite", f"{sqlite3.sqlite_version} (Python's sqlite3 module)"),
        ("PostgreSQL", f"{meta.pg_version} at {meta.pg_where}" if meta.pg_version
         else f"not reachable at {meta.pg_where}: PostgreSQL cases skipped"),
        ("packages", ", ".join(f"{d} {_version(d)}" for d in
                               ("SQLAlchemy", "psycopg", "eventsourcing", "matplotlib"))),
        ("commit", meta.commit),
    ]


# -- numbers ------------------------------------------------------------------------------


def fmt_rate(x: float) -> str:
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 1:
        return f"{x:.1f}"
    return f"{x:.3g}"


def fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.1f} µs"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- the markdown ---------------------------------------------------------------------------


def verdicts(scenarios: Sequence[Scenario], results: Results,
             cfg: Config) -> list[tuple[Scenario, Target, str, bool | None]]:
    out: list[tuple[Scenario, Target, str, bool | None]] = []
    for sc in scenarios:
        for target in sc.targets:
            _, ok, text = evaluate(target, results)
            if ok is None:
                text = _why_missing(target, results, cfg)
            out.append((sc, target, text, ok))
        out += _table_verdicts(sc, results)
    return out


def _table_verdicts(sc: Scenario,
                    results: Results) -> list[tuple[Scenario, Target, str, bool | None]]:
    """Targets a case judged itself: rows of its "table" note with "target" and "met"
    ("yes" / "NO"), as `tools/bench_workers.py` returns them."""
    out: list[tuple[Scenario, Target, str, bool | None]] = []
    for case in sc.cases:
        m = results.measured.get(case.key)
        rows = m.notes.get("table") if m is not None else None
        if not isinstance(rows, list):
            continue
        for row in rows:
            met = str(row.get("met", "")).lower()
            if met not in ("yes", "no"):
                continue
            name = ", ".join(f"{row[k]} {k}" if k == "workers" else str(row[k])
                             for k in ("workload", "workers") if k in row)
            label = f"{name}: {row.get('target', '')}"
            measured = ", ".join(f"{k} {_fmt_any(row[k])}" for k in ("per_second", "vs_1_worker")
                                 if k in row)
            out.append((sc, Target(label, "ratio", case.key, None, 0.0, None, case.label),
                        measured, met == "yes"))
    return out


def _why_missing(target: Target, results: Results, cfg: Config) -> str:
    for mid in (target.a, target.b):
        if mid is None:
            continue
        m = results.measured.get(mid.split("/", 1)[0])
        if m is None:
            continue
        if m.skipped:
            return f"not measured: {m.skipped}"
        if m.error:
            return "not measured: the case failed (see Errors)"
    return "not measured"


def _verdict(ok: bool | None) -> str:
    return {True: "met", False: "**MISSED**", None: "n/a"}[ok]


def render(scenarios: Sequence[Scenario], results: Results, cfg: Config, meta: Meta) -> str:
    lines: list[str] = ["# Benchmarks", ""]
    if cfg.quick:
        lines += ["> **Quick run** (`--quick`): reduced sizes, so the absolute figures are "
                  "rough and the growth checks span a small range. `make bench` runs the full "
                  "sizes (about 30 minutes).", ""]
    lines += [
        f"Generated by `{meta.command}` on {meta.started} UTC, in {meta.seconds / 60:.1f} "
        f"minutes; scenarios: {', '.join(meta.scenarios)}.",
        "",
        "| machine | |",
        "|---|---|",
        *[f"| {k} | {_cell(v)} |" for k, v in machine_rows(meta)],
        "",
        "**How to read the tables.** Each case ran in a fresh process (multiprocessing "
        f"spawn), {cfg.runs} times (unless noted); the rate is the median of those runs, "
        "with the slowest and fastest run beside it. Peak RSS is the peak resident set "
        "(VmHWM) of that process (interpreter and imports included), or of the largest "
        "process it ran (a command run as a user runs it). Ratios divide our "
        "median rate by the baseline's median rate measured in the same run: above 1 we "
        "are faster, 0.5 "
        "means half the baseline's rate. Setup (generating events, creating databases) is "
        "never timed. The workloads are seeded, so every run does the same work.",
        "",
    ]
    all_verdicts = verdicts(scenarios, results, cfg)
    if all_verdicts:
        met = sum(1 for *_, ok in all_verdicts if ok)
        missed = sum(1 for *_, ok in all_verdicts if ok is False)
        lines += ["## Targets", "",
                  f"{met} met, {missed} missed, "
                  f"{len(all_verdicts) - met - missed} not measured in this run.", "",
                  "| scenario | target | measured | verdict | about |", "|---|---|---|---|---|"]
        for sc, target, text, ok in all_verdicts:
            lines.append(f"| {sc.title} | {_cell(target.label)} | {_cell(text)} | "
                         f"{_verdict(ok)} | {target.measures} |")
        lines.append("")
        if missed:
            lines += ["A missed speed target's scenario section shows the cProfile of the case "
                      "that missed it.", ""]
    for sc in scenarios:
        lines += _scenario(sc, results, cfg, [v for v in all_verdicts if v[0] is sc])
    if results.chart:
        lines += ["## Throughput against size", "",
                  f"![throughput against size]({results.chart})", "",
                  "Log-log; each point is the median of the runs, the bar their range. A flat "
                  "line is linear total cost (constant per event); n log n bends down "
                  "slowly; n^2 would fall a decade per decade.", ""]
    errors = [m for m in results.measured.values() if m.error]
    if errors or results.prepare_errors:
        lines += ["## Errors", ""]
        for label, err in results.prepare_errors.items():
            lines += [f"Setup `{label}` failed:", "", "```", _tail(err), "```", ""]
        for m in errors:
            lines += [f"`{m.case.key}` ({m.case.label}) failed:", "", "```",
                      _tail(m.error or ""), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _tail(text: str, n: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _scenario(sc: Scenario, results: Results, cfg: Config,
              vs: list[tuple[Scenario, Target, str, bool | None]]) -> list[str]:
    lines = [f"## {sc.title}", "", sc.intro, ""]
    for note in sc.notes:
        lines += [note, ""]
    setup = [(label, secs) for label, secs in results.prepare_times.items()
             if label in {c.label for c in sc.prepare}]
    if setup:
        lines += ["Setup (untimed for the comparisons): " + "; ".join(
            f"{label} took {secs:.1f} s" for label, secs in setup) + ".", ""]
    for table in sc.tables:
        lines += _table(table.title, table.rows, results, table.note)
    for case in sc.cases:
        m = results.measured.get(case.key)
        rows = m.notes.get("table") if m is not None else None
        if isinstance(rows, list) and rows:
            lines += _dict_table(rows)
    if vs:
        lines += ["Targets:", ""]
        for _, target, text, ok in vs:
            lines.append(f"- {_verdict(ok)}: {target.label} — {text}")
        lines.append("")
    missed: dict[str, list[str]] = {}
    for _, target, _, ok in vs:
        if ok is False and target.profile and target.profile in results.profiles:
            missed.setdefault(target.profile, []).append(target.label)
    for key, labels in missed.items():
        profiled = next((c for c in sc.cases if c.key == key), None)
        size = ""
        if profiled is not None and profiled.profile_params:
            sized = [f"{k}={v:,}" for k, v in profiled.profile_params.items()
                     if isinstance(v, int) and not isinstance(v, bool)]
            size = f" (at {', '.join(sized)})" if sized else ""
        only = (f", section \"{profiled.profile_only}\" only" if profiled is not None
                and profiled.profile_only else ", measured section only")
        names = "; ".join(f"\"{label}\"" for label in labels)
        lines += [f"**Where the time goes** (missed: {names}): cProfile of one run of "
                  f"`{key}`{size}{only}.", "", "```", results.profiles[key], "```", ""]
    return lines


def _ratio_text(stat: Stat, compare: Sequence[str], results: Results) -> str:
    parts = []
    for mid in compare:
        base = results.get(mid)
        if base is None:
            continue
        m = results.measured.get(mid.split("/", 1)[0])
        name = m.case.short if m is not None and m.case.short else base.label
        parts.append(f"{fmt_ratio(stat.rate / base.rate)}x {name}")
    return "<br>".join(parts)


def _table(title: str, rows: Sequence[str], results: Results, note: str) -> list[str]:
    out = [f"### {title}", ""]
    if note:
        out += [note, ""]
    out += ["| implementation | work per run | median rate | slowest – fastest | median time "
            "| peak RSS | ratio (ours ÷ baseline) |", "|---|---:|---:|---:|---:|---:|---|"]
    for mid in rows:
        key = mid.split("/", 1)[0]
        m = results.measured.get(key)
        stat = results.get(mid)
        if m is None:
            continue
        if stat is None:
            label = next((s.label for s in m.case.all_sections()
                          if m.case.measure_id(s.name) == mid), m.case.label)
            why = m.skipped or ("failed: " + _tail(m.error or "", 1) if m.error else "no data")
            out.append(f"| {_cell(label)} | | | | | | {_cell(why)} |")
            continue
        label = stat.label if not stat.baseline else f"{stat.label} (baseline)"
        ratio = "" if stat.baseline else _ratio_text(stat, m.case.compare, results)
        out.append(
            f"| {_cell(label)} | {stat.units:,} {stat.unit} | {fmt_rate(stat.rate)} "
            f"{stat.unit}/s | {fmt_rate(stat.rate_min)} – {fmt_rate(stat.rate_max)} | "
            f"{fmt_time(stat.time)} | {stat.rss_mb:.0f} MB | {ratio} |")
    out.append("")
    return out


def _dict_table(rows: list[Any]) -> list[str]:
    keys: list[str] = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(str(k))
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        out.append("| " + " | ".join(_cell(_fmt_any(r.get(k, ""))) for k in keys) + " |")
    return [*out, ""]


def _fmt_any(v: Any) -> str:
    if isinstance(v, float):
        return fmt_rate(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


# -- the chart ------------------------------------------------------------------------------

PANELS = {
    "journal": ("Replay of the realistic mix", "journal size (events)", "events/s"),
    "tracker": ("GPUCreditTracker calls in memory", "calls", "calls/s"),
}


def chart(scenarios: Sequence[Scenario], results: Results, path: Path) -> str | None:
    """Draw the throughput-against-size chart; None (and no file) when nothing to draw or
    matplotlib is missing."""
    series: dict[str, dict[str, list[tuple[int, float, float, float]]]] = {}
    for sc in scenarios:
        for case in sc.cases:
            stat = results.get(case.key)
            if case.series is None or case.panel is None or case.n is None or stat is None:
                continue
            series.setdefault(case.panel, {}).setdefault(case.series, []).append(
                (case.n, stat.rate, stat.rate_min, stat.rate_max))
    series = {p: s for p, s in series.items() if any(len(v) > 1 for v in s.values())}
    if not series:
        return None
    try:
        import matplotlib  # type: ignore[import-not-found, unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    panels = [p for p in PANELS if p in series]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        title, xlabel, ylabel = PANELS[panel]
        for name, points in sorted(series[panel].items()):
            points.sort()
            xs = [p[0] for p in points]
            ys = [p[1] for p in points]
            lo = [p[1] - p[2] for p in points]
            hi = [p[3] - p[1] for p in points]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def summary(scenarios: Sequence[Scenario], results: Results, cfg: Config) -> str:
    """Plain-text target verdicts for the terminal."""
    lines = []
    for sc, target, text, ok in verdicts(scenarios, results, cfg):
        mark = {True: "met   ", False: "MISSED", None: "n/a   "}[ok]
        lines.append(f"  {mark}  {sc.title}: {target.label} — {text}")
    return "\n".join(lines)


def command_line() -> str:
    args = " ".join(sys.argv[1:])
    return f"python -m tools.bench {args}".strip()
