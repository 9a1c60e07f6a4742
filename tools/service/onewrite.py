"""The HTTP protocol `gpu-credits serve` runs: uvicorn's (on httptools), except that an
answer's status line and headers go out in one write with its body.

Why: uvicorn writes an answer's head as soon as the app starts the answer and its body
in a second write: two segments, and a client blocked on the answer is woken for the
head, reads it, blocks again and is woken once more for the body. Every usage report
paid that, on both sides of the connection; on the two cores the service shares with
its clients, the second wake-up cost the clients about a tenth of their CPU per request
(and the event loop, preempted by the client it woke, a little of its own).

So the transport holds one write until the next (the body, written in the same step by
every answer that has one) and sends the two together; a write nobody follows is sent
once this pass of the event loop ends (an app that awaits between head and body, a
`100 Continue`). The bytes, and their order, are uvicorn's; only the number of writes
changes (`tests/service/test_onewrite.py` compares what clients receive from both).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

JOIN_AT_MOST = 64 * 1024
"""A write larger than this follows the held one on its own instead of being joined."""


class HeldWrites(asyncio.Transport):
    """A transport that holds a write until the next one, or until this pass of `loop`
    ends, and sends them as one; everything else is the wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop
                 ) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is None:
            self._held = bytes(data)
            self._loop.call_soon(self.flush)
        elif len(data) > JOIN_AT_MOST:
            # A large body goes out in several segments anyway: not worth its copy.
            self._held = None
            self._transport.write(held)
            self._transport.write(data)
        else:
            self._held = None
            self._transport.write(held + bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def flush(self) -> None:
        """Send what is held now."""
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def close(self) -> None:
        self.flush()  # an answer written just before the close goes out first
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    # -- the wrapped transport's own --------------------------------------------------------

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None
                                ) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + len(self._held or b"")

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()


class OneWriteProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on `HeldWrites` (`uvicorn.Config(..., http=...)`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(HeldWrites(transport, self.loop))
