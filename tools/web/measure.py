"""`python -m tools.web.measure URL PATH...`: how long the web view takes to answer, server-side.

Opens the service's app (`gpu-credits serve`'s) on the journal at URL, waits for the
background search of revisions, then asks each PATH twice through FastAPI's TestClient
(first: nothing remembered for it yet; again: remembered until the head moves) and prints
the status and milliseconds of each answer.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str] | None = None) -> int:
    """Time each path; print one line per request."""
    from fastapi.testclient import TestClient

    from tools.web.browsing import app_for

    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m tools.web.measure URL PATH...", file=sys.stderr)
        return 2
    url, paths = args[0], args[1:]
    began = time.perf_counter()
    app = app_for(url)
    with TestClient(app) as client:
        print(f"service ready in {time.perf_counter() - began:.1f} s", flush=True)
        began = time.perf_counter()
        client.get("/journal")
        app.state.web_source.wait_for_revisions()
        print(f"revisions found in {time.perf_counter() - began:.1f} s", flush=True)
        for path in paths:
            for label in ("first", "again"):
                began = time.perf_counter()
                status = client.get(path).status_code
                took = (time.perf_counter() - began) * 1000
                print(f"{status} {took:8.0f} ms  {label:5}  {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
