"""`python -m tools.bench [--quick] [--only SCENARIO ...]`: run the benchmarks, write the report.

Scenarios run one after the other (never two cases at once: the machine has two cores),
each case in a fresh process. At the end the missed targets are profiled, the report and
the chart are written, and every SQLite file and PostgreSQL schema of the run is removed.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from tools.bench import (
    appends,
    chain,
    imports,
    replay,
    report,
    reports,
    scheduler,
    tracker,
    workers,
)
from tools.bench.runner import (
    FULL,
    QUICK,
    TOY,
    Config,
    Measured,
    Results,
    Scenario,
    evaluate,
    measure,
    profile_case,
    run_in_process,
    run_isolated,
)
from tools.bench.storage import drop_run_schemas, pg_base_url, pg_version, run_token

BUILDERS: list[Callable[[Config], list[Scenario]]] = [
    lambda cfg: [appends.scenario(cfg)],
    replay.scenarios,
    lambda cfg: [tracker.scenario(cfg)],
    lambda cfg: [scheduler.scenario(cfg)],
    lambda cfg: [workers.scenario(cfg)],
    lambda cfg: [chain.scenario(cfg)],
    lambda cfg: [imports.scenario(cfg), imports.arrivals_scenario(cfg)],
    lambda cfg: [reports.scenario(cfg)],
]
NAMES = ("appends", "replay", "late", "tracker", "scheduler", "workers", "chain", "imports",
         "arrivals", "reports")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tools.bench",
        description="Measure gpu-credits beside raw drivers, plain in-memory designs and the "
                    "eventsourcing package; write docs/benchmarks.md and the chart.")
    p.add_argument("--quick", action="store_true",
                   help="reduced sizes, about a minute or two (the report says so)")
    p.add_argument("--only", nargs="+", metavar="SCENARIO", choices=NAMES,
                   help=f"run only these scenarios: {', '.join(NAMES)}")
    p.add_argument("--runs", type=int, default=3, help="runs per case, at least 3 (default 3)")
    p.add_argument("--out", default="docs/benchmarks.md", help="the report to write")
    p.add_argument("--chart", default=None,
                   help="the chart to write (default: benchmarks-throughput.png beside --out)")
    p.add_argument("--workdir", default=None,
                   help="where SQLite files go (default: a new temporary folder, removed)")
    p.add_argument("--no-profile", action="store_true", help="do not profile missed targets")
    # For the smoke test: tiny sizes, and optionally every case in this process.
    p.add_argument("--toy", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    return p


def build(cfg: Config, only: Sequence[str] | None) -> list[Scenario]:
    scenarios = [sc for b in BUILDERS for sc in b(cfg)]
    if only:
        scenarios = [sc for sc in scenarios if sc.name in only]
    return scenarios


def run(scenarios: Sequence[Scenario], cfg: Config, *, isolated: bool = True,
        profile: bool = True) -> Results:
    """Run every scenario's setup and cases, then profile the cases of missed targets."""
    results = Results()
    done: set[str] = set()
    for sc in scenarios:
        _log(f"== {sc.title}")
        for call in sc.prepare:
            if call.label in done:
                continue
            done.add(call.label)
            why = cfg.available(call.needs)
            if why is not None:
                _log(f"   setup skipped ({why}): {call.label}")
                continue
            _log(f"   setup: {call.label} ...")
            start = time.perf_counter()
            msg = (run_isolated(call.fn, call.params, 1) if isolated
                   else run_in_process(call.fn, call.params, 1))
            results.prepare_times[call.label] = time.perf_counter() - start
            if "error" in msg:
                results.prepare_errors[call.label] = str(msg["error"])
                _log(f"   setup FAILED: {call.label}\n{msg['error']}")
            else:
                _log(f"   ... {results.prepare_times[call.label]:.1f} s")
        for case in sc.cases:
            why = cfg.available(case.needs)
            if why is not None:
                results.add(Measured(case, skipped=why))
                _log(f"   skipped ({why}): {case.label}")
                continue
            m = measure(case, cfg.runs, isolated=isolated)
            results.add(m)
            _log(_progress(m, results))
    if profile:
        for sc in scenarios:
            for target in sc.targets:
                _, ok, _ = evaluate(target, results)
                key = target.profile
                if ok is not False or key is None or key in results.profiles:
                    continue
                found = next((c for c in sc.cases if c.key == key), None)
                if found is None:
                    continue
                _log(f"   profiling {key} (missed: {target.label}) ...")
                results.profiles[key] = profile_case(found, isolated=isolated)
    if not isolated:
        appends.release()
    return results


def _progress(m: Measured, results: Results) -> str:
    if m.error:
        return f"   FAILED {m.case.key}: {m.error.strip().splitlines()[-1]}"
    parts = []
    for sec in m.case.all_sections():
        stat = results.get(m.case.measure_id(sec.name))
        if stat is not None:
            parts.append(f"{report.fmt_rate(stat.rate)} {stat.unit}/s "
                         f"({report.fmt_rate(stat.rate_min)}-{report.fmt_rate(stat.rate_max)})"
                         f" median {report.fmt_time(stat.time)}")
    return (f"   {m.case.key}: " + "; ".join(parts)
            + f"; peak RSS {m.rss_mb:.0f} MB [{m.wall:.1f} s]")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.runs < 3 and not args.toy:
        _parser().error("--runs must be at least 3 (the report gives medians with ranges)")
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    run_token()  # every process of this run names its PostgreSQL schemas after it
    sizes = TOY if args.toy else QUICK if args.quick else FULL
    workdir = args.workdir or tempfile.mkdtemp(prefix="gpu-credits-bench-")
    Path(workdir).mkdir(parents=True, exist_ok=True)
    pg = pg_base_url()
    version = pg_version(pg)
    cfg = Config(sizes=sizes, runs=args.runs, workdir=workdir,
                 pg_url=pg if version else None,
                 have_es=importlib.util.find_spec("eventsourcing") is not None,
                 have_es_pg=importlib.util.find_spec("psycopg_pool") is not None,
                 quick=args.quick or args.toy)
    if version is None:
        _log(f"PostgreSQL at {pg} does not answer: its cases are skipped")
    scenarios = build(cfg, args.only)
    commit = report.commit()  # before the run writes anything into the work tree
    out = Path(args.out)
    chart_path = Path(args.chart) if args.chart else out.parent / "benchmarks-throughput.png"
    try:
        results = run(scenarios, cfg, isolated=not args.in_process,
                      profile=not args.no_profile)
        drawn = report.chart(scenarios, results, chart_path)
        if drawn is not None:
            results.chart = str(Path(chart_path).resolve().relative_to(out.parent.resolve())
                                if chart_path.resolve().is_relative_to(out.parent.resolve())
                                else chart_path)
        from sqlalchemy.engine import make_url

        meta = report.Meta(
            command=report.command_line() if argv is None else
            "python -m tools.bench " + " ".join(argv),
            started=started.strftime("%Y-%m-%d %H:%M"),
            seconds=time.perf_counter() - t0,
            pg_version=version,
            pg_where=make_url(pg).render_as_string(hide_password=True),
            scenarios=[sc.name for sc in scenarios],
            commit=commit,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report.render(scenarios, results, cfg, meta))
        _log(f"wrote {out}" + (f" and {chart_path}" if drawn else ""))
        print(report.summary(scenarios, results, cfg))
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
        if cfg.pg_url is not None:
            drop_run_schemas(cfg.pg_url)
    failed = [m.case.key for m in results.measured.values() if m.error]
    if failed or results.prepare_errors:
        _log(f"{len(failed)} case(s) and {len(results.prepare_errors)} setup step(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
