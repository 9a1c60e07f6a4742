"""Answers written in one socket write carry the same bytes, in the same order, as
uvicorn's own protocol writes in two: plain, streamed, chunked, HEAD, refused and closed
answers, on kept-alive connections."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tools.loopback import free_port
from tools.service.wire import OneWriteHttpTools


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    while (await receive()).get("more_body"):
        pass
    if path == "/plain":
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-length", b"5"), (b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"hello"})
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"6")]})
        for part in (b"ab", b"", b"cd"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b"ef"})
    elif path == "/chunked":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b"two"})
    elif path == "/close":
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2"), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": b"ok"})
    elif path == "/late":  # the body only once the client has the headers
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"4")]})
        while not HEADERS_SEEN.is_set():
            await asyncio.sleep(0.005)
        await send({"type": "http.response.body", "body": b"late"})
    else:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await asyncio.sleep(0.01)
        await send({"type": "http.response.body", "body": b""})


HEADERS_SEEN = threading.Event()


@pytest.fixture(params=[HttpToolsProtocol, OneWriteHttpTools], ids=["uvicorn", "one-write"])
def server(request: pytest.FixtureRequest) -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(_app, host="127.0.0.1", port=port, http=request.param,
                            log_level="critical", lifespan="off", date_header=False,
                            server_header=False)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not srv.started:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    yield port
    srv.should_exit = True
    thread.join(10)


REQUESTS = (b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /stream HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
            b"HEAD /plain HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /empty HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /close HTTP/1.1\r\nHost: x\r\n\r\n")

EXPECTED = (b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\ncontent-type: text/plain\r\n\r\n"
            b"hello"
            b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nabcdef"
            b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\ncontent-type: text/plain\r\n\r\n"
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\none\r\n3\r\ntwo\r\n"
            b"0\r\n\r\n"
            b"HTTP/1.1 204 No Content\r\n\r\n"
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
        return received


def test_the_bytes_are_uvicorns(server: int) -> None:
    assert _exchange(server, REQUESTS) == EXPECTED


def test_headers_alone_are_not_held_back(server: int) -> None:
    """Headers whose body comes later go out without waiting for it (the app sends the
    body only once the client has the headers: held back, this would never end)."""
    HEADERS_SEEN.clear()
    with socket.create_connection(("127.0.0.1", server), timeout=10) as conn:
        conn.sendall(b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(65536) == b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n"
        HEADERS_SEEN.set()
        assert conn.recv(65536) == b"late"


def test_a_refused_request_is_answered_and_closed(server: int) -> None:
    received = _exchange(server, b"NOT HTTP AT ALL\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 400 Bad Request\r\n")
