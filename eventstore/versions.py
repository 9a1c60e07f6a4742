"""Stream versions as a journal's own last `append_at` left them.

Why: an append gives each event its stream's next version, so it asks the database for
the current version of every stream it writes, under the head's lock. For a batch of
100 events to 100 streams that is 100 index look-ups, the dearest part of the append's
probe (about 1.1 ms of PostgreSQL's CPU per batch, against 0.15 ms for the same number
of id look-ups). A writer that appends batch after batch (the service's committer)
asks again for what its own previous append wrote.

What is known is only used when it cannot be wrong: the versions are those the journal
held right after one of this object's appends committed, at head (position, hash); an
append that finds the head still there, under its lock, finds every stream as that
append left it (any other append moves the head, and nothing else changes a version).
A head found elsewhere, or a stream not known, is asked of the database as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

MAX_STREAMS = 100_000
"""Streams remembered at most; past that the memory starts again from one append's."""


class KnownVersions:
    """The versions of the streams written, as of the head one's own append left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._head: tuple[int, str] | None = None  # (position, hash) they are true at
        self._versions: dict[str, int] = {}

    def unknown(self, position: int, streams: Sequence[str]) -> list[str]:
        """Of `streams`, those whose version must be asked of the database by an append
        that expects the head at `position` (all of them unless it is where the versions
        were noted)."""
        with self._lock:
            if self._head is None or self._head[0] != position:
                return list(streams)
            known = self._versions
            return [s for s in streams if s not in known]

    def at(self, head: tuple[int, str], streams: Iterable[str]) -> dict[str, int] | None:
        """The versions of `streams` (only those above 0) when the journal's head, found
        under its lock, is `head` (position, hash) and every stream is known there; None:
        ask the database."""
        with self._lock:
            if self._head != head:
                return None
            known = self._versions
            out: dict[str, int] = {}
            for stream in streams:
                version = known.get(stream)
                if version is None:
                    return None
                if version:
                    out[stream] = version
            return out

    def noted(self, before: tuple[int, str], asked: dict[str, int], streams: Iterable[str],
              written: Iterable[tuple[str, int]], head: tuple[int, str]) -> None:
        """An append committed: it found the head at `before`, the database said `asked`
        for the versions of `streams` it asked about (absent: 0), and it wrote
        (stream, version) pairs `written` (in order), leaving the head at `head`."""
        with self._lock:
            known = self._versions
            if self._head != before or len(known) > MAX_STREAMS:
                known.clear()  # noted at another head: none of it holds any more
            for stream in streams:
                known[stream] = asked.get(stream, 0)
            for stream, version in written:
                known[stream] = version
            self._head = head

    def forget(self) -> None:
        """Know nothing (the next append asks for every version)."""
        with self._lock:
            self._head = None
            self._versions.clear()
