"""The journal page's verify button: one background verification at a time, with progress.

A verification reads the whole journal (the hash chain, then a replay), which takes
seconds on a large one: it runs in a thread so the page answers at once and shows the
progress until the verdict. The verdict is recorded beside the journal
(`projections.verifications`), where `gpu-credits verify` and `POST /v1/journal/verify`
record theirs: `last_verify` shows the newest, however it ran.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from eventstore import JournalLike
from projections.verifications import Verification, last_verification, record_verification
from tools import wording


@dataclass(frozen=True, slots=True)
class VerifyStatus:
    """Where the current (or last) verification stands."""

    state: str  # "never", "running", "ok", "failed", "error"
    done: int = 0
    total: int = 0
    started_at: float | None = None  # wall clock, seconds since the epoch
    finished_at: float | None = None
    head: int | None = None  # the journal's head when it started
    first_bad_position: int | None = None
    problem: str | None = None
    events: int = 0
    by: str = "web"  # how it ran: "web" (this view), "cli" (gpu-credits verify), "http"
    checkpoints: int = 0
    stale_checkpoints: tuple[str, ...] = ()  # passed over: saved in another format

    @classmethod
    def of(cls, verdict: Verification, started_at: float | None = None) -> VerifyStatus:
        """A finished verification, as the pages show one."""
        return cls("ok" if verdict.ok else "failed", verdict.events, verdict.events,
                   started_at, verdict.finished_at, verdict.head, verdict.first_bad_position,
                   verdict.problem, verdict.events, verdict.by, verdict.checkpoints,
                   verdict.stale_checkpoints)

    @property
    def stale_note(self) -> str:
        """The note on the checkpoints passed over, as `gpu-credits verify` prints it
        ("" when none was)."""
        if not self.stale_checkpoints:
            return ""
        return f"note: {wording.stale_checkpoints_text(len(self.stale_checkpoints))}"

    @property
    def running(self) -> bool:
        """Whether a verification is under way."""
        return self.state == "running"

    @property
    def percent(self) -> int:
        """Progress in whole percent."""
        if self.total <= 0:
            return 100 if self.state != "running" else 0
        return min(100, self.done * 100 // self.total)


class Verifier:
    """Runs `projections.replay.verify` on the journal in a thread, one run at a time."""

    def __init__(self, journal: JournalLike) -> None:
        self._journal = journal
        self._lock = threading.Lock()
        self._status = VerifyStatus("never")
        self._thread: threading.Thread | None = None

    def status(self) -> VerifyStatus:
        """The current or last verification."""
        with self._lock:
            return self._status

    def start(self) -> VerifyStatus:
        """Start a verification unless one is running; the status either way."""
        with self._lock:
            if self._status.running:
                return self._status
            head = self._journal.head()
            self._status = VerifyStatus("running", 0, head, time.time(), head=head)
            self._thread = threading.Thread(target=self._run, name="web-verify", daemon=True)
            self._thread.start()
            return self._status

    def wait(self, timeout: float | None = None) -> VerifyStatus:
        """Wait for the running verification (tests and scripts); its status."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return self.status()

    def _progress(self, done: int, total: int) -> None:
        with self._lock:
            old = self._status
            self._status = VerifyStatus("running", done, max(total, 1), old.started_at,
                                        head=old.head)

    def _run(self) -> None:
        from projections.replay import verify

        started = self._status.started_at
        head = self._status.head
        try:
            report = verify(self._journal, progress=self._progress)
        except Exception as exc:  # a verdict the page can show, not a dead thread
            final = VerifyStatus("error", 0, 0, started, time.time(), head,
                                 problem=f"{type(exc).__name__}: {exc}")
        else:
            verdict = Verification.of(report, head=head or 0, by="web",
                                      finished_at=time.time())
            final = VerifyStatus.of(verdict, started)
            record_verification(self._journal, verdict)
        with self._lock:
            self._status = final


def last_verify(journal: JournalLike, verifier: Verifier | None) -> VerifyStatus:
    """What the pages show as the last verification: the one running from this view if
    any, else the newest finished, recorded by whichever way it ran or only known here
    (a journal this process cannot write keeps no record)."""
    mine = verifier.status() if verifier is not None else VerifyStatus("never")
    if mine.running:
        return mine
    recorded = last_verification(journal)
    if recorded is None:
        return mine
    if mine.finished_at is not None and mine.finished_at > recorded.finished_at:
        return mine
    return VerifyStatus.of(recorded)
