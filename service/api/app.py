"""The FastAPI application factory. Engines and clients are built in the lifespan, not at import:

uvicorn --factory service.api.app:create_app      # Settings() from the environment
create_app(Settings(home=...))                     # tests, embedded use
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from service import ui
from service.api import docs, health
from service.catalog import endpoints as catalog
from service.core.celery_app import make_celery
from service.core.db import make_engine, make_read_engine, make_sessionmaker
from service.core.metrics import make_registry
from service.core.settings import Settings
from service.core.wakeup import Waker, attach, publisher_for
from service.estimates import endpoints as estimates
from service.http import admission, nul, problems, query
from service.http.key_teams import KeyTeams
from service.http.limits import BodySizeLimit
from service.jobs import endpoints as jobs
from service.jobs import stream as job_stream
from service.jobs.read_cache import RenderedJobs
from service.outputs import endpoints as outputs

log = logging.getLogger(__name__)

DESCRIPTION = """Compression-as-a-service with Neural Block Linearization (arXiv 2505.21077).

Submit a job (`POST /v1/jobs`), poll it (`GET /v1/jobs/{id}`, `/events?after=`), read per-layer
scores (`/layers`), cancel it. Authenticate with `Authorization: Bearer <key>`. Errors are
`application/problem+json` (RFC 9457) with a stable `type`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        s = settings if settings is not None else Settings()
        engine = make_engine(s)
        app.state.settings = s
        app.state.engine = engine
        app.state.sessions = attach(make_sessionmaker(engine), publisher_for(s))  # a cancel wakes streams
        app.state.read_engine = make_read_engine(s, engine)  # the hot reads' (core.db.run_read)
        app.state.key_teams = KeyTeams(app.state.read_engine)  # whose limits a request counts against
        app.state.team_slots = admission.TeamSlots(s)  # per-team requests and streams in flight
        app.state.celery = make_celery(s)
        app.state.metrics_registry = make_registry(app.state.sessions, s.metrics_window_jobs)
        app.state.schema_head = _schema_head()
        app.state.rendered_jobs = RenderedJobs()  # the JSON of job reads, per version (service/jobs/read_cache.py)
        app.state.waker = Waker(s.wakeup_url) if s.wakeup_url else None  # wakes open event streams
        listening = asyncio.create_task(app.state.waker.run()) if app.state.waker else None
        try:
            yield
        finally:
            if listening is not None:
                listening.cancel()
            app.state.celery.close()
            engine.dispose()
            app.state.read_engine.dispose()

    app = FastAPI(
        title="nbl-service",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,
        openapi_url="/openapi.json",
        redoc_url=None,  # docs.install: offline
        responses={422: query.REFUSED, 429: admission.REFUSED},  # every route may answer them
        # Every route, before its own parameters: NUL, then query parameters it does not declare.
        dependencies=[Depends(nul.refuse_nul), Depends(query.refuse_undeclared)],
    )
    app.add_middleware(BodySizeLimit)
    app.add_middleware(admission.TeamLimits)  # outermost: the team's limits, before anything else is spent
    problems.install(app)
    docs.install(app)
    app.include_router(jobs.router)
    app.include_router(job_stream.router)  # /v1/jobs/{id}/events/stream
    app.include_router(outputs.router)
    app.include_router(estimates.router)
    app.include_router(catalog.router)
    app.include_router(health.router)
    ui.install(app)  # the dashboard at /ui
    return app


def _schema_head() -> str | None:
    """The Alembic head this code expects, for /readyz; None when migrations/ is not shipped."""
    try:
        from service.core.migrate import head_revision

        return head_revision()
    except Exception as e:  # noqa: BLE001
        log.warning("cannot read the migration head (%s); /readyz will not check the schema version", e)
        return None
