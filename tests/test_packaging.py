"""What a user who installs the package, rather than cloning the repository, receives.

A wheel packs setuptools' build folder, so `setup.py build` into a temporary folder shows
what a wheel built from this checkout would hold, without the wheel machinery. The fast
tests build as plain Python with no C compiler; the slow one builds the real wheel, with
the compiled fold, the way `pip install` does: it runs with GPU_CREDITS_BUILD_WHEEL=1
(mypyc compiling the fold took both cores for 80 s of a 22-minute `make test` here).
"""

from __future__ import annotations

import fnmatch
import importlib.machinery
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from projections import native

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL = ("eventstore", "projections", "tools", "migrations")
"""The distribution's top-level packages (CONTRACT.md, "Layout")."""

SO = importlib.machinery.EXTENSION_SUFFIXES[0]
BUILT = ("__pycache__", "*.pyc", "*.so", "*.pyd", native.BUILD_RECORD)


def _source(tmp_path: Path) -> Path:
    """A copy of what the distribution is built from, without the build products a
    working checkout has beside its sources (and so without touching this checkout)."""
    src = tmp_path / "src"
    for top in TOP_LEVEL:
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns(*BUILT))
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy2(ROOT / name, src / name)
    return src


def _package_files(src: Path) -> set[str]:
    """Every file of the four packages: modules, templates, static files, migrations; not
    what running setup.py left beside them (it imports projections/native.py, and where
    bytecode is written that leaves a .pyc in the copy)."""
    return {p.relative_to(src).as_posix() for top in TOP_LEVEL
            for p in (src / top).rglob("*") if p.is_file() and not any(
                fnmatch.fnmatch(part, pattern) for part in p.relative_to(src).parts
                for pattern in BUILT)}


