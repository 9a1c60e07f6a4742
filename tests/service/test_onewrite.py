"""`OneWriteProtocol`: an answer's head and body in one write, the bytes uvicorn's."""

from __future__ import annotations

import asyncio
import socket
from contextlib import AbstractContextManager
from typing import Any

import pytest

from tests.service.server import in_thread
from tools.service.onewrite import HeldWrites, OneWriteProtocol

# -- the transport ------------------------------------------------------------------------


class Recorder(asyncio.Transport):
    """What reaches the socket."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def write_eof(self) -> None:
        self.writes.append(b"<eof>")

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0


async def _steps(*steps: Any) -> list[list[bytes]]:
    """Run each step (given the transport) in a pass of the loop of its own; what the
    socket got after each."""
    socket_side = Recorder()
    held = HeldWrites(socket_side, asyncio.get_running_loop())
    seen = []
    for step in steps:
        step(held)
        seen.append(list(socket_side.writes))
        await asyncio.sleep(0)  # the pass ends: what is held goes out
    seen.append(list(socket_side.writes))
    return seen


def test_head_and_body_written_in_one_step_go_out_as_one_write() -> None:
    def answer(t: HeldWrites) -> None:
        t.write(b"HTTP/1.1 200 OK\r\n\r\n")
        t.write(b"body")

    assert asyncio.run(_steps(answer)) == [[b"HTTP/1.1 200 OK\r\n\r\nbody"]] * 2


def test_a_write_nobody_follows_goes_out_when_the_pass_ends() -> None:
    assert asyncio.run(_steps(lambda t: t.write(b"head"), lambda t: t.write(b"body"))) == [
        [], [b"head"], [b"head", b"body"]]


def test_writes_keep_their_order() -> None:
    def three(t: HeldWrites) -> None:
        t.write(b"a")
        t.writelines([b"b", b"c"])
        t.write(memoryview(b"d"))

    assert asyncio.run(_steps(three)) == [[b"abc"], [b"abc", b"d"]]


def test_a_large_body_follows_the_held_head_without_being_copied_into_it() -> None:
    from tools.service.onewrite import JOIN_AT_MOST

    body = b"x" * (JOIN_AT_MOST + 1)

    def answer(t: HeldWrites) -> None:
        t.write(b"head")
        t.write(body)

    assert asyncio.run(_steps(answer)) == [[b"head", body]] * 2


def test_close_and_eof_send_what_is_held_first_abort_drops_it() -> None:
    async def run() -> tuple[Recorder, Recorder, Recorder]:
        loop = asyncio.get_running_loop()
        closed, ended, aborted = Recorder(), Recorder(), Recorder()
        for side, end in ((closed, HeldWrites.close), (ended, HeldWrites.write_eof),
                          (aborted, HeldWrites.abort)):
            held = HeldWrites(side, loop)
            held.write(b"last")
            end(held)
        await asyncio.sleep(0)
        return closed, ended, aborted

    closed, ended, aborted = asyncio.run(run())
    assert (closed.writes, closed.closed) == ([b"last"], True)
    assert ended.writes == [b"last", b"<eof>"]
    assert (aborted.writes, aborted.aborted) == ([], True)


# -- on the wire: the same bytes as uvicorn's own protocol --------------------------------


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/echo":
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return
    if path == "/stream":  # no length: chunked, a pass of the loop between chunks
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for chunk in (b"one", b"two", b""):
            await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": chunk,
                        "more_body": bool(chunk)})
        return
    if path == "/empty":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    body = b"x" * (1 << 20) if path == "/big" else b'{"id":"u1","debt":0}'
    headers = [(b"content-length", str(len(body)).encode()),
               (b"content-type", b"application/json")]
    if path == "/closing":
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    if path == "/slow":  # head and body in different passes of the loop
        await asyncio.sleep(0.01)
    await send({"type": "http.response.body", "body": body})


def serving(http: Any) -> AbstractContextManager[int]:
    return in_thread(app, http=http, loop="uvloop")


def _exchange(port: int, parts: list[bytes]) -> bytes:
    """Send each part (waiting for `100 Continue` after a part that expects it) and read
    until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        received = b""
        for part in parts:
            conn.sendall(part)
            if b"Expect: 100-continue" in part:
                while b"\r\n\r\n" not in received:
                    received += conn.recv(65536)
        while chunk := conn.recv(65536):
            received += chunk
        return received


EXCHANGES = {
    "pipelined": [
        b"POST /usage HTTP/1.1\r\nHost: h\r\n\r\n"
        b"GET /stream HTTP/1.1\r\nHost: h\r\n\r\n"
        b"HEAD /usage HTTP/1.1\r\nHost: h\r\n\r\n"
        b"GET /empty HTTP/1.1\r\nHost: h\r\n\r\n"
        b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
        b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n"
        b"GET /usage HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"],
    "one by one": [b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n",
                   b"GET /closing HTTP/1.1\r\nHost: h\r\n\r\n"],
    "large": [b"GET /big HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"],
    "continue": [b"POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
                 b"Expect: 100-continue\r\nConnection: close\r\n\r\n", b"abc"],
    "refused": [b"GET /usage HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n"],
}


@pytest.mark.parametrize("exchange", sorted(EXCHANGES))
def test_clients_receive_what_uvicorns_own_protocol_sends(exchange: str) -> None:
    parts = EXCHANGES[exchange]
    with serving("httptools") as port:
        theirs = _exchange(port, parts)
    with serving(OneWriteProtocol) as port:
        ours = _exchange(port, parts)
    assert theirs.startswith(b"HTTP/1.1 ")  # the exchange went somewhere
    assert ours == theirs
