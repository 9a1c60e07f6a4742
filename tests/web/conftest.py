"""Fixtures of the web view's tests: the demo month in a SQLite file, the pages over it
through FastAPI's TestClient, and a real server and Chromium for the browser tests.

Chromium is Debian's (/usr/bin/chromium) driven by Playwright. Where it is missing the
browser tests are skipped, except under CI=true, where they fail: CI must run them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tools.web.browsing import app_for, chromium_path, launch, serving
from tools.web.screenshots import demo_url


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite database holding the demo month (seed 42), shared by the web tests."""
    return demo_url(tmp_path_factory.mktemp("web-demo"))


@pytest.fixture(scope="session")
def client(demo_db: str) -> Iterator[TestClient]:
    """The service with its web view over the demo month, without a network or a browser."""
    with TestClient(app_for(demo_db)) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def base_url(demo_db: str) -> Iterator[str]:
    """The service (`gpu-credits serve`'s app) in uvicorn on a free loopback port over the
    demo month."""
    with serving(app_for(demo_db)) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium; skipped where it is missing, a failure under CI=true.

    Per module, not per session: Playwright's sync API keeps an event loop running in
    the thread while it is open, and a later test in the same worker that starts one of
    its own (`asyncio.run`) would fail."""
    if chromium_path() is None:
        message = "Chromium is missing: install Debian's package `chromium`"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{message}; CI must run the browser tests")
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = launch(pw)
        yield chromium
        chromium.close()


class ConsoleLog:
    """Console errors and uncaught page errors seen by a page."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def on_console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")

    def on_page_error(self, error: Any) -> None:
        self.errors.append(f"page error: {error}")


@pytest.fixture()
def page(browser: Any, tmp_path: Path) -> Iterator[tuple[Any, ConsoleLog]]:
    """A fresh 1280 px page that records console errors; each test asserts there were none."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    tab = context.new_page()
    log = ConsoleLog()
    tab.on("console", log.on_console)
    tab.on("pageerror", log.on_page_error)
    yield tab, log
    context.close()
