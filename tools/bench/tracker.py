"""The credit tracker in memory: the facade and the fold beside a plain heap tracker.

- `GPUCreditTracker(journal=None)` taking mixed grant / consume / get_balance
  calls (non-decreasing timestamps), beside `baselines.PlainTracker` taking the same calls;
- the fold alone: `Ledger.apply` on prebuilt grant / consume events, beside the plain
  tracker taking the same grants and consumes;
- both at several sizes, for the growth chart: per-call cost must grow like log n, not n.
"""

from __future__ import annotations

from typing import Any

from tools.bench.runner import Case, Config, Scenario, Table, Target, Timing
from tools.bench.workload import BALANCE, CONSUME, GRANT, iter_tracker_calls, tracker_calls

_CALLS: dict[tuple[int, bool], list[tuple[int, int, int, int]]] = {}


def _calls(n: int, events_only: bool) -> list[tuple[int, int, int, int]]:
    """The calls, made once per process; `events_only` drops the get_balance calls."""
    key = (n, events_only)
    if key not in _CALLS:
        calls = tracker_calls(n)
        _CALLS[key] = [c for c in calls if c[0] != BALANCE] if events_only else calls
    return _CALLS[key]


def _drive(tracker: Any, calls: list[tuple[int, int, int, int]]) -> int:
    grant, consume, balance = tracker.grant, tracker.consume, tracker.get_balance
    last = 0
    for kind, amount, ts, expiry in calls:
        if kind == GRANT:
            grant(amount, ts, expiry)
        elif kind == CONSUME:
            last = consume(amount, ts)
        else:
            last = balance(ts)
    return int(last)


def plain(t: Timing, n: int, events_only: bool = False) -> None:
    """The plain heap tracker taking the calls."""
    from tools.bench.baselines import PlainTracker

    calls = _calls(n, events_only)
    tracker = PlainTracker()
    with t.measure():
        last = _drive(tracker, calls)
    t.note("last answer", last)


def facade(t: Timing, n: int) -> None:
    """GPUCreditTracker(journal=None) taking the calls (each one an event in memory)."""
    from projections import GPUCreditTracker

    calls = _calls(n, False)
    tracker = GPUCreditTracker(journal=None)
    with t.measure():
        last = _drive(tracker, calls)
    t.note("last answer", last)


_EVENTS: dict[int, list[Any]] = {}


def fold(t: Timing, n: int) -> None:
    """Ledger.apply on the grant / consume events of the same calls, prebuilt."""
    from projections import Ledger
    from projections.events import CreditsConsumed, CreditsGranted

    events = _EVENTS.get(n)
    if events is None:
        events = _EVENTS[n] = [
            (i, f"e{i}", ts, CreditsGranted("default", amount, expiry) if kind == GRANT
             else CreditsConsumed("default", amount))
            for i, (kind, amount, ts, expiry) in enumerate(_calls(n, True), 1)
        ]
    ledger = Ledger()
    apply = ledger.apply
    with t.measure():
        for position, event_id, ts, event in events:
            apply(position, event_id, ts, event)
    t.note("applied", ledger.applied)


def scenario(cfg: Config) -> Scenario:
    s = cfg.sizes
    n = s.tracker
    sizes = sorted(set(s.tracker_sizes) | {n})
    cases: list[Case] = []
    for m in sizes:
        events = sum(1 for c in iter_tracker_calls(m) if c[0] != BALANCE)
        cases += [
            Case(f"tracker.plain.{m}", "plain heap tracker: all calls",
                 "tracker:plain", {"n": m}, m, unit="calls", baseline=True,
                 series="plain heap tracker", panel="tracker", n=m,
                 short="plain tracker"),
            Case(f"tracker.facade.{m}", "GPUCreditTracker(journal=None): all calls",
                 "tracker:facade", {"n": m}, m, unit="calls", compare=(f"tracker.plain.{m}",),
                 series="GPUCreditTracker(journal=None)", panel="tracker", n=m,
                 profile_params={"n": min(m, 50_000)}),
            Case(f"tracker.plainev.{m}", "plain heap tracker: grants and consumes only",
                 "tracker:plain", {"n": m, "events_only": True}, events, unit="calls",
                 baseline=True, short="plain tracker"),
            Case(f"tracker.fold.{m}", "the fold alone: Ledger.apply, same grants and consumes",
                 "tracker:fold", {"n": m}, events, unit="calls",
                 compare=(f"tracker.plainev.{m}",), series="Ledger.apply (grant/consume)",
                 panel="tracker", n=m),
        ]
    lo, hi = sizes[0], sizes[-1]
    growth_note = (f"From {lo:,} to {hi:,} calls, n log n predicts a per-call time "
                   f"{_nlogn(lo, hi):.2f}x larger, n^2 predicts {hi / lo:,.0f}x.")
    return Scenario(
        name="tracker",
        title="GPUCreditTracker in memory",
        intro=(
            f"{n:,} mixed calls for one account (30% grants of 1-100 credits expiring 1-2,000 "
            "s later, 40% consumes of 1-80, so debt happens, 30% get_balance; timestamps "
            "non-decreasing, as the contract requires), made once before timing. The facade "
            "validates each call, appends it as an event to its in-memory journal and folds "
            "it; the plain tracker only updates its heap. The fold rows apply the same "
            "grants and consumes as prebuilt events (get_balance is not an event), beside "
            "the plain tracker taking just those calls. " + growth_note
        ),
        cases=cases,
        tables=[
            Table(f"{n:,} calls", (f"tracker.plain.{n}", f"tracker.facade.{n}",
                                    f"tracker.plainev.{n}", f"tracker.fold.{n}")),
            Table("Growth with the number of calls (the chart)",
                  tuple(f"tracker.{w}.{m}" for m in sizes
                        for w in ("plain", "facade", "fold")), growth_note),
        ],
        targets=[
            Target(f"facade within 2x of the plain tracker ({n:,} calls)", "ratio",
                   f"tracker.facade.{n}", f"tracker.plain.{n}", 0.5, f"tracker.facade.{n}",
                   "credit tracker"),
            Target("fold within 1.3x of the plain tracker (same grants and consumes)",
                   "ratio", f"tracker.fold.{n}", f"tracker.plainev.{n}", 1 / 1.3,
                   f"tracker.fold.{n}", "credit tracker"),
            Target(f"facade per-call time, {hi:,} vs {lo:,} calls: <= 3x (n log n, not n^2)",
                   "growth", f"tracker.facade.{hi}", f"tracker.facade.{lo}", 3.0,
                   f"tracker.facade.{hi}", "credit tracker"),
            Target(f"fold per-event time, {hi:,} vs {lo:,} calls: <= 3x (n log n, not n^2)",
                   "growth", f"tracker.fold.{hi}", f"tracker.fold.{lo}", 3.0, None,
                   "credit tracker"),
        ],
    )


def _nlogn(lo: int, hi: int) -> float:
    import math

    return math.log(hi) / math.log(lo)
