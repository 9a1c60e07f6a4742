"""Measuring a case: a fresh process, a few runs, each timed around its own sections.

A *case* is one implementation doing one piece of work (ours or a baseline). Its
function lives in a scenario module and has the signature ``fn(t: Timing, **params)``:
it prepares what it needs, then wraps only the work to measure in
``with t.measure(): ...`` (or ``t.measure("late")`` for a second section). Setup is never
timed.

Every case runs in a new process (multiprocessing *spawn*), which runs it `runs` times and
reports each run's seconds and its own peak RSS (VmHWM of that process), so the RSS of one
case is not inflated by another's, nor by the parent's. Profiling (cProfile) runs once more, in its
own process, with the profiler on only inside the measured sections.
"""

from __future__ import annotations

import cProfile
import gc
import importlib
import io
import multiprocessing
import pstats
import re
import resource
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

MAIN = "main"


class Timing:
    """What one run measured: seconds per section, and notes for the report."""

    def __init__(self, profiler: cProfile.Profile | None = None,
                 profile_only: str | None = None) -> None:
        self.seconds: dict[str, float] = {}
        self.notes: dict[str, Any] = {}
        self._profiler = profiler
        self._profile_only = profile_only

    @contextmanager
    def measure(self, section: str = MAIN) -> Iterator[None]:
        """Time the block (perf_counter); the profiler, if any, runs only inside it."""
        prof = self._profiler
        if self._profile_only is not None and section != self._profile_only:
            prof = None
        if prof is not None:
            prof.enable()
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            if prof is not None:
                prof.disable()
            self.seconds[section] = self.seconds.get(section, 0.0) + elapsed

    def note(self, key: str, value: Any) -> None:
        """Record a fact about the run (counts, digests) to show beside the table."""
        self.notes[key] = value


CaseFn = Callable[..., None]


@dataclass(frozen=True)
class Section:
    """One measured part of a case: its name, its row label and its work units per run."""

    name: str
    label: str
    units: int
    unit: str | None = None  # default: the case's unit


@dataclass(frozen=True)
class Case:
    """One implementation doing one piece of work, measured in its own process.

    `fn` is ``"module:function"`` under ``tools.bench``. `compare` names the baseline
    measures (``case key`` or ``case key/section``) this one is shown as a ratio of.
    `series` / `panel` put the case on the throughput chart at x = `n`.
    `needs`: "pg" (a reachable PostgreSQL) and/or "es" (the eventsourcing package).
    """

    key: str
    label: str
    fn: str
    params: Mapping[str, Any]
    units: int
    unit: str = "events"
    baseline: bool = False
    compare: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    series: str | None = None
    panel: str | None = None
    n: int | None = None
    runs: int | None = None
    profile_params: Mapping[str, Any] | None = None
    profile_only: str | None = None  # profile this section only
    needs: frozenset[str] = frozenset()
    short: str | None = None  # a baseline's name in ratio cells (default: its label)

    def all_sections(self) -> tuple[Section, ...]:
        return self.sections or (Section(MAIN, self.label, self.units),)

    def measure_id(self, section: str) -> str:
        return self.key if section == MAIN else f"{self.key}/{section}"


@dataclass(frozen=True)
class Call:
    """A setup or cleanup step run in its own process (not timed): ``fn(t, **params)``."""

    label: str
    fn: str
    params: Mapping[str, Any]
    needs: frozenset[str] = frozenset()


TargetKind = Literal["ratio", "speedup", "growth", "rss", "within", "seconds"]


@dataclass(frozen=True)
class Target:
    """A goal checked on measures of the same run.

    - ratio:   rate(a) / rate(b) >= threshold   (a as fast as `threshold` x b)
    - speedup: seconds(b) / seconds(a) >= threshold   (a is that many times quicker)
    - growth:  per-unit time(a) / per-unit time(b) <= threshold   (a: the larger size)
    - rss:     peak RSS of case a < threshold MB
    - within:  seconds(a) - seconds(b) <= threshold   (a costs at most that beyond b)
    - seconds: seconds(a) <= threshold
    `profile`: the case key to profile when the target is missed; `measures`: what the
    target is about (replay, scheduler, baselines, ...), the report's last column ("about").
    """

    label: str
    kind: TargetKind
    a: str
    b: str | None
    threshold: float
    profile: str | None = None
    measures: str = ""


@dataclass
class Measured:
    """What a case's process sent back."""

    case: Case
    seconds: dict[str, list[float]] = field(default_factory=dict)
    rss_mb: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    skipped: str | None = None
    wall: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None and bool(self.seconds)


