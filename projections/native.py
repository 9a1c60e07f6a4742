"""Which fold runs: the modules compiled by mypyc, or their Python source.

The fold's hot modules (`COMPILED`) may be compiled by mypyc when the package is installed
(setup.py; a failed or skipped compile installs plain Python). The build writes
`BUILD_RECORD` beside them: the SHA-256 of each source it compiled. When `projections`
is first imported, `choose` decides once, for all of them together:

- `GPU_CREDITS_PURE_PYTHON` set (to anything but "" or "0"): the Python source;
- no compiled module, or no build record: the Python source;
- a source whose hash is not the one it was compiled from (edited since, and not rebuilt:
  an editable install keeps the compiled file beside the source and would shadow it):
  the Python source, with a warning naming the module and how to rebuild;
- else the compiled modules.

All or none: compiled modules call each other directly, not through the import system,
so one compiled module beside the source of another would run two versions of the fold.
The source is loaded by a finder placed first on `sys.meta_path` for exactly these names.
Everything here is the standard library: setup.py reads `COMPILED` from this file.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

COMPILED = ("projections.creditbook", "projections.outcomes", "projections.jobqueue",
            "projections.ledger", "projections.copying")
"""The modules mypyc compiles: the fold, its credit book, its job queue, its outcomes and
the deep copy of its state (snapshots).
They are pure (no I/O), and no test monkeypatches them without asking for the Python
source (the `pure_python` mark, see tests/conftest.py)."""

PURE_ENV = "GPU_CREDITS_PURE_PYTHON"
"""Set to 1 to run (or install) the Python source of the fold instead of its compiled
build."""

BUILD_RECORD = "_compiled.json"
"""Beside the compiled modules: {module: SHA-256 of the source it was compiled from}."""

_HERE = Path(__file__).resolve().parent


def pure_requested(environ: dict[str, str] | None = None) -> bool:
    """Whether `GPU_CREDITS_PURE_PYTHON` asks for the Python source."""
    value = (os.environ if environ is None else environ).get(PURE_ENV, "")
    return value not in ("", "0")


def source_path(module: str, root: Path = _HERE) -> Path:
    """The Python source of one of `COMPILED` (in the package folder `root`)."""
    return root / (module.rpartition(".")[2] + ".py")


def source_hash(path: Path) -> str:
    """The SHA-256 of a source file's bytes, as the build record holds it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compiled_file(module: str, root: Path = _HERE) -> Path | None:
    """The compiled extension of one of `COMPILED` in `root`, if there is one."""
    short = module.rpartition(".")[2]
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = root / (short + suffix)
        if path.exists():
            return path
    return None


def stale_modules(root: Path = _HERE, modules: Sequence[str] = COMPILED) -> list[str] | None:
    """The modules whose compiled build is missing or does not match their source: []
    when every one matches, None when none of them is compiled (nothing to warn of)."""
    present = [m for m in modules if compiled_file(m, root) is not None]
    if not present:
        return None
    try:
        record = json.loads((root / BUILD_RECORD).read_text())
    except (OSError, ValueError):
        record = None
    if not isinstance(record, dict):
        return list(modules)  # an unfinished build: none of it is trusted
    return [m for m in modules
            if m not in present or not source_path(m, root).exists()
            or record.get(m) != source_hash(source_path(m, root))]


class SourceFinder(importlib.abc.MetaPathFinder):
    """Finds `modules` as their Python source in `root`, ahead of a compiled build."""

    def __init__(self, root: Path, modules: Sequence[str]) -> None:
        self.root = root
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname, self.root))


def choose() -> bool:
    """Decide once, before any of `COMPILED` is imported, which of the two runs; True
    when the compiled build does. Later calls give the same answer."""
    global _chosen
    if _chosen is not None:
        return _chosen
    stale = stale_modules()
    use = not pure_requested() and stale == []
    if stale and not pure_requested():
        warnings.warn(
            f"the compiled build of {', '.join(stale)} does not match its source (edited "
            "since, or an unfinished build): running the Python source instead (reinstall "
            f"to rebuild it: make venv, or pip install -e .; {PURE_ENV}=1 silences this)",
            RuntimeWarning, stacklevel=2)
    if not use and stale is not None:
        sys.meta_path.insert(0, SourceFinder(_HERE, COMPILED))
    _chosen = use
    return use


_chosen: bool | None = None


def in_use() -> bool:
    """Whether the fold in this process is the compiled build (after `choose`)."""
    return bool(_chosen) and all(
        not str(sys.modules[m].__file__).endswith(".py") for m in COMPILED if m in sys.modules)
