"""A real `gpu-credits serve` process on a loopback port, for tests that need one."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.loopback import free_port, wait_ready

GPU_CREDITS = str(Path(sys.executable).with_name("gpu-credits"))
START_TIMEOUT = 60.0


@dataclass
class Server:
    """A running service: its base URL and process."""

    base: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send `sig` and wait for the process to end; its exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)


def start(db_url: str, log: Path, *args: str, env: dict[str, str] | None = None) -> Server:
    """Start `gpu-credits serve` on a free loopback port and wait until it is ready."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    handle = log.open("wb")
    process = subprocess.Popen(
        [GPU_CREDITS, "--db", db_url, "serve", "--port", str(port), *args],
        stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})})
    try:
        wait_ready(port, process, timeout=START_TIMEOUT, log=log)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return Server(base, process, log)


@contextlib.contextmanager
def running(db_url: str, log: Path, *args: str,
            env: dict[str, str] | None = None) -> Iterator[Server]:
    """A server for the duration of the block (stopped with SIGTERM, then killed)."""
    server = start(db_url, log, *args, env=env)
    try:
        yield server
    finally:
        try:
            server.stop(timeout=60)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


@contextlib.contextmanager
def in_thread(app: Any, **config: Any) -> Iterator[int]:
    """`app` served by uvicorn on a free loopback port, in a thread of this process, for
    the duration of the block (its port): for tests of the HTTP protocol itself."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        app, host="127.0.0.1", port=port, lifespan="off", log_level="warning",
        date_header=False, server_header=False, **config))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(10)
