"""Full replay and the late event (replay targets and baselines).

A journal of the realistic mix (`workload.realistic_mix`: accounts, expiring and pool
grants, usage, jobs submitted / started / completed / cancelled) is written once per size
through `Journal.append` (untimed), on SQLite and PostgreSQL, and once into
`eventsourcing`. Then, in the same run:

- `projections.replay.replay` (arrival order through a Projector, as `gpu-credits replay`
  does) and `projections.replay.fold_canonical` (one canonical-order read, straight into
  the fold), each rebuilding the whole `Ledger` (the credit book and the scheduler fold);
- raw `sqlite3` / psycopg reading the same rows in canonical order and `json.loads`-ing
  each payload;
- `eventsourcing` reading its notification log (and, for context, decoding it into
  domain events);
- the fold alone, in memory, on prebuilt events (how much of a replay is the fold).

The late event: a Projector caught up on the journal (timed: the full replay), then one
usage report whose event time lands `late_back` events before the end is appended and
ingested (timed: the re-projection).
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tools.bench.runner import Call, Case, Config, Scenario, Section, Table, Target, Timing
from tools.bench.storage import (
    copy_sqlite,
    create_schema,
    es_pg_env,
    es_sqlite_env,
    libpq_dsn,
    pg_base_url,
    remove_sqlite,
    schema_name,
    schema_url,
    sqlite_url,
)
from tools.bench.workload import append_mix, realistic_mix

T = TypeVar("T")

RSS_LIMIT_MB = 250.0


def mix_path(workdir: str, n: int) -> str:
    return str(Path(workdir) / f"mix-{n}.db")


def journal_url(kind: str, workdir: str, pg_url: str | None, n: int) -> str:
    if kind == "sqlite":
        return sqlite_url(mix_path(workdir, n))
    assert pg_url is not None
    return schema_url(pg_url, schema_name(f"mix{n}"))


def es_env(kind: str, workdir: str, pg_url: str | None, n: int) -> dict[str, str]:
    if kind == "sqlite":
        return es_sqlite_env(Path(workdir) / f"es-mix-{n}.db")
    assert pg_url is not None
    return es_pg_env(pg_url, schema_name(f"esmix{n}"))


# -- building the journals (untimed setup) -----------------------------------------------


LATE_FRACTION = 0.02
"""In the late-arrivals journal (the `arrivals` scenario of `tools.bench.imports`): the
share of events that arrive 1 to 20 events late."""


def late_mix_path(workdir: str, n: int) -> str:
    return str(Path(workdir) / f"late-mix-{n}.db")


def build_late_journal(t: Timing, workdir: str, n: int) -> None:
    """The mix of n events on SQLite, 2% of them arriving a little late."""
    from eventstore import Journal
    from tools.bench.workload import with_late_arrivals

    remove_sqlite(late_mix_path(workdir, n))
    journal = Journal(sqlite_url(late_mix_path(workdir, n)))
    with t.measure():
        append_mix(journal, with_late_arrivals(realistic_mix(n), LATE_FRACTION), 1000)
    t.note("head", journal.head())
    journal.close()


def build_journal(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int,
                  batch: int = 1000) -> None:
    """Write the mix of n events through Journal.append, `batch` per append."""
    from eventstore import Journal

    if kind == "pg":
        assert pg_url is not None
        create_schema(pg_url, schema_name(f"mix{n}"))
    else:
        remove_sqlite(mix_path(workdir, n))
    journal = Journal(journal_url(kind, workdir, pg_url, n))
    with t.measure():
        append_mix(journal, realistic_mix(n), batch)
    t.note("head", journal.head())
    journal.close()
    if kind == "sqlite":
        conn = sqlite3.connect(mix_path(workdir, n))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()


def build_es(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int) -> None:
    """Write the same mix into eventsourcing, 1,000 events per save."""
    from tools.bench import esapp

    if kind == "pg":
        assert pg_url is not None
        create_schema(pg_url, schema_name(f"esmix{n}"))
    else:
        remove_sqlite(Path(workdir) / f"es-mix-{n}.db")
    app = esapp.open_app(es_env(kind, workdir, pg_url, n))
    try:
        with t.measure():
            saved = esapp.save_batched(app, {}, realistic_mix(n), 1000)
        t.note("saved", saved)
    finally:
        app.close()


# -- the cases -----------------------------------------------------------------------------


def _timed(t: Timing, url: str, work: Callable[[Any], T]) -> T:
    """`work` on our journal at `url`, timed; opening and closing the journal are not."""
    from eventstore import Journal

    journal = Journal(url)
    try:
        with t.measure():
            return work(journal)
    finally:
        journal.close()


def ours_replay(t: Timing, url: str, n: int) -> None:
    """projections.replay.replay: the journal in arrival order through a Projector."""
    from projections.replay import replay

    report = _timed(t, url, replay)
    t.note("events", report.events)
    t.note("revisions", len(report.revisions))
    t.note("anomalies", len(report.anomalies))
    t.note("digest", report.digest[:16])


def ours_fold(t: Timing, url: str, n: int) -> None:
    """projections.replay.fold_canonical: one canonical read straight into the fold."""
    from projections.replay import fold_canonical

    ledger = _timed(t, url, fold_canonical)
    t.note("events", ledger.applied)
    t.note("digest", ledger.digest()[:16])


def raw_sqlite_read(t: Timing, path: str) -> None:
    """The raw read, timed once connected (as `_timed` times ours once opened)."""
    from tools.bench import rawdb

    conn = sqlite3.connect(path)
    try:
        with t.measure():
            n = rawdb.sqlite_read_decode(conn)
    finally:
        conn.close()
    t.note("rows", n)


def raw_pg_read(t: Timing, pg_url: str, schema: str) -> None:
    """The raw read, timed once connected (as `_timed` times ours once opened)."""
    from tools.bench import rawdb

    conn = rawdb.pg_connect(libpq_dsn(pg_url), schema, create=False)
    try:
        with t.measure():
            n = rawdb.pg_read_decode(conn)
    finally:
        conn.close()
    t.note("rows", n)


def es_read(t: Timing, env: dict[str, str], decode: bool = False) -> None:
    from tools.bench import esapp

    app = esapp.open_app(env)
    try:
        with t.measure():
            n = esapp.read_log(app, decode=decode)
    finally:
        app.close()
    t.note("notifications", n)


_PREBUILT: dict[int, list[Any]] = {}


def memory_fold(t: Timing, n: int) -> None:
    """Ledger.apply on the mix's events, prebuilt once per process (no journal at all)."""
    from projections import Ledger
    from projections.events import from_payload

    events = _PREBUILT.get(n)
    if events is None:
        events = _PREBUILT[n] = [(i, e.id, e.time, from_payload(e.type, e.fields))
                                 for i, e in enumerate(realistic_mix(n), 1)]
    ledger = Ledger()
    apply = ledger.apply
    with t.measure():
        for position, event_id, time, event in events:
            apply(position, event_id, time, event)
    t.note("anomalies", len(ledger.anomalies))


