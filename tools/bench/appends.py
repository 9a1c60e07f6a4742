"""Journal appends (journal and baselines): durable one-event transactions and batches of 1,000,
on a SQLite file (WAL, synchronous=FULL) and on PostgreSQL, beside the raw drivers and
`eventsourcing` doing the same writes; then reading one account back beside
`eventsourcing` reconstructing its aggregates.

Every run writes into a fresh SQLite file or PostgreSQL schema (created and removed
outside the timed part).
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Any

from tools.bench.runner import Case, Config, Scenario, Table, Target, Timing
from tools.bench.storage import Place
from tools.bench.workload import MixEvent, credit_events

ACCOUNTS = 100
BACKENDS = (("sqlite", "SQLite"), ("pg", "PostgreSQL"))


def _new_events(events: list[MixEvent]) -> list[Any]:
    from eventstore import NewEvent

    return [NewEvent(e.id, e.stream, e.type, e.time, e.fields) for e in events]


_CLEANUPS: list[Callable[[], None]] = []


def _at_exit(*steps: Callable[[], object]) -> None:
    """Run these when the case's process ends (it keeps one database for all its runs)."""

    def run() -> None:
        while steps_left:
            steps_left.pop(0)()

    steps_left = list(steps)
    _CLEANUPS.append(run)
    atexit.register(run)


def release() -> None:
    """Close the databases kept for the read-back cases (for in-process runs)."""
    while _CLEANUPS:
        _CLEANUPS.pop()()
    _READ_BACK.clear()
    _ES_BACK.clear()


def _names() -> list[str]:
    from tools.bench.workload import account_name

    return [account_name(i) for i in range(ACCOUNTS)]


# -- ours ------------------------------------------------------------------------------


def journal_single(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int) -> None:
    """Journal.append([event]) n times: one durable transaction per event."""
    from eventstore import Journal

    events = _new_events(credit_events(n, ACCOUNTS))
    with Place(kind, workdir, pg_url, "j1") as place:
        journal = Journal(place.url)
        try:
            with t.measure():
                for e in events:
                    journal.append([e])
        finally:
            journal.close()


def journal_batched(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int,
                    batch: int) -> None:
    """Journal.append(batch) for batches of `batch` events."""
    from eventstore import Journal

    events = _new_events(credit_events(n, ACCOUNTS))
    with Place(kind, workdir, pg_url, "jn") as place:
        journal = Journal(place.url)
        try:
            with t.measure():
                for i in range(0, n, batch):
                    journal.append(events[i : i + batch])
        finally:
            journal.close()


_READ_BACK: dict[tuple[Any, ...], Any] = {}  # one journal per process and parameters


def journal_streams(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int,
                    batch: int) -> None:
    """Rebuild every account from its own stream: Journal.read(stream=...) folded into a
    fresh Ledger (the journal is written once per process, untimed)."""
    from eventstore import Journal
    from projections import Ledger
    from projections.projector import apply_recorded

    key = (kind, workdir, pg_url, n, batch)
    if key not in _READ_BACK:
        place = Place(kind, workdir, pg_url, "jr").__enter__()
        journal = Journal(place.url)
        events = _new_events(credit_events(n, ACCOUNTS))
        for i in range(0, n, batch):
            journal.append(events[i : i + batch])
        _READ_BACK[key] = journal
        _at_exit(journal.close, place.__exit__)
    journal = _READ_BACK[key]
    total = 0
    with t.measure():
        for name in _names():
            ledger = Ledger()
            for rec in journal.read(stream=name):
                apply_recorded(ledger, rec)
            total += ledger.applied
    t.note("events read back", total)


# -- raw drivers -----------------------------------------------------------------------


def _raw(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int, tag: str,
         write: Callable[[Any, list[MixEvent]], None]) -> None:
    """Time `write(connection, events)` on a fresh database of the raw driver of `kind`."""
    from tools.bench import rawdb

    events = credit_events(n, ACCOUNTS)
    with Place(kind, workdir, pg_url, tag) as place:
        conn = (rawdb.sqlite_connect(place.sqlite_path, create=True) if kind == "sqlite"
                else rawdb.pg_connect(place.dsn, place.schema, create=True))
        try:
            with t.measure():
                write(conn, events)
        finally:
            conn.close()


