"""Where a run's worlds keep their journals: in memory, or SQLite files of the run's own.

On SQLite every world gets a new database file in a temporary folder, so a writer in a
process of its own can open it (and be killed: `tools.sim.killed`). The folder is
removed when the run ends, unless the run failed: then the failing world's file stays
for a closer look (`gpu-credits --db sqlite:///PATH verify`, `... events`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from eventstore import JournalLike, MemoryJournal


class Journals:
    """Opens each world's journal, and closes them all at the end of a run."""

    def __init__(self, *, sqlite: bool = False) -> None:
        self.sqlite = sqlite
        self._folder: Path | None = None
        self._opened: list[JournalLike] = []

    def new(self) -> JournalLike:
        """The journal of a new world."""
        if not self.sqlite:
            return MemoryJournal()
        from eventstore import Journal  # type: ignore[attr-defined,unused-ignore]

        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="gpu-credits-sim-"))
        path = self._folder / f"world-{len(self._opened) + 1}.db"
        journal: JournalLike = Journal(f"sqlite:///{path}")
        self._opened.append(journal)
        return journal

    def close(self, *, keep_last: bool = False) -> str | None:
        """Close every journal opened; remove the files unless `keep_last` (then the last
        world's file stays, and its path is returned)."""
        for journal in self._opened:
            close = getattr(journal, "close", None)
            if close is not None:
                close()
        kept = None
        if self._folder is not None:
            if keep_last and self._opened:
                kept = str(self._folder / f"world-{len(self._opened)}.db")
                for other in self._folder.iterdir():
                    if str(other) != kept and not str(other).startswith(f"{kept}-"):
                        other.unlink()
            else:
                shutil.rmtree(self._folder, ignore_errors=True)
        self._opened = []
        return kept