def _setup(src: Path, *args: str) -> str:
    """Run setup.py on `src`; its standard error (warnings included)."""
    # No C compiler (the accelerators are optional) and the fold as plain Python: seconds.
    env = {**os.environ, native.PURE_ENV: "1", "CC": "/bin/false", "LDSHARED": "/bin/false"}
    done = subprocess.run([sys.executable, "setup.py", *args], cwd=src, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _tree(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_the_build_holds_every_package_whole_and_nothing_else(tmp_path: Path) -> None:
    src = _source(tmp_path)
    warnings = _setup(src, "-q", "build_py", "--build-lib", "out")
    built = _tree(src / "out")
    assert built == _package_files(src)
    # every install prints what setuptools says here: a data directory it does not list
    # as a package costs a screen of "Package would be ignored" each
    assert "Package would be ignored" not in warnings, warnings[-3000:]
    # what the command line, the service and the web view read at run time
    assert {"projections/queries/__init__.py", "tools/sim/__main__.py",
            "tools/web/templates/base.html", "tools/web/static/web.css",
            "tools/web/static/vendor/htmx/htmx.min.js",
            "tools/web/static/vendor/uplot/uPlot.iife.min.js",
            "tools/service/static/swagger-ui/swagger-ui-bundle.js",
            "tools/service/static/swagger-ui/docs-init.js",
            "migrations/alembic.ini", "migrations/script.py.mako",
            "migrations/versions/0001_journal.py"} <= built


def test_a_build_leaves_nothing_of_an_earlier_one_in_the_build_folder(tmp_path: Path) -> None:
    src = _source(tmp_path)
    lib = src / "build" / "lib"
    # an earlier build: the compiled fold with its record, and a module deleted since
    stale = ["projections/gone.py", f"projections/ledger{SO}", f"projections/fold__mypyc{SO}",
             f"projections/{native.BUILD_RECORD}", "tools/old/__init__.py"]
    for name in stale:
        (lib / name).parent.mkdir(parents=True, exist_ok=True)
        (lib / name).write_text("earlier build\n")
    _setup(src, "-q", "build", "--build-lib", "build/lib")
    assert _tree(lib) == _package_files(src)


def test_a_plain_python_build_in_place_leaves_no_compiled_fold_to_vouch_for(
        tmp_path: Path) -> None:
    """An editable install rebuilt as plain Python after a source edit: the compiled
    modules of the earlier build must not stay beside the sources with a record that
    names the edited ones (they would run, taken for a build of those sources)."""
    src = _source(tmp_path)
    for module in (*native.COMPILED, "projections.fold__mypyc"):
        (src / "projections" / (module.rpartition(".")[2] + SO)).write_text("earlier build\n")
    _setup(src, "-q", "build_ext", "--inplace")
    assert native.stale_modules(src / "projections") is None
    assert not (src / "projections" / native.BUILD_RECORD).exists()


def test_only_a_build_translates_the_fold(tmp_path: Path) -> None:
    """pip runs setup.py for its build requirements and its metadata before the build:
    those two must not type-check and translate the fold to C (mypyc writes its C into
    build/), which doubled an install's time; the build itself must."""
    src = _source(tmp_path)
    env = {**os.environ, "CC": "/bin/false", "LDSHARED": "/bin/false"}
    env.pop(native.PURE_ENV, None)
    # (dist_info, the metadata hook's command, takes the same path but needs the wheel
    # package, which the test environment does not install)
    done = subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base",
                           str(tmp_path)], cwd=src, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (src / "build").exists(), _tree(src / "build")
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
                          cwd=src, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert any(name.endswith(".c") for name in _tree(src / "build")), done.stderr[-3000:]


def test_the_sdist_holds_the_packages_and_no_part_of_the_test_suite(tmp_path: Path) -> None:
    src = _source(tmp_path)
    (src / "tests").mkdir()
    (src / "tests" / "test_probe.py").write_text("def test_probe() -> None: ...\n")
    _setup(src, "-q", "sdist", "--formats", "gztar", "--dist-dir", "dist")
    (archive,) = (src / "dist").glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        names = {n.partition("/")[2] for n in tar.getnames()}
    assert not {n for n in names if n.startswith("tests")}
    assert _package_files(src) <= names
    assert {"setup.py", "pyproject.toml", "README.md"} <= names


FLOORS = {"typer": (0, 18), "rich": (14, 3), "fastapi": (0, 124)}
"""The oldest versions the installed package runs on, found by installing the wheel with
each dependency at its floor (docs/operations.md, "Installing as a package"): with the
click of today typer 0.12 to 0.15 fail at --help and 0.16 to 0.17 pass a missing
argument on as None; rich before 14 has no `Column.highlight` (every table failed) and
14.0 to 14.2 draw tables a space wider per column; fastapi before 0.124 cannot resolve
the token check's annotations (each /v1 read answered 422, /openapi.json 500)."""


def _floor(requirement: str) -> tuple[str, tuple[int, ...]]:
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?>=([0-9.]+)(?:,.*|;.*)?", requirement)
    assert match, requirement
    return match[1].lower(), tuple(int(part) for part in match[2].split("."))


def test_no_dependency_is_declared_older_than_the_package_runs_on() -> None:
    declared = dict(_floor(r) for r in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    assert {name: declared[name] for name in FLOORS if declared[name] < FLOORS[name]} == {}


def _padded(version: tuple[int, ...]) -> tuple[int, ...]:
    return version + (0,) * (3 - len(version))


def test_the_floors_the_docs_say_were_run_are_the_declared_ones() -> None:
    """docs/operations.md, "Dependency floors", names the version of each dependency the
    installed package was run on; pyproject.toml must declare exactly that one, not an
    older one nobody ran (psycopg was declared >=3.1 where 3.1.8 was what ran)."""
    declared = dict(_floor(r) for r in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["dependencies"])
    text = (ROOT / "docs" / "operations.md").read_text()
    listed = re.search(r"pinning each dependency to its floor \((.*?), the others at",
                       text, re.DOTALL)
    assert listed, "the floors' sentence of docs/operations.md moved"
    run = {name.lower(): tuple(int(part) for part in version.split("."))
           for name, version in re.findall(r"([A-Za-z]+) ([0-9.]+)", listed[1])}
    assert len(run) >= 7
    assert {name: version for name, version in run.items()
            if _padded(declared.get(name, ())) != _padded(version)} == {}


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("GPU_CREDITS_BUILD_WHEEL"),
                    reason="builds the real wheel, compiling the fold (over a minute of "
                           "both cores): GPU_CREDITS_BUILD_WHEEL=1 runs it")
def test_the_wheel_runs_its_compiled_fold_away_from_the_source(tmp_path: Path) -> None:
    """The real wheel, as `pip install` builds it (its build requirements come from the
    package index), unpacked in a folder of its own and imported from there alone."""
    src = _source(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in (native.PURE_ENV, "PYTHONPATH")}
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                           "-w", str(tmp_path / "dist"), str(src)],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(site)
    compiled = {f"projections/{m.rpartition('.')[2]}{SO}" for m in native.COMPILED}
    extensions = {*compiled, f"projections/fold__mypyc{SO}", f"eventstore/_chain{SO}",
                  f"projections/_eventbuild{SO}"}
    assert {n for n in names if ".dist-info/" not in n} == (
        _package_files(src) | extensions | {f"projections/{native.BUILD_RECORD}"})
    record = json.loads((site / "projections" / native.BUILD_RECORD).read_text())
    assert record == {m: native.source_hash(native.source_path(m, src / "projections"))
                      for m in native.COMPILED}
    dist_info = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "gpu-credits = tools.cli:main" in (site / dist_info).read_text()
    probe = ("import projections.native as n, tools.cli, projections.queries, tools.sim; "
             "print(n.in_use(), n.stale_modules(), tools.cli.__file__)")
    ran = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={
        **env, "PYTHONPATH": str(site)}, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["True", "[]", str(site / "tools" / "cli.py")]
