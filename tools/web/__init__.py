"""The web audit view: server-rendered pages mounted on the HTTP service's app."""

from __future__ import annotations

from typing import Any


def mount(app: Any) -> None:
    """Add the web view's routes and static files to `app` (a FastAPI application)."""
