"""/docs (Swagger UI) and /redoc (ReDoc) from the app's own static files, so both work offline.

FastAPI's default pages load their JavaScript and CSS from a CDN (a blank page on a network without
one) and add a favicon and, for ReDoc, Google Fonts from the internet. The assets come from the
`fastapi-offline` package (MIT), which ships swagger-ui-dist's bundle and CSS (Apache-2.0) and
ReDoc's standalone bundle (MIT); they are served under ASSETS, unauthenticated like the schema.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-assets"


def install(app: FastAPI) -> None:
    """Call on an app made with docs_url=None, redoc_url=None."""
    app.mount(ASSETS, StaticFiles(directory=str(files("fastapi_offline") / "static")), name="docs-assets")

    def local(request: Request, path: str) -> str:
        return f"{request.scope.get('root_path', '')}{path}"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=local(request, app.openapi_url),
            title=f"{app.title} - Swagger UI",
            swagger_js_url=local(request, f"{ASSETS}/swagger-ui-bundle.js"),
            swagger_css_url=local(request, f"{ASSETS}/swagger-ui.css"),
            swagger_favicon_url=local(request, f"{ASSETS}/favicon.png"),
            oauth2_redirect_url=local(request, "/docs/oauth2-redirect"),
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        return get_redoc_html(
            openapi_url=local(request, app.openapi_url),
            title=f"{app.title} - ReDoc",
            redoc_js_url=local(request, f"{ASSETS}/redoc.standalone.js"),
            redoc_favicon_url=local(request, f"{ASSETS}/favicon.png"),
            with_google_fonts=False,
        )