def late_event(t: Timing, path: str, workdir: str, n: int, back: int) -> None:
    """A Projector caught up on a copy of the journal (timed: "full"), then one late usage
    report landing `back` events before the end, appended and ingested (timed: "late")."""
    from eventstore import Journal, NewEvent
    from projections.projector import Projector
    from projections.replay import account_reader, journal_reader

    copy = str(Path(workdir) / f"late-{secrets.token_hex(4)}.db")
    copy_sqlite(path, copy)
    journal = Journal(sqlite_url(copy))
    try:
        # As a facade's session does: a late event refolds its own account when it can.
        projector = Projector(journal_reader(journal), account_reader=account_reader(journal))
        with t.measure("full"):
            projector.catch_up(journal.read(order="position"))
        head = journal.head()
        before, after = list(journal.read(after_position=head - back - 1,
                                          to_position=head - back + 1, order="position"))
        # Times strictly increase along positions: one second before `after` is at or
        # after `before`, so exactly `back` events follow the late one on the timeline.
        when = after.time - 1
        assert before.time <= when < after.time, (before.time, when, after.time)
        late = NewEvent(f"late-{secrets.token_hex(4)}", after.stream, "consume", when,
                        {"account": after.stream, "amount": 500})
        (rec,) = journal.append([late])
        with t.measure("late"):
            projector.ingest(rec)
        t.note("events after the late one", sum(1 for _ in journal.read(
            after=(rec.time, rec.position), order="canonical")))
        t.note("revisions", len(projector.revisions))
        t.note("re-projected for its account alone", projector.refolded_by_account == 1)
    finally:
        journal.close()
        remove_sqlite(copy)


