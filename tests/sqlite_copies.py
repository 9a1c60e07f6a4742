"""Copies of a journal as an operator makes them, for the tests of backups and restores:
a SQLite file's online backup, and a copy of every table (a PostgreSQL database dumped,
then rolled back to the dump)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import sqlalchemy

from eventstore.schema import metadata


def online_backup(source: Path, target: Path) -> None:
    """SQLite's online backup of `source` into `target` (`sqlite3 SOURCE ".backup
    TARGET"`; `.restore` is the same the other way round)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()


Saved = dict[str, list[tuple[Any, ...]]]


def saved_tables(url: str) -> Saved:
    """Every table of the journal's database as it stands: a copy to restore later
    (what a PostgreSQL dump keeps)."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.begin() as conn:
            return {t.name: [tuple(r) for r in conn.execute(t.select())]
                    for t in metadata.sorted_tables}
    finally:
        engine.dispose()


def restored_tables(url: str, saved: Saved) -> None:
    """Put a copy back under whoever holds the database open (a restore)."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.begin() as conn:
            for t in reversed(metadata.sorted_tables):
                conn.execute(t.delete())
            for t in metadata.sorted_tables:
                rows = saved[t.name]
                if rows:
                    names = [c.name for c in t.columns]
                    conn.execute(t.insert(), [dict(zip(names, r, strict=True)) for r in rows])
    finally:
        engine.dispose()
