"""A TCP proxy in front of PostgreSQL that a test can make refuse, cut or stall."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

#: What an append of events sends: the INSERT itself, or the statement the journal
#: prepared for it (once per connection: the PREPARE is not an append).
APPEND = (b"INSERT INTO events", b"EXECUTE gpu_credits_insert")


def _appends(data: bytes, markers: tuple[bytes, ...]) -> bool:
    return b"PREPARE " not in data and any(m in data for m in markers)


class DatabaseProxy:
    """Forwards 127.0.0.1:`port` to the database; `down()` cuts every connection and
    refuses new ones until `up()`; `stall()` forwards nothing (both ways) until `up()`.

    `lose_commit_after = APPEND`: on the next connection that sends those bytes (an
    append of events), its following COMMIT reaches the server, and the server's answer is dropped
    and the connection cut (`cuts` counts it): committed, and the client cannot know.
    `lose_commit_after = ()`: the same for the next COMMIT sent, whatever came before it
    (a retry that appends nothing commits too).
    `cut_on = b"..."`: the next connection that sends those bytes is cut before they reach
    the server (`cuts` counts it)."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.refusing = False
        self.flowing = threading.Event()
        self.flowing.set()
        self.accepted = 0
        self.lose_commit_after: tuple[bytes, ...] | None = None
        self.cut_on: bytes | None = None
        self.cuts = 0
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closing = False
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.refusing or self._closing:
                _close(client)
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self.accepted += 1
                self._pairs.append((client, server))
            state = {"inserted": False, "committing": False}
            for src, dst, up in ((client, server, True), (server, client, False)):
                thread = threading.Thread(target=self._pump, args=(src, dst, state, up),
                                          daemon=True)
                thread.start()
                self._threads.append(thread)

    def _pump(self, src: socket.socket, dst: socket.socket, state: dict[str, bool],
              up: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                break
            if not data:
                break
            self.flowing.wait()
            if up and self.cut_on is not None and self.cut_on in data:
                self.cut_on = None
                self.cuts += 1
                _close(src)
                break
            marker = self.lose_commit_after
            if up and marker is not None:
                if not marker or _appends(data, marker):
                    state["inserted"] = True
                if state["inserted"] and b"COMMIT" in data:
                    self.lose_commit_after = None
                    state["committing"] = True
            elif not up and state["committing"]:
                # The server has committed and answered: the answer is lost.
                self.cuts += 1
                _close(src)
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        _close(dst)

    def cut(self) -> None:
        """Cut every connection forwarded so far (new ones are still let through)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for client, server in pairs:
            _close(client)
            _close(server)

    def down(self) -> None:
        """The database goes away: every connection is cut, new ones are refused."""
        self.refusing = True
        self.cut()

    def stall(self) -> None:
        """The database answers nothing (connections stay open)."""
        self.flowing.clear()

    def up(self) -> None:
        """The database is back."""
        self.refusing = False
        self.flowing.set()

    def close(self) -> None:
        """Stop accepting, cut everything and end the threads."""
        self._closing = True
        self.flowing.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.cut()
        for thread in self._threads:
            thread.join(10)


@contextlib.contextmanager
def proxied(url: str) -> Iterator[tuple[DatabaseProxy, str]]:
    """A proxy in front of `url`'s server, and `url` through it."""
    from sqlalchemy.engine import make_url

    u = make_url(url)
    proxy = DatabaseProxy(u.host or "127.0.0.1", u.port or 5432)
    try:
        yield proxy, u.set(host="127.0.0.1", port=proxy.port).render_as_string(
            hide_password=False)
    finally:
        proxy.close()


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
