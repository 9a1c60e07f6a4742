"""Copies of a SQLite journal as an operator makes them, for the tests of backups and
restores."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def online_backup(source: Path, target: Path) -> None:
    """SQLite's online backup of `source` into `target` (`sqlite3 SOURCE ".backup
    TARGET"`; `.restore` is the same the other way round)."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
