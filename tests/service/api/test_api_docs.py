"""/docs and /redoc work offline: the pages reference only the app's own URLs, and each of those
is served by the app with the right content type (the assets from the fastapi-offline package)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from service.api import create_app

TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png", ".json": "application/json"}


@pytest.fixture
def app_client(sqlite_clean_url, settings_for):
    with TestClient(create_app(settings_for(sqlite_clean_url))) as c:
        yield c


URL = re.compile(r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|\burl:\s*["']([^"']+)["']""")


def references(html: str) -> list[str]:
    """Every URL the page loads: src=, href=, Swagger's `url:` and ReDoc's spec-url=."""
    return [a or b for a, b in URL.findall(html)]


@pytest.mark.parametrize("page, bundle", [("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")])
def test_docs_pages_load_only_local_assets(app_client, page, bundle):
    r = app_client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    urls = references(r.text)
    assert any(u.endswith(bundle) for u in urls) and "/openapi.json" in urls, urls
    assert "http://" not in r.text and "https://" not in r.text and "//" not in "".join(urls)  # no CDN, no fonts
    for url in urls:
        assert url.startswith("/"), url
        got = app_client.get(url)
        assert got.status_code == 200, url
        ext = url[url.rfind(".") :]
        assert TYPES[ext] in got.headers["content-type"], (url, got.headers["content-type"])
        assert len(got.content) > (100_000 if ext in (".js", ".css") else 100), url  # the real bundle, not a stub


def test_the_swagger_bundle_is_swagger_ui_and_redoc_is_redoc(app_client):
    assert "SwaggerUIBundle" in app_client.get("/docs-assets/swagger-ui-bundle.js").text[:2000]
    assert "Redoc" in app_client.get("/docs-assets/redoc.standalone.js").text[:2000]
    assert app_client.get("/docs-assets/../service/core/settings.py").status_code == 404
