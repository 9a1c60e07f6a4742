"""What one connection may cost: the HTTP protocol `gpu-credits serve` runs, with the
bounds uvicorn does not set.

uvicorn's httptools protocol buffers a request's line and headers without limit and
waits for them without end. Measured on the development machine before these bounds: a
50 MB header was read whole (the process grew by 100 MB and the event loop, every other
client, waited 2.8 s for it), and a connection that sent nothing, or a byte a second,
was kept open as long as it liked, so enough of them would take every file descriptor
the process may open. A token does not help: all this happens before any header is
read. So:

* A request's line and headers together hold at most `MAX_HEAD` bytes: beyond, `431`
  (`414` while the request line is not even complete), and the connection closes.
* They must arrive within `HEAD_TIMEOUT` seconds of the request's first byte (or of the
  connection, for its first request): else `408`, and the connection closes; one that
  sent nothing is closed without an answer.
* A body must arrive at `BODY_RATE` bytes a second on average, with `BODY_GRACE`
  seconds to spare (a 32 MiB batch of events: about 9 minutes): else the connection
  closes, and the request is abandoned as if the client had gone.
* An answer must be read at `ANSWER_RATE` bytes a second on average, with `ANSWER_GRACE`
  seconds to spare, counted from when it was written whole (the app's part is done, the
  bytes wait in the process for the client): else the connection is dropped with them.
  Once the service stops, within `SHUTDOWN_DRAIN` seconds at most. Measured before: a
  client that asked for a large statement (16 MB) and read none of it held its
  connection and the answer's bytes as long as it stayed connected (12 such clients,
  820 MB of the process), and a SIGTERM waited uvicorn's whole graceful timeout (30 s)
  for it before the process could exit. An answer the kernel's socket buffers take
  whole (a few MB on loopback) is not the process's to hold: nothing is timed then.

Between requests uvicorn's own keep-alive timeout (5 s) closes an idle connection. The
refusals are `application/problem+json`, as every other error, and logged on the access
log like every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import struct
import time
from typing import Any

from tools.service.onewrite import OneWriteProtocol
from tools.service.problems import PROBLEM_JSON, problem_body

MAX_HEAD = 64 * 1024
"""The most bytes a request's line and headers may hold together."""

HEAD_TIMEOUT = 10.0
"""Seconds a request's line and headers may take to arrive."""

BODY_RATE = 64 * 1024
"""Bytes a second a body must arrive at, on average..."""

BODY_GRACE = 30.0
"""...with this many seconds to spare."""

ANSWER_RATE = 64 * 1024
"""Bytes a second an answer must be read at, on average..."""

ANSWER_GRACE = 30.0
"""...with this many seconds to spare."""

SHUTDOWN_DRAIN = 5.0
"""Seconds an answer still unread when the service stops may take to be read."""

_REASONS = {408: "Request Timeout", 414: "URI Too Long",
            431: "Request Header Fields Too Large"}

access_log = logging.getLogger("gpu_credits.access")


