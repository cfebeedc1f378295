"""The job operations behind the API: read, list, cancel, events, layers (submitting one, idempotent:
service/jobs/submit.py).

Routes stay thin; everything here takes a Session and the caller's team, commits where it writes,
and raises domain exceptions (service.core.errors) that the one handler renders. The status
changes themselves are service.jobs.states; the response bodies, service.jobs.views.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.errors import InvalidJobState, InvalidRequest, JobNotFound
from service.core.models import Job, JobEvent, JobStatus
from service.http.pagination import decode_cursor, encode_cursor
from service.jobs import states
from service.jobs.layer_view import layer_list
from service.jobs.responses import EventList, EventOut, LayerList

_JOB_ID = re.compile(r"job_[0-9a-f]{32}")
CURSOR = "v1"  # a page of jobs ends after this job id (service/http/pagination.py)


def get_job(session: Session, team_id: int, job_id: str) -> Job:
    """The team's job, or JobNotFound: another team's job looks exactly like a missing one."""
    job = None
    if is_job_id(job_id):
        job = session.scalar(
            select(Job).where(Job.id == job_id, Job.team_id == team_id).execution_options(populate_existing=True)
        )
    if job is None:
        raise JobNotFound(job_id)
    return job


# --- lists ---------------------------------------------------------------------------------------


def parse_statuses(values: Sequence[str]) -> list[str]:
    statuses = [s.strip() for v in values for s in v.split(",") if s.strip()]
    allowed = {s.value for s in JobStatus}
    bad = [s for s in statuses if s not in allowed]
    if bad:
        raise InvalidRequest(
            f"unknown status {bad[0]!r}; one of {', '.join(s.value for s in JobStatus)}",
            errors=[{"loc": ["query", "status"], "msg": "unknown status", "type": "enum"}],
        )
    return statuses


def list_jobs(
    session: Session, team_id: int, *, limit: int, after: str | None, statuses: Sequence[str], where: Sequence = ()
) -> tuple[list[Job], bool, str | None]:
    """Newest first; keyset pagination on the id (ids sort by creation time); `where`: more clauses."""
    q = select(Job).where(Job.team_id == team_id, *list_filters(after=after, statuses=statuses, where=where))
    jobs = list(session.scalars(q.order_by(Job.id.desc()).limit(limit + 1)))
    return page(jobs, limit, lambda j: j.id)


def list_filters(*, after: str | None, statuses: Sequence[str], where: Sequence = ()) -> list:
    """The clauses of a page of jobs besides the team's: after a cursor, with these statuses, and `where`."""
    clauses = list(where)
    if statuses:
        clauses.append(Job.status.in_(statuses))
    if after:
        clauses.append(Job.id < decode_cursor(after, CURSOR, _JOB_ID))
    return clauses


def page(rows: list, limit: int, id_of) -> tuple[list, bool, str | None]:
    """(the first `limit` of `rows`, fetched as limit + 1, whether there are more, the next cursor)."""
    has_more = len(rows) > limit
    rows = rows[:limit]
    return rows, has_more, (encode_cursor(CURSOR, id_of(rows[-1])) if has_more and rows else None)


def is_job_id(job_id: str) -> bool:
    return _JOB_ID.fullmatch(job_id) is not None


# --- cancel --------------------------------------------------------------------------------------


def cancel_job(session: Session, team_id: int, job_id: str) -> Job:
    """Cancel the team's job (states.request_cancel says how), retried if the worker moved it meanwhile."""
    for _ in range(10):
        if states.request_cancel(session, get_job(session, team_id, job_id)):
            return get_job(session, team_id, job_id)
    raise InvalidJobState(f"job {job_id} kept changing state; try again")


# --- events and layers ---------------------------------------------------------------------------


def list_events(session: Session, team_id: int, job_id: str, *, after: int | None, limit: int) -> EventList:
    get_job(session, team_id, job_id)
    q = select(JobEvent).where(JobEvent.job_id == job_id)
    if after is not None:
        q = q.where(JobEvent.id > after)
    events = list(session.scalars(q.order_by(JobEvent.id).limit(limit + 1)))
    has_more = len(events) > limit
    events = events[:limit]
    return EventList(
        data=[EventOut.model_validate(e) for e in events], has_more=has_more, last_id=events[-1].id if events else after
    )


def layer_scores(session: Session, team_id: int, job_id: str) -> LayerList:
    return layer_list(session, get_job(session, team_id, job_id))