def raw_single(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int) -> None:
    """The raw driver: one INSERT per commit."""
    from tools.bench import rawdb

    write = rawdb.sqlite_one_per_commit if kind == "sqlite" else rawdb.pg_one_per_commit
    _raw(t, kind, workdir, pg_url, n, "r1", write)


def raw_batched(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int,
                batch: int, method: str = "executemany") -> None:
    """The raw driver: executemany (or COPY) of `batch` rows per commit."""
    from tools.bench import rawdb

    if kind == "sqlite":
        write = rawdb.sqlite_executemany
    else:
        write = rawdb.pg_copy if method == "copy" else rawdb.pg_executemany
    _raw(t, kind, workdir, pg_url, n, "rn", lambda conn, events: write(conn, events, batch))


# -- eventsourcing ---------------------------------------------------------------------


def _es(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int, tag: str,
        save: Callable[[Any, dict[str, Any], list[MixEvent]], object]) -> None:
    """Time `save(app, accounts, events)` in a fresh eventsourcing application whose
    accounts exist beforehand."""
    from tools.bench import esapp

    events = credit_events(n, ACCOUNTS)
    with Place(kind, workdir, pg_url, tag) as place:
        app = esapp.open_app(place.es_env)
        try:
            accounts = esapp.create_accounts(app, _names())
            with t.measure():
                save(app, accounts, events)
        finally:
            app.close()


def es_single(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int) -> None:
    """eventsourcing: one aggregate event per save (the accounts exist beforehand)."""
    from tools.bench import esapp

    _es(t, kind, workdir, pg_url, n, "e1", esapp.save_each)


def es_batched(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int,
               per_save: int) -> None:
    """eventsourcing: `per_save` aggregate events per save."""
    from tools.bench import esapp

    _es(t, kind, workdir, pg_url, n, "en",
        lambda app, accounts, events: esapp.save_batched(app, accounts, events, per_save))


_ES_BACK: dict[tuple[Any, ...], Any] = {}


def es_reconstruct(t: Timing, kind: str, workdir: str, pg_url: str | None, n: int,
                   per_save: int) -> None:
    """eventsourcing: repository.get for every account (written once per process)."""
    from tools.bench import esapp

    key = (kind, workdir, pg_url, n, per_save)
    if key not in _ES_BACK:
        place = Place(kind, workdir, pg_url, "er").__enter__()
        app = esapp.open_app(place.es_env)
        accounts = esapp.create_accounts(app, _names())
        esapp.save_batched(app, accounts, credit_events(n, ACCOUNTS), per_save)
        _ES_BACK[key] = app
        _at_exit(app.close, place.__exit__)
    app = _ES_BACK[key]
    with t.measure():
        total = esapp.reconstruct(app, _names())
    t.note("events read back", total)


# -- the scenario ----------------------------------------------------------------------


