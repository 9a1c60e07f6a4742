"""Imports and late arrivals: a large file's memory, and how replay copes with events that
arrive out of time order.

- `gpu-credits import` of a JSON Lines file of the realistic mix, run in the case's own
  process as a user runs it (checking, appending, then projecting the new events): its
  peak RSS is the import's.
- Late arrivals through imports: the same events of the mix imported (untimed setup) into
  three SQLite journals: one file in time order; the file shuffled; the events split into
  two files whose times interleave, imported one after the other. Then `replay()` of each,
  in the same run: the shuffled and the interleaved journals against the one in order.
  Every journal holds the same events under the same ids, so the three replays must give
  the same digest (the report shows it). Beside them (the `arrivals` scenario, so the three
  late-arrival targets run together and alone): the mix with 2% of its events arriving a
  little late, against the same mix in time order.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path

from tools.bench.replay import LATE_FRACTION, late_mix_path, mix_path
from tools.bench.runner import Call, Case, Config, Scenario, Table, Target, Timing
from tools.bench.storage import remove_sqlite, sqlite_url
from tools.bench.workload import MixEvent, realistic_mix

IMPORT_RSS_LIMIT_MB = 300.0

ORDERS = ("ordered", "shuffled", "two-files")


def _line(e: MixEvent) -> str:
    return json.dumps({"type": e.type, "id": e.id, "time": e.time, **e.fields},
                      separators=(",", ":"))


def _write(path: Path, events: Iterable[MixEvent]) -> int:
    count = 0
    with path.open("w") as out:
        for e in events:
            out.write(_line(e) + "\n")
            count += 1
    return count


def file_path(workdir: str, n: int, name: str) -> Path:
    return Path(workdir) / f"import-{n}-{name}.jsonl"


def db_path(workdir: str, n: int, order: str) -> Path:
    return Path(workdir) / f"imported-{n}-{order}.db"


def write_import_file(t: Timing, workdir: str, n: int) -> None:
    """The mix of n events as one JSON Lines file, in time order (untimed setup)."""
    t.note("lines", _write(file_path(workdir, n, "big"), realistic_mix(n)))


def build_imported(t: Timing, workdir: str, n: int) -> None:
    """The mix imported three ways into three journals (untimed setup)."""
    from eventstore import Journal
    from projections.importing import import_stream

    events = list(realistic_mix(n))
    shuffled = list(events)
    random.Random(12).shuffle(shuffled)
    _write(file_path(workdir, n, "ordered"), events)
    _write(file_path(workdir, n, "shuffled"), shuffled)
    # Accounts alternate between two files, each in time order: their times interleave.
    _write(file_path(workdir, n, "first"), (e for e in events if half(e) == 0))
    _write(file_path(workdir, n, "second"), (e for e in events if half(e) == 1))
    files = {"ordered": ["ordered"], "shuffled": ["shuffled"],
             "two-files": ["first", "second"]}
    for order, names in files.items():
        path = db_path(workdir, n, order)
        remove_sqlite(path)
        journal = Journal(sqlite_url(path))
        try:
            for name in names:
                with file_path(workdir, n, name).open("rb") as stream:
                    import_stream(journal, stream, name)
            t.note(f"{order} events", journal.head())
        finally:
            journal.close()


def half(e: MixEvent) -> int:
    """Which of the two files an event goes to: by its stream (an account), so each
    account's jobs stay in one file."""
    return int(e.stream.rsplit("-", 1)[-1]) % 2 if e.stream.startswith("acct-") else 0


def cli_import(t: Timing, workdir: str, n: int) -> None:
    """`gpu-credits import FILE` into a fresh SQLite journal, in this process."""
    from tools.cli import app

    db = db_path(workdir, n, "cli")
    remove_sqlite(db)
    try:
        with t.measure():
            code = app(["--db", sqlite_url(db), "import", str(file_path(workdir, n, "big"))],
                       standalone_mode=False)
        if code != 0:
            raise RuntimeError(f"gpu-credits import exited with {code}")
    finally:
        remove_sqlite(db)


def replay_imported(t: Timing, workdir: str, n: int, order: str) -> None:
    """`replay()` of one of the imported journals (untimed: it must end in the state of
    the journal imported in order)."""
    from eventstore import Journal
    from projections.replay import fold_canonical, replay

    journal = Journal(sqlite_url(db_path(workdir, n, order)))
    try:
        with t.measure():
            report = replay(journal)
    finally:
        journal.close()
    ordered = Journal(sqlite_url(db_path(workdir, n, "ordered")))
    try:
        expected = fold_canonical(ordered).digest()
    finally:
        ordered.close()
    if report.digest != expected:
        raise AssertionError(f"replay() of the {order} import gives digest "
                             f"{report.digest[:16]}, the ordered import {expected[:16]}")
    t.note("revisions", len(report.revisions))


