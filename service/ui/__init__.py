"""The web dashboard at /ui: server-rendered pages of a team's jobs (routes.py), a job's outputs to
download and the job as JSON with the login cookie (outputs.py), the score chart as inline SVG
(chart.py), a stylesheet served from this package (static/). `install(app)` adds it; every route
of it is behind csrf.protect (a POST must come from one of its own forms)."""

from __future__ import annotations

from importlib.resources import files
from urllib.parse import urlencode

from fastapi import Depends, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from service.core.errors import ServiceError, TooManyRequests
from service.http import problems
from service.http.nul import NulInRequest
from service.http.query import UndeclaredQueryParameter

from . import actions, csrf, outputs, routes, session
from .render import page


def install(app: FastAPI) -> None:
    app.mount("/ui/static", StaticFiles(directory=str(files("service.ui") / "static")), name="ui-static")
    for router in (routes.router, outputs.router, actions.router):
        app.include_router(router, dependencies=[Depends(csrf.protect)])

    @app.exception_handler(session.LoginRequired)
    def _login(request: Request, _exc: session.LoginRequired) -> Response:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        response = RedirectResponse(f"{session.PATH}/login?" + urlencode({"next": target}), status_code=303)
        if session.COOKIE in request.cookies:
            session.clear_key(response, request)  # stale (revoked) key: drop it
        return response

    @app.exception_handler(routes.PageError)
    def _error(request: Request, exc: routes.PageError) -> Response:
        return page(request, "error.html", code=exc.status, title=exc.title, detail=exc.detail)

    @app.exception_handler(csrf.CsrfRefused)
    def _forged(request: Request, _exc: csrf.CsrfRefused) -> Response:
        if request.url.path == f"{session.PATH}/login":  # a fresh form (and token) to log in from
            return routes.login_page(
                request,
                session.safe_next(None),
                403,
                error="This login form expired or came from another site: log in here.",
            )
        return page(
            request,
            "error.html",
            code=403,
            title="Refused",
            detail="That form did not come from this dashboard (or it expired): reload the page and try again.",
        )

    async def _refused(request: Request, exc: ServiceError) -> Response:
        """What the app refuses before any route runs (its dependencies, the team limits' middleware: service.api.
        app): a page here."""
        path = request.url.path
        if path == session.PATH or path.startswith(session.PATH + "/"):  # a page, not a problem+json
            response = page(request, "error.html", code=exc.status, title=exc.title, detail=exc.detail or "")
            response.headers.update(exc.headers)  # Retry-After
            return response
        return await problems.handle(request, exc)

    for refusal in (NulInRequest, UndeclaredQueryParameter, TooManyRequests):
        app.add_exception_handler(refusal, _refused)