def scenario(cfg: Config) -> Scenario:
    s = cfg.sizes
    n1, nb, b, per = s.append_single, s.append_batched, s.append_batch, s.es_per_save
    cases: list[Case] = []
    tables: list[Table] = []
    targets: list[Target] = []
    for kind, db in BACKENDS:
        base = {"kind": kind, "workdir": cfg.workdir,
                "pg_url": cfg.pg_url if kind == "pg" else None}
        pg = frozenset({"pg"}) if kind == "pg" else frozenset()
        k = f"appends.{kind}"
        drv = "raw sqlite3" if kind == "sqlite" else "raw psycopg"
        one = {**base, "n": n1}
        many = {**base, "n": nb, "batch": b}
        cases += [
            Case(f"{k}.raw1", f"{drv}: 1 row per commit", "appends:raw_single", one, n1,
                 baseline=True, needs=pg, short=f"{drv} 1/commit"),
            Case(f"{k}.es1", "eventsourcing: 1 event per save", "appends:es_single", one, n1,
                 baseline=True, needs=pg | {"es"}, short="eventsourcing 1/save"),
            Case(f"{k}.ours1", "gpu-credits Journal: 1 event per append", "appends:journal_single",
                 one, n1, compare=(f"{k}.raw1", f"{k}.es1"), needs=pg),
            Case(f"{k}.rawN", f"{drv}: executemany, {b} rows per commit",
                 "appends:raw_batched", many, nb, baseline=True, needs=pg,
                 short=f"{drv} executemany"),
        ]
        if kind == "pg":
            cases.append(Case(f"{k}.copyN", f"raw psycopg: COPY, {b} rows per commit",
                              "appends:raw_batched", {**many, "method": "copy"}, nb,
                              baseline=True, needs=pg, short="psycopg COPY"))
        cases += [
            Case(f"{k}.esN", f"eventsourcing: {per} events per save", "appends:es_batched",
                 {**base, "n": nb, "per_save": per}, nb, baseline=True, needs=pg | {"es"},
                 short=f"eventsourcing {per}/save"),
            Case(f"{k}.oursN", f"gpu-credits Journal: {b} events per append",
                 "appends:journal_batched", many, nb,
                 compare=(f"{k}.rawN", *((f"{k}.copyN",) if kind == "pg" else ()), f"{k}.esN"),
                 needs=pg, profile_params={"n": min(nb, 20_000)}),
            Case(f"{k}.esR", f"eventsourcing: repository.get of all {ACCOUNTS} accounts",
                 "appends:es_reconstruct", {**base, "n": nb, "per_save": per}, nb,
                 baseline=True, needs=pg | {"es"}, short="eventsourcing repository.get"),
            Case(f"{k}.oursR", f"gpu-credits: Journal.read(stream=...) + Ledger fold, all "
                 f"{ACCOUNTS} accounts", "appends:journal_streams", many, nb,
                 compare=(f"{k}.esR",), needs=pg),
        ]
        rows = [f"{k}.raw1", f"{k}.es1", f"{k}.ours1", f"{k}.rawN",
                *((f"{k}.copyN",) if kind == "pg" else ()), f"{k}.esN", f"{k}.oursN"]
        tables.append(Table(f"Appends on {db}", tuple(rows)))
        tables.append(Table(f"Reading accounts back on {db} ({nb:,} events, {ACCOUNTS} "
                            "accounts)", (f"{k}.esR", f"{k}.oursR")))
        raw = "raw sqlite3" if kind == "sqlite" else "raw psycopg"
        targets += [
            Target(f"{db}: 1 event per transaction >= 0.7x {raw} 1 row per commit", "ratio",
                   f"{k}.ours1", f"{k}.raw1", 0.7, f"{k}.ours1", "journal, baselines"),
            Target(f"{db}: 1 event per transaction >= 1.5x eventsourcing 1 event per save",
                   "ratio", f"{k}.ours1", f"{k}.es1", 1.5, f"{k}.ours1", "baselines"),
            Target(f"{db}: batches of {b} >= 0.5x {raw} executemany", "ratio", f"{k}.oursN",
                   f"{k}.rawN", 0.5, f"{k}.oursN", "journal, baselines"),
            Target(f"{db}: batches of {b} >= 1.5x eventsourcing {per} events per save", "ratio",
                   f"{k}.oursN", f"{k}.esN", 1.5, f"{k}.oursN", "baselines"),
        ]
    return Scenario(
        name="appends",
        title="Journal appends",
        intro=(
            f"{nb:,} small grant/consume events over {ACCOUNTS} accounts appended in batches "
            f"of {b} (one transaction each), and {n1:,} appended one event per transaction "
            "(durable: every commit waits for the disk, so this rate is set by fsync latency "
            "and a larger count only takes longer). SQLite: a file in WAL mode with "
            "synchronous=FULL for everyone (the journal's default; eventsourcing's SQLite "
            "also runs WAL and the default synchronous=FULL). PostgreSQL: a fresh schema per "
            "run, synchronous_commit on. The raw drivers write the same rows (same table, "
            "indexes and unique constraints, canonical JSON payload, a chained SHA-256 per "
            "row) with none of the journal's checks: no idempotency lookup, no stream "
            "version query, no head row. eventsourcing saves an Account aggregate's "
            "Granted/Consumed events."
        ),
        cases=cases,
        tables=tables,
        targets=targets,
    )
