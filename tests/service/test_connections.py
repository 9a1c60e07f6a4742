"""`GuardedProtocol`: what one connection may send, and how slowly, before it is refused."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.service.server import in_thread
from tools.service.connections import MAX_HEAD, GuardedProtocol


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Reads the body, answers its length."""
    if scope["type"] != "http":
        return
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Quick(GuardedProtocol):
    """The bounds, with timeouts short enough for a test to wait them out."""

    head_timeout = 0.5
    body_grace = 0.5
    shutdown_drain = 0.5


def serving(http: Any = Quick) -> contextlib.AbstractContextManager[int]:
    return in_thread(app, http=http)


def _until_closed(conn: socket.socket) -> bytes:
    received = b""
    try:
        while chunk := conn.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        # Refused before all of it was read: the answer is still there.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(data)
        return _until_closed(conn)


def _problem(answer: bytes, status: int, slug: str) -> dict[str, Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith(f"HTTP/1.1 {status} "), answer[:300]
    assert "content-type: application/problem+json" in lines
    assert "connection: close" in lines
    problem: dict[str, Any] = json.loads(body)
    assert set(problem) == {"type", "title", "status", "detail"}
    assert problem["status"] == status and problem["type"].endswith("/" + slug)
    return problem


def _get(path: bytes = b"/", headers: bytes = b"") -> bytes:
    return (b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers
            + b"Connection: close\r\n\r\n")


@pytest.mark.parametrize("pieces", [1, 3000])
def test_headers_over_the_limit_are_431_and_not_read(pieces: int) -> None:
    """In one read or many, a head of more than 64 KiB is refused at 64 KiB."""
    junk = b"X-Junk: " + b"j" * (MAX_HEAD) + b"\r\n"
    request = _get(headers=junk)
    with serving() as port, socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        step = -(-len(request) // pieces)
        try:
            for start in range(0, len(request), step):
                conn.sendall(request[start:start + step])
        except (BrokenPipeError, ConnectionResetError):
            pass
        problem = _problem(_until_closed(conn), 431, "headers-too-large")
    assert f"larger than {MAX_HEAD} bytes" in problem["detail"]


def test_a_request_line_over_the_limit_is_414() -> None:
    with serving() as port:
        problem = _problem(_exchange(port, _get(b"/" + b"a" * MAX_HEAD)), 414, "uri-too-long")
    assert f"longer than {MAX_HEAD} bytes" in problem["detail"]


def test_a_head_at_the_limit_is_answered_and_so_is_its_body() -> None:
    fill = b"X-Fill: "
    base = len(_get(headers=fill + b"\r\n"))
    exact = _get(headers=fill + b"f" * (MAX_HEAD - base) + b"\r\n")
    assert len(exact) == MAX_HEAD
    body = b"b" * 100_000
    post = (b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n"
            b"Connection: close\r\n\r\n" + body)
    with serving() as port:
        assert _exchange(port, exact).startswith(b"HTTP/1.1 200 ")
        # A head and a long body in one read: only the head counts.
        assert _exchange(port, post).endswith(b"\r\n\r\n100000")
        # Several requests on one connection, each within the limit.
        many = _get(headers=fill + b"f" * 40_000 + b"\r\n").replace(b"Connection: close\r\n", b"")
        answered = _exchange(port, many * 3 + _get())
    assert answered.count(b"HTTP/1.1 200 ") == 4


def test_a_head_that_dribbles_is_408_and_closed() -> None:
    # A byte sent just after the server answered and closed makes the client's kernel
    # take a reset, which may discard the unread answer: that try says nothing, and the
    # exchange is tried again on a new connection.
    for _ in range(3):
        try:
            received = _dribble_until_answered()
            break
        except ConnectionResetError:
            continue
    else:
        pytest.fail("every try was reset before its answer could be read")
    problem = _problem(received, 408, "request-timeout")
    assert "did not arrive within 0.5 seconds" in problem["detail"]


def _dribble_until_answered() -> bytes:
    """Send a head a byte now and then until the server answers; what it sent."""
    with serving() as port, socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nX-Slow: ")
        received = b""
        for _ in range(300):  # a byte now and then, until the server gives up
            try:
                conn.sendall(b"s")
            except (BrokenPipeError, ConnectionResetError):
                break
            conn.settimeout(0.05)
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            received += chunk
            if not chunk:
                break
        conn.settimeout(30)
        return received + _until_closed(conn)


class LongBodies(Quick):
    """A body's bound far beyond the head's."""

    body_grace = 60.0


def test_a_kept_alive_connection_times_each_head_whatever_came_before() -> None:
    """After a request whose body was bounded for a minute (and outlasted the head's
    bound while it arrived), the next head on the same connection still has only the
    head's half second."""
    with serving(LongBodies) as port, \
            socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\na")
        time.sleep(1.0)  # longer than the head's bound: its timer has come and gone
        conn.sendall(b"bc")
        first = b""
        while not first.endswith(b"\r\n\r\n3"):
            chunk = conn.recv(65536)
            assert chunk, first
            first += chunk
        conn.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nX-Never-Ends: ")
        received = _until_closed(conn)  # within the socket's 30 s, not the body's 60
    problem = _problem(received, 408, "request-timeout")
    assert "did not arrive within 0.5 seconds" in problem["detail"]


def test_a_connection_that_sends_nothing_is_closed() -> None:
    with serving() as port, socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        assert _until_closed(conn) == b""


def test_a_body_that_stops_arriving_is_abandoned() -> None:
    with serving() as port, socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n12345")
        assert _until_closed(conn) == b""
    with serving() as port:  # one that arrives is read whole
        answer = _exchange(port, b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n"
                                 b"Connection: close\r\n\r\n1234567890")
    assert answer.endswith(b"\r\n\r\n10")


def test_serve_runs_the_guarded_protocol(tmp_path: Path) -> None:
    from tests.service.server import running

    with running(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path / "serve.log") as server:
        port = int(server.base.rpartition(":")[2])
        _problem(_exchange(port, _get(headers=b"X-Junk: " + b"j" * MAX_HEAD + b"\r\n")),
                 431, "headers-too-large")
        assert _exchange(port, _get(b"/healthz")).startswith(b"HTTP/1.1 200 ")
    assert '"status": 431' in (tmp_path / "serve.log").read_text()


BIG = 16 * 2**20
"""An answer larger than what the kernel's socket buffers hold for a client that does not
read (about 6 MB on loopback here)."""


async def big_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers `BIG` bytes (as a large statement or journal export does)."""
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(BIG).encode())]})
    await send({"type": "http.response.body", "body": b"x" * BIG})


class QuickReader(Quick):
    """An answer's reading timed by its grace alone, and short."""

    answer_grace = 0.5
    answer_rate = 2**40


def _not_reading(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=30)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return conn


def _dropped(conn: socket.socket, within: float = 1.5) -> bool:
    """Whether the server ends the connection within `within` seconds as it is read (a
    window this small takes minutes to carry the whole answer)."""
    conn.settimeout(0.2)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if not conn.recv(1 << 20):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            pass
    return False


def test_an_answer_nobody_reads_is_dropped_with_its_connection() -> None:
    # Before, the connection and the answer's bytes stayed as long as the client did:
    # 12 clients not reading a 16 MB statement held 820 MB of the service's memory.
    with in_thread(big_app, http=QuickReader) as port, _not_reading(port) as conn:
        time.sleep(1.5)  # the answer is written, and stuck; past the grace
        assert _dropped(conn)


def test_a_stop_does_not_wait_for_a_client_that_does_not_read() -> None:
    # Before, SIGTERM waited for uvicorn's graceful timeout (30 s for `serve`).
    with in_thread(big_app, http=Quick, timeout_graceful_shutdown=30) as port:
        conn = _not_reading(port)
        time.sleep(0.3)  # the answer is written, and stuck
        began = time.monotonic()
    took = time.monotonic() - began
    conn.close()
    assert took < 3, f"the stop took {took:.1f} s"


def _edge_log(app: Any, caplog: pytest.LogCaptureFixture) -> str:
    import asyncio
    import logging

    from tools.service.app import Edge

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError(f"nothing is sent to a client that has gone: {message}")

    scope = {"type": "http", "method": "POST", "path": "/v1/events",
             "client": ("127.0.0.1", 5000)}
    with (caplog.at_level(logging.INFO, logger="gpu_credits.access"),
          contextlib.suppress(RuntimeError)):
        asyncio.run(Edge(app)(scope, receive, send))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "gpu_credits.access"]
    return line


def test_a_request_whose_client_went_away_is_not_logged_as_a_500(
        caplog: pytest.LogCaptureFixture) -> None:
    # Before, a client that hung up mid-body was logged "status": 500, as if the service
    # had failed: 200 such clients, 200 server errors on the access log.
    async def reads_the_body(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    assert '"status": 499' in _edge_log(reads_the_body, caplog)


def test_an_app_that_fails_is_still_logged_as_a_500(caplog: pytest.LogCaptureFixture) -> None:
    async def fails(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise RuntimeError("a bug")

    assert '"status": 500' in _edge_log(fails, caplog)
