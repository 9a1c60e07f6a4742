"""The compiled fold (projections.native): chosen only when it matches its source, never
mixed with it, forced off by GPU_CREDITS_PURE_PYTHON, and giving what the source gives."""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from projections import native

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "projections"
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _built() -> bool:
    return native.stale_modules(PACKAGE) == []


def _require_build() -> None:
    """The tests that need a compiled build skip without one, except under CI=true: there
    the build must have happened (make venv compiles it), or the compiled fold goes
    untested."""
    if _built():
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("no compiled build of the fold under CI=true: setup.py did not compile "
                    f"{', '.join(native.COMPILED)}")
    pytest.skip("no compiled build of the fold (setup.py did not compile it)")


def _python(code: str, *, pure: bool | None, path: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    if pure:
        env[native.PURE_ENV] = "1"
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=path or ROOT,
                          capture_output=True, text=True, timeout=300)


WHICH = ("import projections, projections.native as n, projections.ledger as l, "
         "projections.creditbook as c; print(n.in_use(), l.__file__, c.__file__)")


# -- choosing, on a package folder made here --------------------------------------------------


def _fake_package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    for module in native.COMPILED:
        native.source_path(module, root).write_text(f"NAME = {module!r}\n")
        (root / (module.rpartition(".")[2] + SUFFIX)).write_bytes(b"")
    record = {m: native.source_hash(native.source_path(m, root)) for m in native.COMPILED}
    (root / native.BUILD_RECORD).write_text(json.dumps(record))
    return root


def test_a_build_that_matches_every_source_is_chosen(tmp_path: Path) -> None:
    assert native.stale_modules(_fake_package(tmp_path)) == []


def test_an_edited_source_makes_its_build_stale(tmp_path: Path) -> None:
    root = _fake_package(tmp_path)
    native.source_path("projections.ledger", root).write_text("NAME = 'edited'\n")
    assert native.stale_modules(root) == ["projections.ledger"]


def test_a_build_without_its_record_or_with_a_module_missing_is_not_trusted(
        tmp_path: Path) -> None:
    root = _fake_package(tmp_path)
    (root / ("creditbook" + SUFFIX)).unlink()
    assert native.stale_modules(root) == ["projections.creditbook"]
    (root / native.BUILD_RECORD).unlink()
    assert native.stale_modules(root) == list(native.COMPILED)


def test_without_any_compiled_module_there_is_nothing_to_warn_of(tmp_path: Path) -> None:
    root = _fake_package(tmp_path)
    for module in native.COMPILED:
        (root / (module.rpartition(".")[2] + SUFFIX)).unlink()
    assert native.stale_modules(root) is None


def test_the_source_finder_loads_exactly_the_fold_from_its_source(tmp_path: Path) -> None:
    root = _fake_package(tmp_path)
    finder = native.SourceFinder(root, native.COMPILED)
    spec = finder.find_spec("projections.ledger", None)
    assert spec is not None and spec.origin == str(root / "ledger.py")
    assert finder.find_spec("projections.replay", None) is None


@pytest.mark.parametrize("value, pure", [("", False), ("0", False), ("1", True),
                                         ("yes", True)])
def test_the_switch(value: str, pure: bool) -> None:
    assert native.pure_requested({native.PURE_ENV: value}) is pure
    assert native.pure_requested({}) is False


def test_the_makefile_rebuilds_when_a_compiled_source_changes() -> None:
    makefile = (ROOT / "Makefile").read_text()
    found = re.search(r"^FOLD_SOURCES := (.*?)(?<!\\)$", makefile, re.M | re.S)
    assert found is not None
    listed = set(found.group(1).replace("\\\n", " ").split())
    wanted = {f"projections/{m.rpartition('.')[2]}.py" for m in native.COMPILED}
    assert listed == wanted | {"projections/native.py"}
    assert re.search(r"^\$\(STAMP\): .*\$\(FOLD_SOURCES\)", makefile, re.M)


# -- the real build ----------------------------------------------------------------------------


def test_the_switch_runs_the_source_even_beside_a_build() -> None:
    done = _python(WHICH, pure=True)
    assert done.returncode == 0, done.stderr
    in_use, ledger, creditbook = done.stdout.split()
    assert in_use == "False"
    assert ledger.endswith("ledger.py") and creditbook.endswith("creditbook.py")
    assert "RuntimeWarning" not in done.stderr


def test_a_matching_build_is_what_runs() -> None:
    _require_build()
    done = _python(WHICH, pure=False)
    assert done.returncode == 0, done.stderr
    in_use, ledger, creditbook = done.stdout.split()
    assert in_use == "True"
    assert not ledger.endswith(".py") and not creditbook.endswith(".py")