class GuardedProtocol(OneWriteProtocol):
    """`OneWriteProtocol` with the bounds above (`uvicorn.Config(..., http=...)`)."""

    max_head = MAX_HEAD
    head_timeout = HEAD_TIMEOUT
    body_rate = BODY_RATE
    body_grace = BODY_GRACE
    answer_rate = ANSWER_RATE
    answer_grace = ANSWER_GRACE
    shutdown_drain = SHUTDOWN_DRAIN

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard: asyncio.TimerHandle | None = None  # the one timer, when scheduled
        self._deadline: float | None = None  # when the bound armed now runs out (loop time)
        self._late: Any = None  # what to do then
        self._in_body = False  # between a request's headers and its end
        self._head_bytes = 0  # of the request's head received so far
        self._tail = b""  # its last 3 bytes: the head's end may straddle two reads
        self._line_done = False  # the request line has ended
        self._began = 0.0
        self._unread: asyncio.TimerHandle | None = None  # drops an answer nobody reads
        self._stopping = False

    # -- timers ---------------------------------------------------------------------------
    #
    # One timer per connection, moved lazily: arming sets a deadline, disarming clears it,
    # and the timer, when it fires, acts on the deadline it then finds or schedules itself
    # again. Scheduling and cancelling a timer for each bound cost a kept-alive connection
    # two of each per request, about as much CPU as the rest of these bounds together.
    # The timer is never scheduled later than `head_timeout` ahead, so no deadline armed
    # afterwards (at least `head_timeout` ahead) comes before it.

    def _arm(self, seconds: float, handler: Any) -> None:
        now = self.loop.time()
        self._deadline = now + seconds
        self._late = handler
        if self._guard is None:
            self._guard = self.loop.call_at(min(self._deadline, now + self.head_timeout),
                                            self._check)

    def _disarm(self) -> None:
        self._deadline = None

    def _check(self) -> None:
        self._guard = None
        if self._deadline is None:
            return
        now = self.loop.time()
        if now < self._deadline:
            self._guard = self.loop.call_at(min(self._deadline, now + self.head_timeout),
                                            self._check)
            return
        self._deadline = None
        self._late()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._began = time.perf_counter()
        self._arm(self.head_timeout, self._head_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._guard is not None:
            self._guard.cancel()
            self._guard = None
        if self._unread is not None:
            self._unread.cancel()
            self._unread = None
        super().connection_lost(exc)

    # -- answers nobody reads -------------------------------------------------------------
    #
    # A separate timer: the bounds above time what arrives, and a kept-alive client may
    # send its next request while the last answer is still on its way out. uvicorn closes
    # such a connection (keep-alive, a stop) with `transport.close()`, which waits for the
    # bytes to go out: for a client that reads nothing, forever.

    def on_response_complete(self) -> None:
        super().on_response_complete()
        pending = self.transport.get_write_buffer_size()
        if pending:
            self._read_within(self.shutdown_drain if self._stopping
                              else self.answer_grace + pending / self.answer_rate)

    def shutdown(self) -> None:
        self._stopping = True
        super().shutdown()
        if self._unread is not None:
            self._read_within(self.shutdown_drain)

    def _read_within(self, seconds: float) -> None:
        """Drop the connection unless what it has to send is read within `seconds` (or
        by the deadline already set, if sooner)."""
        deadline = self.loop.time() + seconds
        if self._unread is not None:
            if self._unread.when() <= deadline:
                return
            self._unread.cancel()
        self._unread = self.loop.call_at(deadline, self._not_read)

    def _not_read(self) -> None:
        self._unread = None
        if self.transport.get_write_buffer_size():
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                # A reset, not a close: the kernel would otherwise go on holding (and
                # offering) the megabytes its own buffers took of the answer.
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
            self.transport.abort()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_body = False
        if self._deadline is None:  # the connection's first request is timed from its start
            self._began = time.perf_counter()
            self._arm(self.head_timeout, self._head_late)

    def on_headers_complete(self) -> None:
        self._disarm()
        self._in_body = True
        self._head_bytes, self._tail, self._line_done = 0, b"", False
        super().on_headers_complete()
        length = next((value for name, value in self.headers if name == b"content-length"),
                      None)
        chunked = any(name == b"transfer-encoding" for name, _ in self.headers)
        if chunked or (length is not None and length != b"0"):
            size = int(length) if length is not None and length.isdigit() else 32 * 2**20
            self._arm(self.body_grace + size / self.body_rate, self._body_late)

    def on_message_complete(self) -> None:
        self._disarm()
        self._in_body = False
        super().on_message_complete()

    def _head_late(self) -> None:
        if self.transport.is_closing():
            return
        if self._head_bytes == 0 and self.cycle is None:
            self.transport.close()  # nothing asked: nothing to answer
            return
        self._refuse(408, f"the request's line and headers did not arrive within "
                          f"{self.head_timeout:g} seconds", "request-timeout")

    def _body_late(self) -> None:
        # The app may be answering: nothing can be written in its stead. Closing tells it
        # the client has gone (its next receive is a disconnect).
        self.transport.close()

    # -- the head's size ------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if not self._in_body and self._head_over(data):
            return
        super().data_received(data)

    def _head_over(self, data: bytes) -> bool:
        """Count `data` into the request's head; answer and close when the head, ended
        or not, holds more than `max_head` bytes."""
        room = self.max_head - self._head_bytes
        if len(data) > room and b"\r\n\r\n" not in self._tail + data[:max(room, 0)]:
            if not (self._line_done or b"\n" in data[:max(room, 0)]):
                self._refuse(414, f"the request line is longer than {self.max_head} bytes "
                                  "(64 KiB), the most a request's line and headers may hold",
                             "uri-too-long")
            else:
                self._refuse(431, f"the request's line and headers are larger than "
                                  f"{self.max_head} bytes (64 KiB), the most they may hold",
                             "headers-too-large")
            return True
        self._head_bytes += len(data)
        self._line_done = self._line_done or b"\n" in data
        self._tail = (self._tail + data[-3:])[-3:]
        return False

    def _refuse(self, status: int, detail: str, slug: str) -> None:
        """Answer `status` (a problem) and close, unless an answer is under way (a
        pipelined request's): then only close."""
        self._disarm()
        if self.cycle is None or self.cycle.response_complete:
            body = json.dumps(problem_body(status, detail, slug), ensure_ascii=False,
                              separators=(",", ":")).encode("utf-8")
            head = b"".join(
                [f"HTTP/1.1 {status} {_REASONS[status]}\r\n".encode("ascii"),
                 *(name + b": " + value + b"\r\n"
                   for name, value in self.server_state.default_headers),
                 f"content-type: {PROBLEM_JSON}\r\ncontent-length: {len(body)}\r\n"
                 "connection: close\r\n\r\n".encode("ascii")])
            self.transport.write(head + body)
            self._log(status)
        self.transport.close()

    def _log(self, status: int) -> None:
        # As `app.Edge` writes a request's line; nothing of the request was read.
        if access_log.isEnabledFor(logging.INFO):
            access_log.info(json.dumps({
                "ts": round(time.time(), 3), "method": None, "path": None, "status": status,
                "ms": round((time.perf_counter() - self._began) * 1000, 2),
                "client": self.client[0] if self.client else None, "role": None}))
