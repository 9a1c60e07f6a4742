"""The web audit view: server-rendered pages mounted on the HTTP service's app.

`mount(app)` adds the pages (`/`, `/accounts/{account}`, `/jobs/{job}`, `/journal`,
`/events/{position}`), the chart's JSON and the static files (stylesheet, page script,
vendored htmx and uPlot) to a FastAPI application. The pages read the journal the app
puts on `app.state` (see `tools.web.routes.source_of`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

STATIC_DIR = Path(__file__).parent / "static"


def mount(app: Any) -> None:
    """Add the web view's routes and static files to `app` (a FastAPI application)."""
    from fastapi.staticfiles import StaticFiles
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response

    from tools.web.routes import STATIC, BadQuery, bad_query, router, unknown_path_page

    app.include_router(router)
    app.add_exception_handler(BadQuery, bad_query)
    app.mount(STATIC, StaticFiles(directory=STATIC_DIR), name="web-static")

    # A browser's mistyped path gets the view's error page; every other HTTP error keeps
    # the answer the app gave it before (the API's problem).
    answer_before = app.exception_handlers[HTTPException]

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        page = unknown_path_page(request, exc.status_code)
        if page is not None:
            return page
        answer: Response = await answer_before(request, exc)
        return answer

    app.add_exception_handler(HTTPException, on_http)
