"""/v1/jobs: create, list, read, cancel, events, layers. Thin: the work is in service.jobs.submit (create) and
service.jobs.service (the rest)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool

from nbl.request import JobCreate
from service.core.errors import Problem
from service.http.deps import CeleryDep, KeyDep, PrincipalDep, SessionDep, SettingsDep
from service.http.hops import OneHopRoute
from service.jobs import filters as job_filters
from service.jobs import read_cache
from service.jobs import service as jobs
from service.jobs.responses import EventList, JobList, JobOut, LayerList
from service.jobs.submit import submit
from service.jobs.views import job_view

PROBLEM = {"model": Problem, "content": {"application/problem+json": {}}}

# Event ids are 64-bit on both databases: a larger cursor cannot be bound as a parameter (was a 500).
MAX_EVENT_ID = 2**63 - 1


def rendered(request: Request) -> read_cache.RenderedJobs:
    return request.app.state.rendered_jobs


def json_response(body: bytes) -> Response:
    """The reads answer their cached JSON as it is: FastAPI's response_model pass (validate, encode) would
    redo per request what read_cache did once per version of the job. response_model stays for the docs."""
    return Response(content=body, media_type="application/json")


router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=OneHopRoute, responses={401: PROBLEM, 422: PROBLEM})


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobOut,
    responses={
        429: PROBLEM
        | {
            "description": "a per-team cap on active or queued jobs, or on jobs created "
            "in the last hour, or too many of the team's requests in flight on this "
            "server (too-many-requests); retry after `Retry-After` seconds",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
        },
        413: PROBLEM,
        400: PROBLEM | {"description": "the body is not UTF-8 JSON text"},
    },
    summary="Create a compression job",
    description="Returns 201 with the job. With an `Idempotency-Key` header (scoped to your team) a "
    "repeated request returns the same job (201, `Idempotent-Replayed: true`); the same key with a "
    "different body is a 422.",
)
def create_job(
    body: JobCreate,
    response: Response,
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    celery: CeleryDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            description="1 to 255 visible ASCII characters, scoped to your team",
            json_schema_extra={"pattern": r"^[\x21-\x7e]{1,255}$"},
        ),
    ] = None,
) -> JobOut:
    job, created = submit(session, celery, principal, body, idempotency_key, settings)
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return job_view(session, job)


@router.get("", response_model=JobList, summary="List jobs, newest first", description=job_filters.DESCRIPTION)
async def list_jobs(
    request: Request,
    authorization: KeyDep,
    metadata: Annotated[list[tuple[str, str]], Depends(job_filters.query_filters)],
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    after: Annotated[str | None, Query(description="`next_cursor` of the previous page")] = None,
    status_: Annotated[list[str], Query(alias="status", description="filter; repeat or comma-separate")] = [],  # noqa: B006
) -> Response:
    return json_response(
        await run_in_threadpool(
            read_cache.list_body,
            rendered(request),
            request.app.state.read_engine,
            authorization,
            limit=limit,
            after=after,
            statuses=jobs.parse_statuses(status_),
            where=job_filters.metadata_clauses(metadata),
        )
    )


@router.get("/{job_id}", response_model=JobOut, responses={404: PROBLEM}, summary="Read a job")
async def get_job(job_id: str, request: Request, authorization: KeyDep) -> Response:
    return json_response(
        await run_in_threadpool(  # authenticates
            read_cache.job_body, rendered(request), request.app.state.read_engine, authorization, job_id
        )
    )


@router.post(
    "/{job_id}/cancel",
    response_model=JobOut,
    responses={404: PROBLEM, 409: PROBLEM},
    summary="Cancel a job",
    description="queued -> cancelled; running -> cancelling (cancelled at the worker's next checkpoint); "
    "cancelling stays; a finished job is a 409 (`invalid-job-state`), and so is a job whose worker began "
    "publishing (`job-publishing`: it ends succeeded or failed, never cancelled with a published output).",
)
def cancel_job(job_id: str, session: SessionDep, principal: PrincipalDep) -> JobOut:
    return job_view(session, jobs.cancel_job(session, principal.team_id, job_id))


@router.get(
    "/{job_id}/events",
    response_model=EventList,
    responses={404: PROBLEM},
    summary="The job's event log, oldest first",
    description="Poll with `after=<last_id>` to get only newer events.",
)
def list_events(
    job_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_EVENT_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventList:
    return jobs.list_events(session, principal.team_id, job_id, after=after, limit=limit)


@router.get(
    "/{job_id}/layers",
    response_model=LayerList,
    responses={404: PROBLEM},
    summary="Per-layer scores (CCA bound, NMSE, cosine, ...) for both modes",
)
def list_layers(job_id: str, session: SessionDep, principal: PrincipalDep) -> LayerList:
    return jobs.layer_scores(session, principal.team_id, job_id)