@dataclass(frozen=True)
class Stat:
    """Median and range of one measure over its runs."""

    measure_id: str
    label: str
    unit: str
    units: int
    seconds: tuple[float, ...]
    rss_mb: float
    baseline: bool

    @property
    def rates(self) -> list[float]:
        return [self.units / s if s > 0 else float("inf") for s in self.seconds]

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def rate_min(self) -> float:
        return min(self.rates)

    @property
    def rate_max(self) -> float:
        return max(self.rates)

    @property
    def time(self) -> float:
        return statistics.median(self.seconds)

    @property
    def per_unit(self) -> float:
        return self.time / self.units


class Results:
    """Every measure of a run, by measure id."""

    def __init__(self) -> None:
        self.measured: dict[str, Measured] = {}
        self.stats: dict[str, Stat] = {}
        self.profiles: dict[str, str] = {}  # case key -> profile text
        self.prepare_times: dict[str, float] = {}  # setup label -> seconds
        self.prepare_errors: dict[str, str] = {}  # setup label -> traceback
        self.chart: str | None = None  # the chart's path, relative to the report

    def add(self, m: Measured) -> None:
        self.measured[m.case.key] = m
        if not m.ok:
            return
        for sec in m.case.all_sections():
            secs = m.seconds.get(sec.name)
            if not secs:
                continue
            mid = m.case.measure_id(sec.name)
            self.stats[mid] = Stat(mid, sec.label, sec.unit or m.case.unit, sec.units,
                                   tuple(secs), m.rss_mb, m.case.baseline)

    def get(self, measure_id: str) -> Stat | None:
        return self.stats.get(measure_id)


def evaluate(target: Target, results: Results) -> tuple[float | None, bool | None, str]:
    """(value, met, text) for a target; None when a measure it needs is missing."""
    a = results.get(target.a)
    b = results.get(target.b) if target.b is not None else None
    if a is None or (target.b is not None and b is None):
        return None, None, "not measured"
    if target.kind == "rss":
        return a.rss_mb, a.rss_mb < target.threshold, f"{a.rss_mb:.0f} MB"
    if target.kind == "seconds":
        return a.time, a.time <= target.threshold, f"{a.time:.2f} s"
    assert b is not None
    if target.kind == "within":
        value = a.time - b.time
        return value, value <= target.threshold, (f"{value:+.2f} s beyond {b.time:.2f} s "
                                                  f"({a.time:.2f} s)")
    if target.kind == "ratio":
        value = a.rate / b.rate
        return value, value >= target.threshold, f"{fmt_ratio(value)}x"
    if target.kind == "speedup":
        value = b.time / a.time
        return value, value >= target.threshold, f"{value:.1f}x faster"
    value = a.per_unit / b.per_unit
    return value, value <= target.threshold, f"{value:.2f}x per-op time"


def fmt_ratio(x: float) -> str:
    """Two decimals, or three significant digits below 0.1 (0.0042, not 0.00)."""
    return f"{x:.2f}" if x >= 0.1 else f"{x:.2g}"


# -- running a case in a fresh process ------------------------------------------------


def resolve(path: str) -> CaseFn:
    """``"module:function"`` (relative to tools.bench) -> the function."""
    module, _, name = path.partition(":")
    mod = importlib.import_module(module if "." in module else f"tools.bench.{module}")
    fn: CaseFn = getattr(mod, name)
    return fn


def peak_rss_mb() -> float:
    """The peak resident set size, in MB, of this process or of the largest process it
    ran and waited for (a case that runs `gpu-credits` as a user does, in a process of its
    own, measures that command: its own process only waits).

    This process's: on Linux, VmHWM from /proc/self/status: it belongs to the address
    space, which exec replaces, so a spawned child does not inherit its parent's peak
    (ru_maxrss does: it survives the fork + exec that start the child). Elsewhere
    ru_maxrss (macOS: bytes). Its children's: their ru_maxrss, which is at most this
    process's peak where a child's own was smaller (what it inherited at the fork), so
    the larger of the two is the largest process's peak either way.
    """
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / scale
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return max(int(line.split()[1]) / 1024, children)
    except OSError:
        pass
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / scale, children)


def _child(path: str, params: dict[str, Any], runs: int, profile: bool,
           profile_only: str | None, conn: Connection) -> None:
    try:
        fn = resolve(path)
        seconds: dict[str, list[float]] = {}
        notes: dict[str, Any] = {}
        prof = cProfile.Profile() if profile else None
        for _ in range(runs):
            gc.collect()  # each run starts without the previous run's garbage
            t = Timing(prof, profile_only)
            fn(t, **params)
            for k, v in t.seconds.items():
                seconds.setdefault(k, []).append(v)
            notes.update(t.notes)
        out: dict[str, Any] = {"seconds": seconds, "notes": notes, "rss_mb": peak_rss_mb()}
        if prof is not None:
            wall = sum(v for k, vs in seconds.items() for v in vs
                       if profile_only is None or k == profile_only)
            out["profile"] = profile_text(prof, wall)
        conn.send(out)
    except BaseException:  # report anything, including a KeyboardInterrupt, to the parent
        conn.send({"error": traceback.format_exc()})
    finally:
        conn.close()