# -- the scenarios -------------------------------------------------------------------------


def _prepare(cfg: Config, kind: str, n: int) -> Call:
    needs = frozenset({"pg"}) if kind == "pg" else frozenset()
    return Call(f"write the {n:,}-event mix to our journal on {kind}", "replay:build_journal",
                {"kind": kind, "workdir": cfg.workdir,
                 "pg_url": cfg.pg_url if kind == "pg" else None, "n": n}, needs)


def _prepare_es(cfg: Config, kind: str, n: int) -> Call:
    needs = frozenset({"pg", "es"}) if kind == "pg" else frozenset({"es"})
    return Call(f"write the {n:,}-event mix to eventsourcing on {kind}", "replay:build_es",
                {"kind": kind, "workdir": cfg.workdir,
                 "pg_url": cfg.pg_url if kind == "pg" else None, "n": n}, needs)


def scenarios(cfg: Config) -> list[Scenario]:
    return [replay_scenario(cfg), late_scenario(cfg)]


def replay_scenario(cfg: Config) -> Scenario:
    s = cfg.sizes
    n = s.replay
    sizes = sorted(set(s.replay_sizes) | {n})
    small = max([m for m in sizes if m <= 100_000] or [min(sizes)])
    wd, pg = cfg.workdir, cfg.pg_url
    prepare = [_prepare(cfg, "sqlite", m) for m in sizes]
    prepare += [_prepare(cfg, "pg", n), _prepare_es(cfg, "sqlite", n), _prepare_es(cfg, "pg", n)]
    pgn = frozenset({"pg"})
    cases: list[Case] = []

    def versus(m: int) -> tuple[str, ...]:
        # eventsourcing holds the mix at the main size only.
        return (f"replay.sqlite.raw.{m}", *(("replay.sqlite.es",) if m == n else ()))

    for m in sizes:
        url = journal_url("sqlite", wd, None, m)
        prof = {"url": journal_url("sqlite", wd, None, small), "n": small}
        cases += [
            Case(f"replay.sqlite.raw.{m}", "raw sqlite3: SELECT in canonical order + json.loads",
                 "replay:raw_sqlite_read", {"path": mix_path(wd, m)}, m, baseline=True,
                 series="raw sqlite3 read + json.loads", panel="journal", n=m,
                 short="raw sqlite3 read+decode"),
            Case(f"replay.sqlite.replay.{m}", "gpu-credits replay() (Projector, arrival order)",
                 "replay:ours_replay", {"url": url, "n": m}, m,
                 compare=versus(m), series="replay() from SQLite", panel="journal", n=m,
                 profile_params=prof),
            Case(f"replay.sqlite.fold.{m}", "gpu-credits fold_canonical() (one canonical read)",
                 "replay:ours_fold", {"url": url, "n": m}, m,
                 compare=versus(m), series="fold_canonical() from SQLite", panel="journal",
                 n=m, profile_params=prof),
            Case(f"replay.memory.fold.{m}", "the fold alone: Ledger.apply on prebuilt events "
                 "(no journal)", "replay:memory_fold", {"n": m}, m,
                 series="Ledger.apply in memory (prebuilt events)", panel="journal", n=m),
        ]
    cases += [
        Case("replay.sqlite.es", "eventsourcing: read the notification log", "replay:es_read",
             {"env": es_env("sqlite", wd, None, n)}, n, baseline=True, needs=frozenset({"es"}),
             short="eventsourcing log read"),
        Case("replay.sqlite.esdecode", "eventsourcing: read the log + decode domain events",
             "replay:es_read", {"env": es_env("sqlite", wd, None, n), "decode": True}, n,
             baseline=True, needs=frozenset({"es"})),
    ]
    # Without a reachable PostgreSQL these cases are listed and skipped (cfg.available).
    pgu = pg or pg_base_url()
    pg_journal = journal_url("pg", wd, pgu, n)
    cases += [
        Case("replay.pg.raw", "raw psycopg: server-side cursor in canonical order + "
             "json.loads", "replay:raw_pg_read",
             {"pg_url": pgu, "schema": schema_name(f"mix{n}")}, n, baseline=True, needs=pgn,
             short="raw psycopg read+decode"),
        Case("replay.pg.es", "eventsourcing: read the notification log", "replay:es_read",
             {"env": es_env("pg", wd, pgu, n)}, n, baseline=True, needs=pgn | {"es"},
             short="eventsourcing log read"),
        Case("replay.pg.replay", "gpu-credits replay() (Projector, arrival order)",
             "replay:ours_replay", {"url": pg_journal, "n": n}, n,
             compare=("replay.pg.raw", "replay.pg.es"), needs=pgn),
        Case("replay.pg.fold", "gpu-credits fold_canonical() (one canonical read)",
             "replay:ours_fold", {"url": pg_journal, "n": n}, n,
             compare=("replay.pg.raw", "replay.pg.es"), needs=pgn),
    ]
    tables = [
        Table(f"Full replay of {n:,} events from SQLite",
              (f"replay.sqlite.raw.{n}", "replay.sqlite.es", "replay.sqlite.esdecode",
               f"replay.sqlite.replay.{n}", f"replay.sqlite.fold.{n}",
               f"replay.memory.fold.{n}")),
        Table(f"Full replay of {n:,} events from PostgreSQL",
              ("replay.pg.raw", "replay.pg.es", "replay.pg.replay", "replay.pg.fold")),
        Table("Replay throughput against journal size (SQLite; the chart)",
              tuple(f"replay.{w}.{m}" for m in sizes
                    for w in ("sqlite.raw", "sqlite.replay", "sqlite.fold", "memory.fold"))),
    ]
    targets = [
        Target("SQLite: replay() >= 0.5x raw sqlite3 read + json.loads", "ratio",
               f"replay.sqlite.replay.{n}", f"replay.sqlite.raw.{n}", 0.5,
               f"replay.sqlite.replay.{n}", "replay, baselines"),
        Target("SQLite: fold_canonical() >= 0.5x raw sqlite3 read + json.loads", "ratio",
               f"replay.sqlite.fold.{n}", f"replay.sqlite.raw.{n}", 0.5,
               f"replay.sqlite.fold.{n}", "replay, baselines"),
        Target("SQLite: replay() faster than eventsourcing reading its notification log",
               "ratio", f"replay.sqlite.replay.{n}", "replay.sqlite.es", 1.0,
               f"replay.sqlite.replay.{n}", "baselines"),
        Target("SQLite: fold_canonical() faster than eventsourcing reading its log", "ratio",
               f"replay.sqlite.fold.{n}", "replay.sqlite.es", 1.0, f"replay.sqlite.fold.{n}",
               "baselines"),
        Target(f"SQLite: replay() peak RSS < {RSS_LIMIT_MB:.0f} MB", "rss",
               f"replay.sqlite.replay.{n}", None, RSS_LIMIT_MB, None, "replay"),
        Target(f"SQLite: fold_canonical() peak RSS < {RSS_LIMIT_MB:.0f} MB", "rss",
               f"replay.sqlite.fold.{n}", None, RSS_LIMIT_MB, None, "replay"),
        Target(f"PostgreSQL: replay() peak RSS < {RSS_LIMIT_MB:.0f} MB", "rss",
               "replay.pg.replay", None, RSS_LIMIT_MB, None, "replay"),
        Target("PostgreSQL: replay() >= 0.5x raw psycopg read + json.loads",
               "ratio", "replay.pg.replay", "replay.pg.raw", 0.5, None, "replay"),
        Target("PostgreSQL: fold_canonical() >= 0.5x raw psycopg read + json.loads",
               "ratio", "replay.pg.fold", "replay.pg.raw", 0.5, None, "replay"),
        Target(f"PostgreSQL: fold_canonical() peak RSS < {RSS_LIMIT_MB:.0f} MB", "rss",
               "replay.pg.fold", None, RSS_LIMIT_MB, None, "replay"),
        Target("PostgreSQL: replay() faster than eventsourcing reading its log", "ratio",
               "replay.pg.replay", "replay.pg.es", 1.0, None, "baselines (analogy)"),
    ]
    return Scenario(
        name="replay",
        title="Full replay",
        intro=(
            f"A journal of {n:,} events of the realistic mix ({_mix_text()}) written once "
            "through `Journal.append` (untimed), then rebuilt into the `Ledger` (one fold "
            "holding both the credit book and the scheduler) by each implementation, in the "
            "same run. Arrival order is canonical order here (no late events), so replay() "
            "and fold_canonical() do the same folding; replay() also keeps the Projector's "
            "snapshots for late events. Peak RSS is that of the fresh process running the "
            "case (interpreter and imports included). The memory-fold row holds every "
            "prebuilt event in memory, so its RSS is not comparable."
        ),
        cases=cases,
        tables=tables,
        targets=targets,
        prepare=prepare,
    )


