"""/healthz (the process), /readyz (database at the right schema + broker), /metrics (Prometheus)."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from service.core.errors import NotReady
from service.http.hops import OneHopRoute
from service.http.problems import problem

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"], route_class=OneHopRoute)


@router.get("/healthz", summary="The process is up")
async def healthz() -> dict:
    return {"status": "ok"}


def _check_database(request: Request) -> str:
    with request.app.state.sessions() as s:
        version = s.execute(text("SELECT version_num FROM alembic_version")).scalar()
        s.rollback()
    head = request.app.state.schema_head
    if head and version != head:
        raise RuntimeError(f"schema at {version}, expected {head}")
    return "ok"


def _check_broker(request: Request) -> str:
    settings = request.app.state.settings
    with request.app.state.celery.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, timeout=settings.publish_timeout_s)
    return "ok"


@router.get(
    "/readyz",
    summary="The database and the broker are reachable",
    responses={503: {"content": {"application/problem+json": {}}}},
)
async def readyz(request: Request):
    checks: dict[str, str] = {}
    for name, check in (("database", _check_database), ("broker", _check_broker)):
        try:
            checks[name] = await asyncio.wait_for(asyncio.to_thread(check, request), timeout=10)
        except Exception as e:  # noqa: BLE001 - report, don't crash
            log.warning("readiness: %s failed: %s: %s", name, type(e).__name__, e)
            checks[name] = f"unavailable ({type(e).__name__})"
    if all(v == "ok" for v in checks.values()):
        return JSONResponse({"status": "ok", "checks": checks})
    failed = ", ".join(k for k, v in checks.items() if v != "ok")
    return problem(
        503, NotReady.slug, NotReady.title, f"unavailable: {failed}", instance="/readyz", extra={"checks": checks}
    )


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    data = await asyncio.to_thread(generate_latest, request.app.state.metrics_registry)
    return Response(data, media_type=CONTENT_TYPE_LATEST)
