"""The job's state machine: with its lease's transitions (service/jobs/lease.py), the one place that writes
`jobs.status`, and with each change the status event and the webhook outbox row, in the same transaction.

    queued --claim--> running --finish--> succeeded | failed | cancelled
    queued --cancel--> cancelled            running --cancel--> cancelling --finish--> cancelled
    running (lease expired) --requeue--> queued      (the reconciler; or failed after max attempts)
    cancelling (lease expired) --claim or reconcile--> cancelled
    running --begin_publish--> running with publishing_at set: no cancel from then on (a 409), even
                               queued again after its worker died; it ends succeeded or failed

Ownership is a lease: `claim_job` hands back a token and every later write that matters is fenced
by it (`owned`), so a worker that lost its lease cannot overwrite the new owner's work. Taking, keeping
and losing a lease (claim_job, heartbeat, requeue_lost) are lease.py's, which writes each status change
through `status_changed` here. Terminal states never change. Each transition is a compare-and-set on the
row, so two workers, two API calls or two reconcilers racing on one job move it once. Every function that
writes commits (or rolls back) before it returns, except `insert_queued`, whose caller commits the new row.
tests/service/jobs/test_state_writers.py checks that no module but these two writes a status, a JobEvent
or an outbox row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, case, false, select, update
from sqlalchemy.orm import Session

from nbl.result import finite as finite_tree
from service.core.cas import cas
from service.core.errors import CancelNotPossible, InvalidJobState
from service.core.models import (
    OWNED,
    TERMINAL,
    ErrorType,
    EventKind,
    Job,
    JobEvent,
    JobStatus,
    UTCDateTime,
    utcnow,
)
from service.jobs import outbox

EVENT_KINDS = {k.value for k in EventKind}
ERROR_TYPES = {e.value for e in ErrorType}


def finite(x: Any) -> float | None:
    """JSON has no NaN/inf: store them as NULL."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def owned(job_id: str, lease_token: str | None):
    """WHERE clause: this job, still held by `lease_token` (no fence when the token is None)."""
    clause = and_(Job.id == job_id, Job.status.in_(OWNED))
    return clause if lease_token is None else and_(clause, Job.lease_token == lease_token)


