"""The kill test's client, against a server that dies mid-answer: whatever the kill cuts
(the whole answer, the status line, the body), the client counts the request as
unanswered, stops, and still writes what it saw. A client that crashed instead left no
result file, which failed the kill test about once in ten runs on a loaded machine."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.service import http_kit

ANSWER = b'{"id": "kill-w0-0", "debt": 0, "account": "acct-a", "amount": 1}'
HEAD = (b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(ANSWER))


@contextmanager
def dying_server(answers: list[bytes]) -> Iterator[str]:
    """A loopback server answering its n-th connection with `answers[n]` (raw bytes),
    then closing it; after the last one it stops listening."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        for raw in answers:
            conn, _ = listener.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(raw)
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        thread.join(30)


@pytest.mark.parametrize("cut", [b"", HEAD[:20], HEAD, HEAD + ANSWER[:10]],
                         ids=["nothing", "status-line", "no-body", "half-body"])
def test_a_cut_answer_is_unanswered_and_the_result_is_written(tmp_path: Path,
                                                              cut: bytes) -> None:
    out = tmp_path / "client.json"
    with dying_server([HEAD + ANSWER, cut]) as base:
        http_kit.usage_client(base, 0, 10, str(out))
    result = json.loads(out.read_text())
    assert result == {"acked": {"kill-w0-0": 0}, "unanswered": ["kill-w0-1"]}


def test_a_server_gone_before_the_request_is_unanswered(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there once closed
    out = tmp_path / "client.json"
    http_kit.usage_client(f"http://127.0.0.1:{port}", 0, 10, str(out))
    assert json.loads(out.read_text()) == {"acked": {}, "unanswered": ["kill-w0-0"]}
