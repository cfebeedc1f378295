"""The JSON of GET /v1/jobs/{id} and GET /v1/jobs, rendered once per version of a job and kept per process.

Building a job's view costs two more queries (artifacts, warnings), the typed result and a pydantic
pass: ~10x a query. A poller mostly reads jobs that have not changed since its last read, so each read
asks the database only for the job's *version* (GET /v1/jobs/{id}: in the query that looks up the
caller's key) and re-renders when it moved:

    version = (updated_at, newest warning event id, artifact count, newest artifact created_at)

Every writer of a field JobOut shows sets `jobs.updated_at` (service/jobs/store.py, states.py,
lease.py, service/estimates/store.py); warnings and artifacts are rows of their own, so they count in the version
directly. The version is read from the database on every request, so several API processes (each with
its own cache) never serve a view older than the row they just read. The bytes are those of
`JobOut.model_dump_json()`, which is what FastAPI's response_model path wrote (the same pydantic
serialiser): the body is unchanged.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from threading import Lock
from typing import Any

from sqlalchemy import ColumnElement, Connection, DateTime, Engine, Select, and_, bindparam, func, select, type_coerce
from sqlalchemy.orm import Session

from service.core.db import run_read
from service.core.errors import JobNotFound
from service.core.models import Artifact, EventKind, Job, JobEvent, Team
from service.jobs import service as jobs
from service.jobs.views import job_views
from service.keys.auth import authenticate_row, authenticate_rows, key_query

Version = tuple[Any, ...]
VERSION = 5  # where _version_columns start in a key_query row (after the key's five)


def _version_columns() -> tuple[ColumnElement, ...]:
    # The times as the driver gives them: a version is only compared with itself, so the UTC column
    # type's conversion (3 per job, 60 per page read) would buy nothing.
    warning = (
        select(func.max(JobEvent.id))
        .where(JobEvent.job_id == Job.id, JobEvent.kind == EventKind.warning.value)
        .scalar_subquery()
    )
    arts = select(func.count(Artifact.id)).where(Artifact.job_id == Job.id).scalar_subquery()
    art_time = type_coerce(
        select(func.max(Artifact.created_at)).where(Artifact.job_id == Job.id).scalar_subquery(), DateTime()
    )
    return Job.id, type_coerce(Job.updated_at, DateTime()), warning, arts, art_time


class RenderedJobs:
    """An LRU of {job id: (version, JSON bytes)}, at most `capacity` jobs; thread-safe (the API's
    threadpool shares it)."""

    def __init__(self, capacity: int = 2048):
        self.capacity = capacity
        self._lock = Lock()
        self._items: OrderedDict[str, tuple[Version, bytes]] = OrderedDict()

    def _get(self, job_id: str, version: Version) -> bytes | None:
        with self._lock:
            hit = self._items.get(job_id)
            if hit is None or hit[0] != version:
                return None
            self._items.move_to_end(job_id)
            return hit[1]

    def _put(self, job_id: str, version: Version, body: bytes) -> None:
        with self._lock:
            self._items[job_id] = (version, body)
            self._items.move_to_end(job_id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def bodies(self, conn: Connection, found: Sequence[tuple[str, Version]]) -> list[bytes]:
        """The JSON of each job in `found`, rendering (in one batch of queries, in an ORM session on
        `conn`) those not cached at their version: a read whose jobs are all cached builds no session."""
        bodies: dict[str, bytes] = {}
        missing: dict[str, Version] = {}
        for job_id, version in found:
            body = self._get(job_id, version)
            if body is None:
                missing[job_id] = version
            else:
                bodies[job_id] = body
        if missing:
            with Session(bind=conn) as session:
                rows = list(session.scalars(select(Job).where(Job.id.in_(list(missing)))))
                views = job_views(session, rows)
            for view in views:
                body = view.model_dump_json().encode()
                # Stored under the version read first: the rows read since are as new or newer, and a
                # reader that sees a newer version renders again.
                self._put(view.id, missing[view.id], body)
                bodies[view.id] = body
        return [bodies[job_id] for job_id, _ in found if job_id in bodies]


# Built once (their cache keys are memoised on them): the key's lookup with the job's version, the one
# query of a read whose job is cached; and with a page of the team's jobs, newest first (a page with
# filters adds them to the join).
_KEY_AND_JOB = key_query(*_version_columns(), join=Job, on=and_(Job.team_id == Team.id, Job.id == bindparam("job_id")))


def _key_and_page(*filters: ColumnElement) -> Select:
    return (
        key_query(*_version_columns(), join=Job, on=and_(Job.team_id == Team.id, *filters))
        .order_by(Job.id.desc())
        .limit(bindparam("limit"))
    )


_KEY_AND_PAGE = _key_and_page()


def job_body(cache: RenderedJobs, engine: Engine, authorization: str | None, job_id: str) -> bytes:
    """GET /v1/jobs/{id}'s JSON, the caller authenticated by the same query (Unauthorized without a live
    key); JobNotFound when the team has no such job (another team's looks the same)."""

    def read(conn: Connection) -> list[bytes]:
        _, row = authenticate_row(
            conn, authorization, _KEY_AND_JOB, {"job_id": job_id if jobs.is_job_id(job_id) else ""}
        )
        return cache.bodies(conn, [(row[VERSION], tuple(row[VERSION + 1 :]))] if row[VERSION] is not None else [])

    bodies = run_read(engine, read)
    if not bodies:
        raise JobNotFound(job_id)
    return bodies[0]


def list_body(
    cache: RenderedJobs,
    engine: Engine,
    authorization: str | None,
    *,
    limit: int,
    after: str | None,
    statuses: Sequence[str],
    where: Sequence = (),
) -> bytes:
    """GET /v1/jobs's JSON (JobList's fields in their order around the jobs' own JSON), the caller
    authenticated by the same query. A bad cursor's 422 is answered after the key is checked
    (service/http/deps.py key_first), as everywhere."""
    filters = jobs.list_filters(after=after, statuses=statuses, where=where)
    query = _key_and_page(*filters) if filters else _KEY_AND_PAGE

    def read(conn: Connection) -> tuple[list[bytes], bool, str | None]:
        _, rows = authenticate_rows(conn, authorization, query, {"limit": limit + 1})
        versions = [(row[VERSION], tuple(row[VERSION + 1 :])) for row in rows if row[VERSION] is not None]
        found, has_more, cursor = jobs.page(versions, limit, lambda v: v[0])
        return cache.bodies(conn, found), has_more, cursor

    bodies, has_more, cursor = run_read(engine, read)
    return (
        b'{"object":"list","data":['
        + b",".join(bodies)
        + b'],"has_more":'
        + (b"true" if has_more else b"false")
        + b',"next_cursor":'
        + json.dumps(cursor).encode()
        + b"}"
    )