def event(
    session: Session,
    job_id: str,
    kind: str,
    *,
    message: str | None = None,
    stage: str | None = None,
    progress: float | None = None,
    data: Mapping | None = None,
    now=None,
    stage_progress: float | None = None,
    eta: float | None = None,
) -> JobEvent:
    """Add a row to the job's event log (no commit). service.jobs.store uses it for stage, progress,
    log and warning events; the status events are written below, with their transitions."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"event kind must be one of {sorted(EVENT_KINDS)}, got {kind!r}")
    ev = JobEvent(
        job_id=job_id,
        kind=kind,
        message=message,
        stage=stage,
        progress=finite(progress),
        stage_progress=finite(stage_progress),
        eta_seconds=finite(eta),
        data=finite_tree(dict(data)) if data is not None else None,  # JSON (and Postgres) has no NaN
        created_at=now or utcnow(),
    )
    session.add(ev)
    return ev


def status_changed(session: Session, job_id: str, status: str, now: datetime, message: str, **data: Any) -> None:
    """The status event and the webhook outbox row of a transition, in its transaction."""
    event(session, job_id, EventKind.status.value, message=message, data={"status": status, **data}, now=now)
    outbox.enqueue(session, job_id, status, now)  # no event for queued or cancelling: enqueue skips them


# --- create --------------------------------------------------------------------------------------


def insert_queued(session: Session, now: datetime, **fields: Any) -> Job:
    """Add a new queued job (created at `now`) and its first event, flushed but not committed: the
    caller commits, and catches the IntegrityError of an idempotency race."""
    job = Job(
        status=JobStatus.queued.value,
        created_at=now,
        updated_at=now,
        progress=0.0,
        attempt=0,
        cancel_requested=False,
        **fields,
    )
    session.add(job)
    session.flush()
    session.add(
        JobEvent(
            job_id=job.id, kind=EventKind.status.value, message="queued", data={"status": "queued"}, created_at=now
        )
    )
    return job


# --- finish --------------------------------------------------------------------------------------


def finish(
    session: Session,
    job_id: str,
    lease_token: str,
    status: str,
    error_type: str | None = None,
    error_message: str | None = None,
) -> bool:
    """Move an owned job to its terminal state. False (nothing written) when the lease is not ours
    or the job is already terminal. A failure needs an error_type: user | system | timeout."""
    if status not in TERMINAL:
        raise ValueError(f"finish() takes a terminal status {sorted(TERMINAL)}, got {status!r}")
    if status == JobStatus.failed.value and error_type not in ERROR_TYPES:
        raise ValueError(f"a failed job needs error_type in {sorted(ERROR_TYPES)}, got {error_type!r}")
    if status != JobStatus.failed.value and error_type is not None:
        raise ValueError("error_type is only for failed jobs")
    now = utcnow()
    values: dict[str, Any] = {
        "status": status,
        "finished_at": now,
        "updated_at": now,
        "lease_expires_at": None,
        "error_type": error_type,
        "error_message": (error_message or None) and error_message[:4000],
        "eta_seconds": None,
        "hub_token_encrypted": None,
    }  # a job's own token dies with it
    if status == JobStatus.succeeded.value:
        values.update(progress=1.0, stage_progress=1.0)
    if not cas(session, update(Job).where(owned(job_id, lease_token)).values(**values)):
        return False
    data = {"error_type": error_type} if error_type else {}
    status_changed(
        session, job_id, status, now, status if not error_message else f"{status}: {error_message[:500]}", **data
    )
    session.commit()  # the outbox row commits with the terminal state
    return True


# --- cancel --------------------------------------------------------------------------------------


def request_cancel(session: Session, job: Job) -> bool:
    """The API's cancel, as one compare-and-set on the status `job` was read with: queued ->
    cancelled at once; running -> cancelling (the worker stops at its next checkpoint and finishes
    it as cancelled); cancelling stays; a terminal job is InvalidJobState, one that began publishing
    CancelNotPossible (both 409). True when done (committed); False when the job moved meanwhile
    (rolled back: read it again and retry). The set also needs publishing_at still NULL, so a cancel
    and the worker's begin_publish cannot both win."""
    now = utcnow()
    if job.publishing_at is not None and job.status not in TERMINAL:
        session.rollback()
        raise CancelNotPossible(f"job {job.id} is publishing; cancel not possible: it will end succeeded or failed")
    if job.status == JobStatus.queued.value:
        target = {"status": JobStatus.cancelled.value, "finished_at": now, "hub_token_encrypted": None}
    elif job.status == JobStatus.running.value:
        target = {"status": JobStatus.cancelling.value}
    elif job.status == JobStatus.cancelling.value:
        session.commit()
        return True
    else:
        session.rollback()
        raise InvalidJobState(f"job {job.id} is already {job.status}; only queued or running jobs can be cancelled")
    if not cas(
        session,
        update(Job)
        .where(Job.id == job.id, Job.status == job.status, Job.publishing_at.is_(None))
        .values(cancel_requested=True, updated_at=now, **target),
    ):
        return False
    status_changed(
        session, job.id, target["status"], now, target["status"], requested_by="api"
    )  # job.cancelled if queued
    session.commit()
    return True


def begin_publish(session: Session, job_id: str, lease_token: str) -> bool:
    """The worker's last checkpoint before its outputs go where the API or the Hub serves them: sets
    publishing_at on the running job it holds, unless a cancel was requested. True: from now on a cancel
    is refused and the job ends succeeded or failed. False: a cancel came first (or the lease is gone):
    stop, nothing published. A retried attempt of a job that began publishing passes again; the first
    time is kept. Idempotent, so safe to retry through a database outage."""
    now = utcnow()
    first = case(
        (Job.publishing_at.is_(None), bindparam("publish_now", now, type_=UTCDateTime())), else_=Job.publishing_at
    )
    if not cas(
        session,
        update(Job)
        .where(
            Job.id == job_id,
            Job.status == JobStatus.running.value,
            Job.lease_token == lease_token,
            Job.cancel_requested == false(),
        )
        .values(publishing_at=first, updated_at=now),
    ):
        return False
    # a log event carries the job's figures, as every other one does (a reader sorts events by progress)
    row = session.execute(select(Job.progress, Job.stage_progress, Job.eta_seconds).where(Job.id == job_id)).one()
    event(
        session,
        job_id,
        EventKind.log.value,
        message="publishing began: the job can no longer be cancelled",
        stage="publish",
        progress=row.progress,
        stage_progress=row.stage_progress,
        eta=row.eta_seconds,
        now=now,
    )
    session.commit()
    return True


def cancel_requested(session: Session, job_id: str) -> bool:
    """The worker's checkpoint: True when the job should stop (a cancel was asked, or the row is
    gone); it then acknowledges with finish(..., "cancelled")."""
    row = session.execute(select(Job.status, Job.cancel_requested).where(Job.id == job_id)).first()
    session.commit()
    return row is None or row.cancel_requested or row.status in (JobStatus.cancelling.value, JobStatus.cancelled.value)
