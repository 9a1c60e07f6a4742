"""Build steps beyond pyproject.toml: compiled extensions, each optional.

Everything else (metadata, dependencies, packages) is in pyproject.toml. Three of them:
the C accelerator of the chain check, the event builders' (`projections._eventbuild`),
and the fold compiled by mypyc. Where one cannot
be built the install goes on without it and the Python definitions run instead.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py
from setuptools.errors import CCompilerError

ROOT = Path(__file__).resolve().parent

# -- the chain check's C accelerator ------------------------------------------------------------
#
# It hashes with OpenSSL's libcrypto where its headers are (Debian's libssl-dev), else
# through hashlib; without a C compiler or Python headers `eventstore.hashing` runs its
# Python definitions.

CHAIN = Extension("eventstore._chain", ["eventstore/_chain.c"], optional=True)

# -- the event builders' C accelerator ----------------------------------------------------------
#
# `projections.decoding` builds each decoded event in C where this is built; without a C
# compiler or Python headers its Python builders run instead.

EVENTBUILD = Extension("projections._eventbuild", ["projections/_eventbuild.c"], optional=True)


def build_chain(cmd: build_ext, ext: Extension) -> None:
    """Build the chain check against libcrypto first, then, if that fails, without."""
    ext.define_macros.append(("CHAIN_OPENSSL", "1"))
    ext.libraries.append("crypto")
    try:
        build_ext.build_extension(cmd, ext)
        return
    except CCompilerError:
        ext.define_macros.remove(("CHAIN_OPENSSL", "1"))
        ext.libraries.remove("crypto")
    build_ext.build_extension(cmd, ext)


# -- the compiled fold (mypyc) ---------------------------------------------------------------
#
# The modules of projections.native.COMPILED, compiled by mypyc (a build requirement in
# pyproject.toml). Optional: without mypyc, with GPU_CREDITS_PURE_PYTHON=1, or when the
# compile fails, the package installs as plain Python and runs the same. After a build
# the record of the sources compiled is written beside them, so that a compiled module
# never answers for a source edited since (projections/native.py checks at import).


def _native() -> Any:
    path = ROOT / "projections" / "native.py"
    spec = importlib.util.spec_from_file_location("_fold_native", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NATIVE = _native()


def _say(message: str) -> None:
    print(f"gpu-credits: {message}", file=sys.stderr)


# What setuptools runs for metadata alone: pip's build runs setup.py three times (the build
# requirements, the metadata, then the build), and compiling the fold in the first two
# type-checked and translated it twice for nothing (10 s of a 30 s install).
METADATA_ONLY = frozenset({"egg_info", "dist_info"})
BUILDS = frozenset({"build", "build_ext", "build_py", "bdist_wheel", "editable_wheel",
                    "develop", "install", "bdist", "bdist_egg", "sdist"})


def builds_nothing(argv: list[str]) -> bool:
    """Whether setup.py was asked only for metadata: its first command (options aside)
    writes metadata and none of its arguments names a command that builds."""
    words = [a for a in argv[1:] if not a.startswith("-")]
    return bool(words) and words[0] in METADATA_ONLY and not any(
        w in BUILDS for w in words)


def fold_extensions() -> list[Any]:
    if builds_nothing(sys.argv):
        return []
    if NATIVE.pure_requested():
        _say(f"{NATIVE.PURE_ENV} is set: the fold installs as plain Python")
        return []
    try:
        from mypyc.build import mypycify

        # mypy type-checks what it compiles, under pyproject's settings, without the
        # installed packages: the build runs before the dependencies are installed (a
        # fresh clone), and their types do not change the fold's compiled code (values
        # of theirs are handled as Any either way), so every build is the same.
        flags = ["--no-site-packages", "--ignore-missing-imports", "--no-warn-return-any",
                 "--no-warn-unused-ignores"]
        return list(mypycify([*flags, *(str(NATIVE.source_path(m, Path("projections")))
                                        for m in NATIVE.COMPILED)],
                             opt_level="3", group_name="projections.fold"))
    except (Exception, SystemExit) as exc:  # mypyc missing, or refusing the code (it
        # exits on a type error): plain Python still works
        _say(f"the fold is not compiled ({type(exc).__name__}: {exc}); it runs as plain Python")
        return []


FOLD_NAMES = frozenset(NATIVE.COMPILED) | {"projections.fold__mypyc"}


class OptionalBuildExt(build_ext):
    """build_ext for both: the chain check as `build_chain` builds it; the fold where a
    failed compile leaves plain Python, not a failed install, and a complete one records
    the sources it was built from."""

    def run(self) -> None:
        record = self._record_path()
        record.unlink(missing_ok=True)  # until every module is built again
        fold = [e for e in self.extensions if e.name in FOLD_NAMES]
        if not fold:  # a plain-Python build: no compiled module of an earlier one stays
            for name in FOLD_NAMES:
                Path(self.get_ext_fullpath(name)).unlink(missing_ok=True)
        try:
            super().run()
        except Exception as exc:
            _say(f"building the compiled fold failed ({exc}); it runs as plain Python")
            return
        # Recorded only when the fold was compiled now: a record written beside compiled
        # modules of an earlier build would vouch for sources they were not built from.
        if fold and all(Path(self.get_ext_fullpath(e.name)).exists() for e in fold):
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({m: NATIVE.source_hash(NATIVE.source_path(
                m, ROOT / "projections")) for m in NATIVE.COMPILED}, indent=1) + "\n")

    def build_extension(self, ext: Any) -> None:
        if ext is CHAIN:
            build_chain(self, ext)
            return
        if ext.name not in FOLD_NAMES:
            super().build_extension(ext)
            return
        try:
            super().build_extension(ext)
        except Exception as exc:
            _say(f"compiling {ext.name} failed ({exc}); the fold runs as plain Python")
            for e in self.extensions:  # all or none (see projections/native.py)
                if e.name in FOLD_NAMES:
                    Path(self.get_ext_fullpath(e.name)).unlink(missing_ok=True)

    def _record_path(self) -> Path:
        return Path(self.get_ext_fullpath("projections.ledger")).parent / NATIVE.BUILD_RECORD


class FreshBuildPy(build_py):
    """build_py into a build folder emptied of this distribution's packages first.

    A wheel packs the whole build folder, which setuptools only ever adds to: a module
    deleted or renamed since an earlier build in the same checkout, or the compiled fold
    of a build before a plain-Python one, would ship with it (and an extension module is
    imported ahead of the source beside it). build_ext runs after this, so what the
    wheel holds is what this build made. An editable install builds in a folder of its
    own and is left alone."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False):
            for top in sorted({name.partition(".")[0] for name in self.packages or ()}):
                shutil.rmtree(Path(self.build_lib) / top, ignore_errors=True)
        super().run()


setup(ext_modules=[CHAIN, EVENTBUILD, *fold_extensions()],
      cmdclass={"build_ext": OptionalBuildExt, "build_py": FreshBuildPy})
