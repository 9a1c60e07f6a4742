"""Servers on the loopback interface: which names only ever reach this machine, and, for
tests, benchmarks and screenshots, a free port and waiting until a server started on it
answers."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import subprocess
import time
from pathlib import Path


def is_loopback(host: str) -> bool:
    """Whether `host` (a name, or an address with or without IPv6 brackets) only ever
    answers this machine: 127.0.0.0/8, ::1, localhost."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(port: int, process: subprocess.Popen[bytes], path: str = "/readyz",
               timeout: float = 60.0, log: Path | None = None) -> None:
    """Wait until `GET path` on 127.0.0.1:`port` answers 200. A `RuntimeError` if
    `process` exits first or `timeout` seconds pass, with the text of `log` when given.

    http.client rather than urllib: urllib would send loopback requests to a proxy named
    in the environment."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}{_tail(log)}")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.1)
    raise RuntimeError(f"server not ready after {timeout} s{_tail(log)}")


def _tail(log: Path | None) -> str:
    return f":\n{log.read_text()}" if log is not None else ""
