"""The API's docs page: Swagger UI from the service's own files, never from another site."""

from __future__ import annotations

import hashlib
import re

from fastapi.testclient import TestClient

from tools.service.apidocs import ASSETS_DIR

# swagger-ui-dist 5.35.0 as published on the npm registry (docs/http.md): a vendored file
# edited by hand, or replaced without updating the docs, fails here.
PUBLISHED = {
    "swagger-ui-bundle.js": "e6a898692f2d768e807c3ba4626068a69a2c5dd960dd6c76f3e4d3a3de180af2",
    "swagger-ui.css": "5ed08757e53da3e026d6cbecc61fe5d43585c9560b302d534ad56692519a273d",
}


def test_the_docs_page_loads_only_this_services_files(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "connect-src 'self';" in csp
    assert "frame-ancestors 'none'" in csp and page.headers["x-frame-options"] == "DENY"
    # No absolute address at all (no CDN), and no inline script.
    assert not re.search(r"(src|href)=\"(https?:)?//", page.text)
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page.text, re.S)
    assert scripts and all("src=" in attrs and not body.strip() for attrs, body in scripts)
    refs = re.findall(r"(?:src|href)=\"([^\"]+)\"", page.text)
    assert "data:," in refs  # a favicon of none: a browser asks no /favicon.ico
    for ref in (r for r in refs if r != "data:,"):
        asset = client.get(f"/{ref}")
        assert asset.status_code == 200 and asset.content, ref
    assert client.head("/docs").status_code == 200


def test_the_vendored_files_are_the_published_ones() -> None:
    for name, digest in PUBLISHED.items():
        assert hashlib.sha256((ASSETS_DIR / name).read_bytes()).hexdigest() == digest, name
    assert "Apache License" in (ASSETS_DIR / "LICENSE").read_text()


def test_no_page_loads_a_script_from_a_cdn(client: TestClient) -> None:
    assert client.get("/redoc").status_code == 404
    assert client.get("/docs/oauth2-redirect").status_code == 404


def test_the_docs_need_no_token(secured: TestClient) -> None:
    assert secured.get("/docs").status_code == 200
    assert secured.get("/static/docs/docs-init.js").status_code == 200