def test_an_edited_source_runs_instead_of_its_stale_build_with_a_warning(
        tmp_path: Path) -> None:
    _require_build()
    # A copy of the package with its build, one source edited after the build.
    copy = tmp_path / "tree"
    copy.mkdir()
    for name in ("projections", "eventstore"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    ledger = copy / "projections" / "ledger.py"
    ledger.write_text(ledger.read_text() + "\nEDITED_SINCE_THE_BUILD = True\n")
    done = _python(WHICH + "; print(l.EDITED_SINCE_THE_BUILD)", pure=False, path=copy)
    assert done.returncode == 0, done.stderr
    in_use, ledger_file, creditbook_file, edited = done.stdout.split()
    # All of it from the source, not only the edited module: a mix would run two folds.
    assert (in_use, edited) == ("False", "True")
    assert ledger_file == str(ledger) and creditbook_file.endswith("creditbook.py")
    assert "RuntimeWarning" in done.stderr and "projections.ledger" in done.stderr


# -- the same answers, compiled and not -----------------------------------------------------------

DIGESTS = """
import dataclasses, json
from eventstore import MemoryJournal, NewEvent
from projections.replay import fold_canonical, replay
from tools.bench.workload import realistic_mix, with_late_arrivals
from tools.sim import run
out = {}
for seed in (1, 7):
    out[f"sim {seed}"] = run(seed, 600).digest
journal = MemoryJournal()
for e in with_late_arrivals(realistic_mix(4000, seed=3), 0.1, max_delay=200):
    journal.append([NewEvent(e.id, e.stream, e.type, e.time, e.fields)])
report = replay(journal)
out["replay"] = [report.digest, len(report.revisions), len(report.anomalies),
                 [dataclasses.asdict(r) for r in report.revisions][:50]]
out["fold"] = fold_canonical(journal).digest()
print(json.dumps(out, sort_keys=True))
"""


def test_the_compiled_fold_gives_the_sources_digests_and_revisions() -> None:
    """The simulator's journals (every kind of event, faults, late and duplicated
    deliveries) and a mix with late arrivals: the same digests and revisions from the
    compiled build as from the source."""
    _require_build()
    compiled, pure = _python(DIGESTS, pure=False), _python(DIGESTS, pure=True)
    assert compiled.returncode == 0, compiled.stderr
    assert pure.returncode == 0, pure.stderr
    got, expected = json.loads(compiled.stdout), json.loads(pure.stdout)
    assert got["replay"][1] > 0  # the late arrivals did revise something
    assert got == expected


# -- checkpoints, whichever build wrote them -------------------------------------------------------

SCHEMA = """
import json
from projections.ledger import STATE
print(json.dumps(STATE.schema()))
"""


def test_the_source_encodes_state_in_the_declared_field_order() -> None:
    """A plain state class's `STATE_FIELDS` is the order a checkpoint lists its fields in,
    also where the class keeps its `__slots__` (the source, whose slots may be ordered
    otherwise): a compiled class keeps no slots, so only that declaration is the same
    in both builds."""
    from projections.ledger import STATE_CLASSES

    done = _python(SCHEMA, pure=True)
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    declared = {cls.__name__: list(cls.__dict__["STATE_FIELDS"]) for cls in STATE_CLASSES
                if "STATE_FIELDS" in cls.__dict__}
    assert {"JobState", "Batch", "Hold"} <= set(declared)
    assert {name: schema[name] for name in declared} == declared


def test_the_state_schema_is_the_same_compiled_or_not() -> None:
    _require_build()
    compiled, pure = _python(SCHEMA, pure=False), _python(SCHEMA, pure=True)
    assert compiled.returncode == 0, compiled.stderr
    assert pure.returncode == 0, pure.stderr
    assert json.loads(compiled.stdout) == json.loads(pure.stdout)


CHECKPOINT_STEP = """
import json
from eventstore import Journal
from projections.checkpoint import latest_valid_checkpoint
from projections.replay import fold_canonical, replay, verify
journal = Journal({url!r})
if {save!r}:
    replay(journal, checkpoint=True)
report = verify(journal)
found = latest_valid_checkpoint(journal)
print(json.dumps([report.ok, report.problem, report.checked_checkpoints,
                  found is not None and found[1].digest() == fold_canonical(journal).digest()]))
"""


@pytest.mark.parametrize("writer_pure", [True, False], ids=["pure-writes", "compiled-writes"])
def test_a_checkpoint_written_by_one_build_is_read_by_the_other(
        tmp_path: Path, writer_pure: bool) -> None:
    _require_build()
    from eventstore import Journal, NewEvent
    from tools.bench.workload import realistic_mix

    url = f"sqlite:///{tmp_path / 'j.db'}"
    journal = Journal(url)
    for e in realistic_mix(300, seed=5):
        journal.append([NewEvent(e.id, e.stream, e.type, e.time, e.fields)])
    journal.close()
    wrote = _python(CHECKPOINT_STEP.format(url=url, save=True), pure=writer_pure)
    assert wrote.returncode == 0, wrote.stderr
    ok, problem, _, loaded = json.loads(wrote.stdout)
    assert (ok, problem, loaded) == (True, None, True)
    read = _python(CHECKPOINT_STEP.format(url=url, save=False), pure=not writer_pure)
    assert read.returncode == 0, read.stderr
    ok, problem, checked, loaded = json.loads(read.stdout)
    assert (ok, problem) == (True, None)
    assert checked >= 1 and loaded  # read and used, not ignored
    assert "ignored" not in read.stderr


def test_declared_fields_that_are_not_the_slots_are_refused() -> None:
    from projections.statecopy import StateCodec

    class Listed:
        __slots__ = ("a", "b")
        STATE_FIELDS = ("b", "a")

    class Misnamed:
        __slots__ = ("a", "b")
        STATE_FIELDS = ("a", "c")

    assert StateCodec([Listed]).schema() == {"Listed": ["b", "a"]}
    with pytest.raises(TypeError, match="STATE_FIELDS"):
        StateCodec([Misnamed])
