"""The API's interactive docs at `/docs`: Swagger UI, served by the service itself.

FastAPI's own page loads Swagger UI from a CDN: a third party's script running in the
service's origin (where, without tokens, a script may read every balance and post
grants), and a blank page on a machine without internet access. This page loads
Swagger UI from files vendored under `static/swagger-ui/` (swagger-ui-dist 5.35.0,
Apache-2.0, byte for byte as published; docs/http.md gives their hashes), starts it from
a script file of its own, and is sent with a Content-Security-Policy that lets scripts
and connections reach this origin only. Every URL in it is relative, so the page works
behind a proxy that serves the API under a path prefix.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request
from starlette.responses import HTMLResponse

DOCS = "/docs"
"""The page's path (the contract's)."""

ASSETS = "/static/docs"
"""Where Swagger UI's files and the page's start-up script are served."""

ASSETS_DIR = Path(__file__).parent / "static" / "swagger-ui"

HEADERS = {
    # Swagger UI sets style attributes and draws icons from data: URLs; its scripts and
    # its requests (the document, "Try it out") stay on this origin.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; "
                               "style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}
"""The page's headers."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>gpu-credits API</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="static/docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="static/docs/swagger-ui-bundle.js"></script>
<script src="static/docs/docs-init.js"></script>
</body>
</html>
"""


def install(app: FastAPI) -> None:
    """Serve the docs page and its files on `app` (created with `docs_url=None`)."""
    app.mount(ASSETS, StaticFiles(directory=ASSETS_DIR), name="docs-static")

    def docs(request: Request) -> HTMLResponse:
        """Swagger UI on `/openapi.json`."""
        return HTMLResponse(PAGE, headers=HEADERS)

    app.add_route(DOCS, docs, methods=["GET", "HEAD"], include_in_schema=False)
