"""Where a run's worlds keep their journals: in memory, SQLite files of the run's own, or
schemas of the run's own in a PostgreSQL database.

On SQLite every world gets a new database file in a temporary folder; on PostgreSQL a new
schema (`sim_<pid>_<random>`) in the database given. Either way a writer in a process of
its own can open the world's journal (and be killed: `tools.sim.killed`). A world's file
or schema is removed when the next world opens, and the last one when the run ends,
unless the run failed: then the failing world's stays for a closer look (`gpu-credits
--db URL verify`, `... export`), and `close` says where it is.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from eventstore import JournalLike, MemoryJournal
from tools.bench.storage import create_schema, drop_schema, schema_url


class Journals:
    """Opens each world's journal, and closes them all at the end of a run.

    `sqlite`: each journal a SQLite file; `postgres`: the URL of a PostgreSQL database in
    which each journal gets a schema of its own; neither: in memory."""

    def __init__(self, *, sqlite: bool = False, postgres: str | None = None) -> None:
        if sqlite and postgres is not None:
            raise ValueError("a run's journals are on SQLite or on PostgreSQL, not both")
        self.sqlite = sqlite
        self.postgres = postgres
        self._folder: Path | None = None
        self._worlds = 0
        # The open world's journal and where it is (a file's path or a schema's name).
        self._open: tuple[JournalLike, str] | None = None

    def new(self) -> JournalLike:
        """The journal of a new world (the last world's is closed and removed)."""
        from eventstore import Journal  # type: ignore[attr-defined,unused-ignore]

        if not self.sqlite and self.postgres is None:
            return MemoryJournal()
        self._retire()
        self._worlds += 1
        if self.postgres is not None:
            where = f"sim_{os.getpid()}_{secrets.token_hex(4)}"
            create_schema(self.postgres, where)
            journal: JournalLike = Journal(schema_url(self.postgres, where))
        else:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="gpu-credits-sim-"))
            where = str(self._folder / f"world-{self._worlds}.db")
            journal = Journal(f"sqlite:///{where}")
        self._open = (journal, where)
        return journal

    def close(self, *, keep_last: bool = False) -> str | None:
        """Close the journal open; remove its file or schema unless `keep_last` (then it
        stays, and its URL, or its file's path, is returned)."""
        kept = self._retire(keep=keep_last)
        if self._folder is not None and kept is None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        return kept

    def _retire(self, *, keep: bool = False) -> str | None:
        if self._open is None:
            return None
        journal, where = self._open
        self._open = None
        close = getattr(journal, "close", None)
        if close is not None:
            close()
        if self.postgres is not None:
            if keep:
                return schema_url(self.postgres, where)
            drop_schema(self.postgres, where)
            return None
        if keep:
            return where
        for path in Path(where).parent.glob(Path(where).name + "*"):  # with -wal, -shm
            path.unlink(missing_ok=True)
        return None