def run_isolated(path: str, params: Mapping[str, Any], runs: int, *, profile: bool = False,
                 profile_only: str | None = None, timeout: float = 3600.0) -> dict[str, Any]:
    """Run ``fn(t, **params)`` `runs` times in a new spawned process; what it sent back."""
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(path, dict(params), runs, profile, profile_only, send),
                       daemon=False)
    proc.start()
    send.close()
    try:
        if not recv.poll(timeout):
            proc.kill()
            return {"error": f"timed out after {timeout:.0f} s"}
        msg: dict[str, Any] = recv.recv()
    except EOFError:
        msg = {"error": "the case's process died without reporting"}
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join()
    if proc.exitcode not in (0, None) and "error" not in msg:
        msg["error"] = f"process exited with code {proc.exitcode}"
    return msg


def run_in_process(path: str, params: Mapping[str, Any], runs: int) -> dict[str, Any]:
    """The same as `run_isolated` in this process (no RSS isolation): for tests. No
    collection before each run: in a process holding 3 million objects, as a long test
    session can, the toy scenarios took 16.7 s of CPU with one, 1.3 s without."""
    seconds: dict[str, list[float]] = {}
    notes: dict[str, Any] = {}
    try:
        fn = resolve(path)
        for _ in range(runs):
            t = Timing()
            fn(t, **params)
            for k, v in t.seconds.items():
                seconds.setdefault(k, []).append(v)
            notes.update(t.notes)
    except Exception:
        return {"error": traceback.format_exc()}
    return {"seconds": seconds, "notes": notes, "rss_mb": peak_rss_mb()}


def measure(case: Case, runs: int, *, isolated: bool = True) -> Measured:
    """Run a case and collect its measures."""
    start = time.perf_counter()
    n = case.runs or runs
    msg = (run_isolated(case.fn, case.params, n) if isolated
           else run_in_process(case.fn, case.params, n))
    m = Measured(case, wall=time.perf_counter() - start)
    if "error" in msg:
        m.error = str(msg["error"])
        return m
    m.seconds = msg["seconds"]
    m.rss_mb = float(msg["rss_mb"])
    m.notes = msg["notes"]
    return m


def profile_case(case: Case, *, isolated: bool = True) -> str:
    """cProfile of one run of the case (its measured sections only), as text."""
    params = dict(case.params)
    if case.profile_params:
        params.update(case.profile_params)
    if isolated:
        msg = run_isolated(case.fn, params, 1, profile=True, profile_only=case.profile_only)
    else:
        prof = cProfile.Profile()
        fn = resolve(case.fn)
        t = Timing(prof, case.profile_only)
        fn(t, **params)
        wall = sum(v for k, v in t.seconds.items()
                   if case.profile_only is None or k == case.profile_only)
        msg = {"profile": profile_text(prof, wall)}
    if "error" in msg:
        return f"(profiling failed: {str(msg['error']).strip().splitlines()[-1]})"
    return str(msg["profile"])


_PREFIX = re.compile(r"^.*?(site-packages/|/lib/python3\.\d+/)")


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    filename = _PREFIX.sub("", filename)
    root = str(Path(__file__).resolve().parents[2]) + "/"
    if filename.startswith(root):
        filename = filename[len(root):]
    return f"{filename}:{line}({name})"


def profile_text(prof: cProfile.Profile, wall: float = 0.0, top: int = 14) -> str:
    """The top entries by own time and by cumulative time, one line each; percentages are
    of `wall`, the profiled sections' time (profiler overhead included)."""
    stats = pstats.Stats(prof, stream=io.StringIO())
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    rows = [(func, nc, tt, ct) for func, (_, nc, tt, ct, _) in raw.items()]
    total = max(wall, sum(r[2] for r in rows), max((r[3] for r in rows), default=0.0)) or 1e-9
    lines = [f"profiled section: {total:.2f} s under cProfile (percentages are of this)",
             "", f"top {top} by own time:", "  own s   own%    cum s      calls  function"]
    for func, nc, tt, ct in sorted(rows, key=lambda r: -r[2])[:top]:
        lines.append(f"{tt:7.2f} {100 * tt / total:6.1f}% {ct:8.2f} {nc:10d}  {_where(func)}")
    lines += ["", f"top {top} by cumulative time (gpu-credits code):",
              "  cum s   cum%    own s      calls  function"]
    ours = [r for r in rows
            if any(p in r[0][0] for p in ("/eventstore/", "/projections/"))]
    for func, nc, tt, ct in sorted(ours, key=lambda r: -r[3])[:top]:
        lines.append(f"{ct:7.2f} {100 * ct / total:6.1f}% {tt:8.2f} {nc:10d}  {_where(func)}")
    return "\n".join(lines)


