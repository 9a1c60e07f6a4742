"""Uvicorn's HTTP protocol with one socket write per plain answer instead of two.

Why: uvicorn writes an answer's status line and headers when the app sends
`http.response.start`, and its body when the app sends `http.response.body`: two `send`
system calls, each of which on loopback also runs the TCP stack's delivery and wakes the
client. Under load that first write alone was about a fifth of the service's CPU samples.
Here the status line and headers are held until the next write on the connection (the
body, normally sent right after them) and go out with it in one call; whatever is held
when the event loop next gets round to it is written then, so nothing waits longer than
one pass of the loop, and a close writes what is held first. Bytes on the wire and their
order are unchanged; only how they are split into writes differs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _HeldWrites:
    """A transport whose writes are held until the next write, or one pass of the loop."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write `data` after what is held (together, in one write), or hold it."""
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + bytes(data))
            return
        self._held = bytes(data)
        self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                self._transport.write(held)

    def writelines(self, data: Any) -> None:
        """As `write`, of the lines joined."""
        self.write(b"".join(data))

    def close(self) -> None:
        """Write what is held, then close."""
        self._flush()
        self._transport.close()

    def write_eof(self) -> None:
        """Write what is held, then end the stream."""
        self._flush()
        self._transport.write_eof()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneWriteHttpTools(HttpToolsProtocol):
    """`HttpToolsProtocol` writing through `_HeldWrites` (see the module doc)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """The connection, with its writes held as the module doc says."""
        super().connection_made(_HeldWrites(transport, self.loop))  # type: ignore[arg-type]