def scenario(cfg: Config) -> Scenario:
    n, wd = cfg.sizes.import_lines, cfg.workdir
    return Scenario(
        name="imports",
        title="Imports",
        intro=(
            f"`gpu-credits import` of a {n:,}-line JSON Lines file of the realistic mix into "
            "a fresh SQLite journal, run once in its own process as a user runs it "
            "(checking every line, appending, then projecting the new events: the peak "
            "RSS covers all three)."
        ),
        cases=[Case(f"import.cli.{n}", f"gpu-credits import of {n:,} lines (check, append, "
                    "project)", "imports:cli_import", {"workdir": wd, "n": n}, n,
                    unit="lines", runs=1)],
        tables=[Table(f"Import of {n:,} lines", (f"import.cli.{n}",))],
        targets=[Target(f"import of {n:,} lines: peak RSS < {IMPORT_RSS_LIMIT_MB:.0f} MB",
                        "rss", f"import.cli.{n}", None, IMPORT_RSS_LIMIT_MB, None, "imports")],
        prepare=[Call(f"write the {n:,}-line import file", "imports:write_import_file",
                      {"workdir": wd, "n": n})],
    )


def arrivals_scenario(cfg: Config) -> Scenario:
    """The three late-arrival targets side by side, each against the same events replayed
    in time order in the same run: a shuffled import, two interleaving imports, and a
    journal where 2% of the events arrive a little late."""
    s = cfg.sizes
    m, wd = s.late_import, cfg.workdir
    small = max([k for k in s.replay_sizes if k <= 100_000] or [s.replay])
    labels = {"ordered": "replay() of one file imported in time order",
              "shuffled": "replay() of the same file shuffled",
              "two-files": "replay() of two files with interleaving times"}
    cases = [Case(f"import.replay.{order}", labels[order], "imports:replay_imported",
                  {"workdir": wd, "n": m, "order": order}, m, baseline=order == "ordered",
                  compare=() if order == "ordered" else ("import.replay.ordered",),
                  profile_params={"workdir": wd, "n": m, "order": order})
             for order in ORDERS]
    ordered_url, late_url = sqlite_url(mix_path(wd, small)), sqlite_url(late_mix_path(wd, small))
    cases += [
        Case("arrivals.inorder", "replay() of the mix, every event in time order",
             "replay:ours_replay", {"url": ordered_url, "n": small}, small, baseline=True),
        Case("arrivals.late", f"replay() of the same mix, {LATE_FRACTION:.0%} of it arriving "
             "1-20 events late", "replay:ours_replay",
             {"url": late_url, "n": small}, small, compare=("arrivals.inorder",),
             profile_params={"url": late_url, "n": small}),
    ]
    return Scenario(
        name="arrivals",
        title="Late arrivals",
        intro=(
            f"The same {m:,} events of the mix imported (untimed) three ways: one file in "
            "time order, the same file shuffled, and the events split by account into two "
            "files imported one after the other, whose times interleave; `replay()` of each "
            "journal in the same run, each ending in the ordered journal's state (same "
            f"digest) or the case fails. Then the {small:,}-event mix appended in time order "
            f"and again with {LATE_FRACTION:.0%} of its events arriving 1-20 events late, "
            "and `replay()` of both."
        ),
        cases=cases,
        tables=[
            Table(f"Replay of {m:,} imported events, by arrival order (SQLite)",
                  tuple(f"import.replay.{o}" for o in ORDERS),
                  "A shuffled import holds almost only late events; the second of two "
                  "interleaving files lands, event by event, before events of the first."),
            Table(f"Replay of {small:,} events, {LATE_FRACTION:.0%} of them arriving late "
                  "(SQLite)", ("arrivals.inorder", "arrivals.late")),
        ],
        targets=[
            Target("a shuffled file's import replays within 2x of the same events in order",
                   "ratio", "import.replay.shuffled", "import.replay.ordered", 0.5,
                   "import.replay.shuffled", "late arrivals"),
            Target("two interleaving files replay within 3x of the same events in order",
                   "ratio", "import.replay.two-files", "import.replay.ordered", 1 / 3,
                   "import.replay.two-files", "late arrivals"),
            Target(f"a journal where {LATE_FRACTION:.0%} arrive late replays within 1.5x of "
                   "the same events in time order", "ratio", "arrivals.late",
                   "arrivals.inorder", 1 / 1.5, "arrivals.late", "late arrivals"),
        ],
        prepare=[
            Call(f"import the {m:,}-event mix in order, shuffled and as two files",
                 "imports:build_imported", {"workdir": wd, "n": m}),
            Call(f"write the {small:,}-event mix to our journal on sqlite",
                 "replay:build_journal", {"kind": "sqlite", "workdir": wd, "pg_url": None,
                                          "n": small}),
            Call(f"write the {small:,}-event mix to SQLite, {LATE_FRACTION:.0%} of it "
                 "arriving late", "replay:build_late_journal", {"workdir": wd, "n": small}),
        ],
    )
