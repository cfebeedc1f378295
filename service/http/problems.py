"""The one exception handler: every error leaves as RFC 9457 application/problem+json.

Domain exceptions (service.core.errors) carry their status and type; FastAPI's validation errors become
422 validation-error with the per-field `errors`; Starlette's HTTP errors (unknown route, wrong
method) keep their status; a database outage (lost or refused connection, service.core.dbretry) is a 503
with Retry-After; anything else is a 500 that says nothing about internals.
"""

from __future__ import annotations

import logging

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.core.dbretry import is_transient
from service.core.errors import HTTP_SLUGS, DatabaseUnavailable, InvalidRequest, ServiceError, problem_type
from service.http.deps import key_first

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str | None = None,
    *,
    instance: str | None = None,
    errors: list | None = None,
    headers: dict | None = None,
    extra: dict | None = None,
) -> JSONResponse:
    body = {"type": problem_type(slug), "title": title, "status": status}
    if detail:
        body["detail"] = detail
    if instance:
        body["instance"] = instance
    if errors is not None:
        body["errors"] = errors
    body.update(extra or {})
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _field_errors(exc: RequestValidationError) -> list[dict]:
    return [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")} for e in exc.errors()]


async def handle(request: Request, exc: Exception) -> JSONResponse:
    instance = request.url.path
    if is_transient(exc):
        log.warning(
            "database unavailable on %s %s: %s: %s",
            request.method,
            instance,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )
        exc = DatabaseUnavailable()
    if isinstance(exc, RequestValidationError) or (isinstance(exc, ServiceError) and exc.status == 422):
        exc = await key_first(request, exc)  # a route that checks its key itself: the 401 still comes first
    if isinstance(exc, ServiceError):
        return problem(
            exc.status,
            exc.slug,
            exc.title,
            exc.detail,
            instance=instance,
            errors=exc.errors,
            headers=exc.headers,
            extra=getattr(exc, "extra", None),
        )
    if isinstance(exc, RequestValidationError):
        errors = _field_errors(exc)
        first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
        detail = f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        return problem(422, InvalidRequest.slug, InvalidRequest.title, detail, instance=instance, errors=errors)
    if isinstance(exc, StarletteHTTPException):
        slug, title = HTTP_SLUGS.get(exc.status_code, ("http-error", "HTTP error"))
        detail = exc.detail if isinstance(exc.detail, str) and exc.detail.lower() != title.lower() else None
        return problem(exc.status_code, slug, title, detail, instance=instance, headers=getattr(exc, "headers", None))
    log.exception("unhandled error on %s %s", request.method, instance)
    return problem(
        500,
        "internal-error",
        "Internal server error",
        "an unexpected error occurred; it has been logged",
        instance=instance,
    )


def install(app) -> None:
    # The database errors get their own entry: Starlette re-raises what the catch-all `Exception`
    # handler answers (as a server error), while these are answered and done.
    for exc_class in (
        ServiceError,
        RequestValidationError,
        StarletteHTTPException,
        sa_exc.DBAPIError,
        sa_exc.TimeoutError,
        Exception,
    ):
        app.add_exception_handler(exc_class, handle)