# -- what a scenario is ---------------------------------------------------------------


@dataclass(frozen=True)
class Table:
    """One table of the report: a title and its rows (measure ids), in order."""

    title: str
    rows: tuple[str, ...]
    note: str = ""


@dataclass
class Scenario:
    """A group of cases measured together, with the tables and targets they feed."""

    name: str
    title: str
    intro: str
    cases: list[Case]
    tables: list[Table]
    targets: list[Target] = field(default_factory=list)
    prepare: list[Call] = field(default_factory=list)
    cleanup: list[Call] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Sizes:
    """How much work each scenario does."""

    append_batched: int  # events appended in batches
    append_single: int  # events appended one per transaction (fsync-bound)
    replay: int  # events in the journal replayed in full
    replay_sizes: tuple[int, ...]  # journal sizes for the throughput chart
    tracker: int  # mixed tracker calls
    tracker_sizes: tuple[int, ...]  # tracker calls for the growth chart
    sched_jobs: int  # jobs submitted, started and completed
    blocked: tuple[int, int]  # accounts blocked at their cap: few, many
    picks: int  # start_next picks timed per blocked setting
    facade_picks: int  # the same through the Scheduler facade
    facade_blocked: tuple[int, int]  # blocked accounts for the facade (its setup is slow)
    append_batch: int  # events per append (and rows per commit) in the batched cases
    es_per_save: int  # aggregate events per eventsourcing save
    late_back: int  # the late event lands this many events before the end
    import_lines: int  # lines of the file `gpu-credits import` reads
    late_import: int  # events imported in order, shuffled and as two files
    reports: int  # events in the journal the report commands read
    reconcile_rows: int  # rows of the charges file reconcile compares


# Each mode's sizes side by side (full, quick, toy), named as in `Sizes`: one table, so a
# new size is given for every mode at once.
_MODES: dict[str, tuple[Any, Any, Any]] = {
    "append_batched": (100_000, 5_000, 60),
    "append_single": (2_000, 100, 6),
    "replay": (1_000_000, 50_000, 300),
    "replay_sizes": ((10_000, 100_000, 1_000_000), (10_000, 50_000), (120, 300)),
    "tracker": (200_000, 20_000, 200),
    "tracker_sizes": ((10_000, 100_000, 1_000_000), (2_000, 20_000), (50, 200)),
    "sched_jobs": (100_000, 5_000, 40),
    "blocked": ((10, 10_000), (10, 10_000), (2, 20)),
    "picks": (500, 100, 5),
    "facade_picks": (100, 20, 3),
    "facade_blocked": ((10, 10_000), (10, 2_000), (2, 20)),
    "append_batch": (1000, 1000, 20),
    "es_per_save": (100, 100, 10),
    "late_back": (1000, 1000, 10),
    "import_lines": (1_000_000, 50_000, 300),
    "late_import": (3_000, 1_000, 60),
    "reports": (1_000_000, 50_000, 300),
    "reconcile_rows": (100_000, 10_000, 50),
}

FULL, QUICK, TOY = (Sizes(**{name: sizes[mode] for name, sizes in _MODES.items()})
                    for mode in range(3))


@dataclass(frozen=True)
class Config:
    """One harness run: sizes, runs per case, where data goes, what is available."""

    sizes: Sizes
    runs: int
    workdir: str
    pg_url: str | None  # None: PostgreSQL unreachable, its cases are skipped
    have_es: bool  # the eventsourcing package is installed
    have_es_pg: bool = False  # and psycopg-pool, which its PostgreSQL module imports
    quick: bool = False

    def available(self, needs: frozenset[str]) -> str | None:
        """Why a case with these needs cannot run here, or None."""
        if "pg" in needs and self.pg_url is None:
            return "PostgreSQL not reachable"
        if "es" in needs and not self.have_es:
            return "eventsourcing not installed (pip install -e '.[bench]')"
        if "es" in needs and "pg" in needs and not self.have_es_pg:
            return ("eventsourcing's PostgreSQL module needs psycopg-pool "
                    "(pip install 'eventsourcing[postgres]')")
        return None
