"""A real server and a real browser for the web view: used by `make screenshots` and the
browser tests.

The browser is Debian's Chromium driven through Playwright (`executable_path`): Playwright's
own browser download cannot run where these tools run. The server is uvicorn on a free
loopback port, in a thread of this process, over a journal of the caller's choosing.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tools.loopback import free_port

CHROMIUM = os.environ.get("GPU_CREDITS_CHROMIUM", "/usr/bin/chromium")
"""The browser binary (Debian's package `chromium`)."""

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    """The Chromium binary if it is installed, else None."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    return shutil.which("chromium")


def launch(playwright: Any) -> Any:
    """A headless Chromium browser (Playwright `Browser`)."""
    path = chromium_path()
    if path is None:
        raise RuntimeError(f"no Chromium at {CHROMIUM}: install Debian's package `chromium` "
                           "(apt-get install -y chromium) or set GPU_CREDITS_CHROMIUM")
    return playwright.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)


def app_for(url: str) -> Any:
    """The HTTP service (`gpu-credits serve`'s app, web view mounted) over the journal at
    `url`; it opens the journal and closes it when its lifespan ends."""
    from tools.service.app import create_app

    return create_app(url)


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn on a free loopback port; yields the base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="web-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the web server did not start on 127.0.0.1:{port}")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


CHARTS_SETTLED = ("() => [...document.querySelectorAll('.chart[data-src]')]"
                  ".every(chart => chart.dataset.drawn)")
"""True once every chart on the page is drawn, empty or failed: its data fetched and
handled."""

TWO_FRAMES = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
"""Resolves two frames on: what the drawing queued has run."""


def open_settled(page: Any, url: str, timeout_ms: float = 20_000) -> Any:
    """Open `url` in `page` (Playwright `Page`) and wait until it has done what it does
    by itself: loaded (styles, deferred scripts run), every chart's data fetched and
    handled, and two frames drawn since. Returns the navigation's response.

    Playwright's "networkidle" waits the same out and then 500 ms more of silence, on
    every page: that wait, not the pages, was most of a browser test's time."""
    response = page.goto(url, wait_until="load")
    page.wait_for_function(CHARTS_SETTLED, timeout=timeout_ms)
    page.evaluate(TWO_FRAMES)
    return response