def _mix_text() -> str:
    return ("accounts opened with a grant; 8% grants expiring in 1-30 days, a third in a "
            "pool; 22% usage reports; 25% submits; 22% starts; 20% completes, 1 in 10 "
            "failing; 3% cancels; over one account per 1,000 events")


def late_scenario(cfg: Config) -> Scenario:
    s = cfg.sizes
    n, back = s.replay, s.late_back
    small = max([m for m in s.replay_sizes if m <= 100_000] or [n])
    case = Case(
        "late", "late event", "replay:late_event",
        {"path": mix_path(cfg.workdir, n), "workdir": cfg.workdir, "n": n, "back": back}, n,
        sections=(Section("full", f"full replay: a Projector catching up on {n:,} events", n),
                  Section("late", f"re-projection: one late event landing {back:,} events "
                          "before the end", 1, "late event")),
        profile_only="late",
        profile_params={"path": mix_path(cfg.workdir, small), "n": small},
    )
    return Scenario(
        name="late",
        title="A late event",
        intro=(
            f"A Projector catches up on a copy of the {n:,}-event SQLite journal (the full "
            f"replay, timed), then a usage report whose event time lands {back:,} events "
            "before the end is appended (untimed) and ingested (timed): the Projector "
            "takes its account's state from the nearest snapshot before the late event, "
            "re-folds that account's events from there with the late event, and compares "
            "each later outcome with the one it reported to find the revisions. Both "
            "timings come from the same process and the same run."
        ),
        cases=[case],
        tables=[Table(f"Late event in a {n:,}-event journal", ("late/full", "late/late"))],
        targets=[Target("late event re-projection >= 1,000x faster than a full replay",
                        "speedup", "late/late", "late/full", 1000.0, "late", "replay")],
        prepare=[_prepare(cfg, "sqlite", m) for m in sorted({small, n})],
    )
