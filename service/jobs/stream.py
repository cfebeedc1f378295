"""GET /v1/jobs/{id}/events/stream: a job's event log as Server-Sent Events, until the job ends.

The database stays the truth: the stream reads the job's row and its events newer than the last
one sent, with a short session each time (no connection is held between reads): as soon as a commit
that wrote the job's events is published on Redis (service/core/wakeup.py), else every
Settings.stream_poll_s. So a stream resumes exactly where it broke: the browser's EventSource sends back
the last `id:` it saw as `Last-Event-ID`, a script may pass `?after=` (the header wins, since a
reconnecting EventSource repeats the URL it started with). What goes out, in this order:

    retry: 2000                          once, first: how long a client waits before reconnecting
    id: 41 / data: {EventOut}            each new event of the log (the default `message` type)
    event: job / data: {id, status, stage, progress, stage_progress, eta_seconds}   when one changes
    : heartbeat                          after HEARTBEAT_S with nothing else (proxies keep it open)
    event: end / data: {the job, as above}   after the ended job's last event; then it closes

A stream closes without `end` after Settings.stream_max_s (or when the database cannot be read):
the client reconnects with its Last-Event-ID, and is authenticated again, so a revoked key or a
stopping server frees it. Team scoping is the API's: the job is looked up by the caller's team at
the start (another team's job is the same 404 as a missing one) and at every read.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.sse import EventSourceResponse, ServerSentEvent
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError

from service.core.errors import InvalidRequest, JobNotFound, Problem
from service.core.models import JobEvent
from service.core.wakeup import Waker, nap
from service.http.deps import PrincipalDep, SessionDep
from service.http.hops import OneHopRoute
from service.jobs import service as jobs
from service.jobs.responses import EventOut

TERMINAL = ("succeeded", "failed", "cancelled")
HEARTBEAT_S = 15.0
RETRY_MS = 2000
BATCH = 500  # events per read; a long backlog goes out in several
MAX_EVENT_ID = 2**63 - 1
PROBLEM = {"model": Problem, "content": {"application/problem+json": {}}}

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=OneHopRoute)


@dataclass(frozen=True)
class Start:
    """Where a stream begins: whose job, which one, after which event id (None: from the first)."""

    sessions: Any
    team_id: int
    job_id: str
    after: int | None
    poll_s: float
    max_s: float
    waker: Waker | None = None  # the API's Redis subscription (None: poll only)


def resume_point(last_event_id: str | None, after: int | None) -> int | None:
    """`Last-Event-ID` (a reconnect) over `?after=`; a header that is not an event id is a 422."""
    if last_event_id is None or not last_event_id.strip():
        return after
    value = last_event_id.strip()
    # ASCII digits only, and no more of them than an id has, before int(): `isdigit` takes "²" (int() refuses
    # it) and int() refuses more than 4,300 digits (ValueError, a 500).
    if not (value.isascii() and value.isdigit()) or len(value) > len(str(MAX_EVENT_ID)) or int(value) > MAX_EVENT_ID:
        raise InvalidRequest(
            "Last-Event-ID must be an event id this stream sent",
            errors=[{"loc": ["header", "Last-Event-ID"], "msg": "not an event id", "type": "value_error"}],
        )
    return int(value)


def start_for(
    request: Request, session, team_id: int, job_id: str, after: int | None, last_event_id: str | None
) -> Start:
    """Checks the job is the team's (JobNotFound otherwise) before any byte of the stream is sent."""
    point = resume_point(last_event_id, after)
    try:
        jobs.get_job(session, team_id, job_id)
    finally:
        session.rollback()  # end the read in this hop, a 404 too (service/http/hops.py); the stream reads apart
    settings = request.app.state.settings
    return Start(
        request.app.state.sessions,
        team_id,
        job_id,
        point,
        settings.stream_poll_s,
        settings.stream_max_s,
        getattr(request.app.state, "waker", None),
    )


def api_start(
    request: Request,
    job_id: str,
    session: SessionDep,
    principal: PrincipalDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_EVENT_ID, description="start after this event id")] = None,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", description="resume after this id (sent by EventSource when it reconnects)"),
    ] = None,
) -> Start:
    return start_for(request, session, principal.team_id, job_id, after, last_event_id)


def snapshot(job) -> dict:
    return {
        "id": job.id,
        "status": job.status,
        "stage": job.stage,
        "progress": job.progress,
        "stage_progress": job.stage_progress,
        "eta_seconds": job.eta_seconds,
    }


def read(start: Start, after: int | None) -> tuple[dict, list[EventOut], bool]:
    """The job as it is now, then its events after `after` (the row first: once it has ended, every
    event, its status event included, is already committed), and whether more are waiting."""
    with start.sessions() as s:
        state = snapshot(jobs.get_job(s, start.team_id, start.job_id))
        q = select(JobEvent).where(JobEvent.job_id == start.job_id)
        if after is not None:
            q = q.where(JobEvent.id > after)
        rows = list(s.scalars(q.order_by(JobEvent.id).limit(BATCH + 1)))
        new = [EventOut.model_validate(r) for r in rows[:BATCH]]
        s.rollback()
    return state, new, len(rows) > BATCH


async def events(start: Start, clock=time.monotonic) -> AsyncIterator[ServerSentEvent]:
    """The stream itself (module docstring), as ServerSentEvent items."""
    yield ServerSentEvent(retry=RETRY_MS, comment=f"events of {start.job_id}")
    wake = start.waker.watch(start.job_id) if start.waker is not None else None
    try:
        async for item in _follow(start, wake, clock):
            yield item
    finally:
        if wake is not None:
            start.waker.unwatch(start.job_id, wake)


async def _follow(start: Start, wake, clock) -> AsyncIterator[ServerSentEvent]:
    after, shown = start.after, None
    began = quiet_since = clock()
    while True:
        if wake is not None:
            wake.clear()  # before the read: a commit published during it wakes the next wait
        try:
            state, new, more = await run_in_threadpool(read, start, after)
        except (JobNotFound, DBAPIError):  # deleted meanwhile, or the database is down: the client retries
            return
        for ev in new:
            yield ServerSentEvent(id=str(ev.id), data=ev)
            after = ev.id
        if state != shown:
            yield ServerSentEvent(event="job", data=state)
            shown = state
        if more:
            continue
        if state["status"] in TERMINAL:
            yield ServerSentEvent(event="end", data=state)
            return
        now = clock()
        if new:
            quiet_since = now
        elif now - quiet_since >= HEARTBEAT_S:
            yield ServerSentEvent(comment="heartbeat")
            quiet_since = now
        if now - began >= start.max_s:
            return
        await nap(wake, min(start.poll_s, max(HEARTBEAT_S - (now - quiet_since), 0.01)))


@router.get(
    "/{job_id}/events/stream",
    response_class=EventSourceResponse,
    responses={401: PROBLEM, 404: PROBLEM, 422: PROBLEM},
    summary="Follow the job's events (Server-Sent Events)",
    description="`text/event-stream`: each new event (`id:` its id, `data:` the event as in `/events`), "
    "`event: job` with status, stage, progress and ETA whenever they change, a `: heartbeat` comment every "
    "15 s of silence, and `event: end` once the job has ended and its last event was sent; then the stream "
    "closes. Resume with `Last-Event-ID` (or `?after=`). A stream also closes after `NBL_STREAM_MAX_S` "
    "(default 300 s) without `end`: reconnect with the last id.",
)
async def stream_events(start: Annotated[Start, Depends(api_start)]) -> AsyncIterator[ServerSentEvent]:
    async for item in events(start):
        yield item
