"""A job's lease, the worker's hold on a running job: taken (`claim_job`: queued -> running, or a running job
whose lease expired taken over), kept (`heartbeat`) and lost (`requeue_lost`: the reconciler's running ->
queued once it expired). Part of the job's state machine (service/jobs/states.py, whose docstring draws it):
each transition is a compare-and-set on the row and writes its status event and webhook outbox row through
states.status_changed, in the same transaction; the writes a lease fences check it with states.owned. As
there, every function that writes commits (or rolls back) before it returns.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, bindparam, case, or_, select, update
from sqlalchemy.orm import Session

from service.core.cas import cas
from service.core.models import Job, JobStatus, UTCDateTime, utcnow
from service.jobs.states import owned, status_changed


def claim_job(
    session: Session,
    job_id: str,
    lease_seconds: int,
    *,
    max_attempts: int | None = None,
    owner: str | None = None,
    dead_owner: str | None = None,
) -> str | None:
    """Compare-and-set queued -> running (or take over a running job whose lease expired).

    Returns the new lease token, or None when the job is not claimable: unknown, terminal, or
    running under a live lease. A cancelling job whose worker died is finished as cancelled here.
    attempt += 1; started_at is set on the first claim. `owner` (worker.host.ownership) is recorded;
    `dead_owner` also takes over a live lease that this owner holds (the caller knows it died).
    With `max_attempts`, a job that already had that many is not taken over: the reconciler fails
    it, so a poison job cannot loop.
    """
    now = utcnow()
    token = secrets.token_hex(16)
    now_param = bindparam("claim_now", now, type_=UTCDateTime())
    expired = Job.lease_expires_at < now
    if dead_owner is not None:
        expired = or_(expired, Job.lease_owner == dead_owner)
    takeover = and_(Job.status == JobStatus.running.value, expired)
    if max_attempts is not None:
        takeover = and_(takeover, Job.attempt < max_attempts)
    claim = update(Job).values(
        status=JobStatus.running.value,
        attempt=Job.attempt + 1,
        lease_token=token,
        lease_owner=owner,
        lease_expires_at=now + timedelta(seconds=lease_seconds),
        heartbeat_at=now,
        updated_at=now,
        started_at=case((Job.started_at.is_(None), now_param), else_=Job.started_at),
    )
    # A lost worker's job taken over here, before the reconciler requeued it, gets the same "worker lost"
    # event as a requeue would have written: the history says why there is a second attempt either way.
    lost = session.execute(
        select(Job.lease_token, Job.lease_owner, Job.stage, Job.attempt).where(Job.id == job_id, takeover)
    ).first()
    if lost is not None and lost.lease_token is not None:
        claimed = cas(session, claim.where(Job.id == job_id, takeover, Job.lease_token == lost.lease_token))
        if claimed:
            _lost_event(session, job_id, lost, max_attempts, now)
    else:
        claimed = cas(session, claim.where(Job.id == job_id, or_(Job.status == JobStatus.queued.value, takeover)))
    if claimed:
        attempt = session.scalar(select(Job.attempt).where(Job.id == job_id))
        status_changed(session, job_id, JobStatus.running.value, now, f"running (attempt {attempt})", attempt=attempt)
        session.commit()
        return token
    # A cancel arrived for a job whose worker died: nobody will reach the next checkpoint.
    if cas(
        session,
        update(Job)
        .where(Job.id == job_id, Job.status == JobStatus.cancelling.value, Job.lease_expires_at < now)
        .values(
            status=JobStatus.cancelled.value,
            finished_at=now,
            updated_at=now,
            lease_expires_at=None,
            hub_token_encrypted=None,
        ),
    ):
        status_changed(session, job_id, JobStatus.cancelled.value, now, "cancelled")
        session.commit()
    return None


def heartbeat(session: Session, job_id: str, lease_token: str, lease_seconds: int | None = None) -> bool:
    """Extend the lease. False when it is no longer ours (taken over, or the job ended)."""
    now = utcnow()
    values: dict[str, Any] = {"heartbeat_at": now}
    if lease_seconds is not None:
        values["lease_expires_at"] = now + timedelta(seconds=lease_seconds)
    else:  # keep the same lease length as the claim gave
        values["lease_expires_at"] = now + _lease_length(session, job_id, lease_token)
    return cas(session, update(Job).where(owned(job_id, lease_token)).values(**values), commit=True)


def _lease_length(session: Session, job_id: str, lease_token: str) -> timedelta:
    row = session.execute(
        select(Job.lease_expires_at, Job.heartbeat_at).where(Job.id == job_id, Job.lease_token == lease_token)
    ).first()
    if row is None or row.lease_expires_at is None or row.heartbeat_at is None:
        return timedelta(seconds=120)
    return max(row.lease_expires_at - row.heartbeat_at, timedelta(seconds=5))


def requeue_lost(session: Session, job, max_attempts: int, now: datetime) -> str | None:
    """The reconciler's running -> queued, if the lease it saw (`job`: a row with id, lease_token,
    attempt, stage, lease_owner) is still the one held and still expired. Returns the event's
    message, or None when the worker renewed its lease in time or another reconciler got there first."""
    if not cas(
        session,
        update(Job)
        .where(
            Job.id == job.id,
            Job.status == JobStatus.running.value,
            Job.lease_token == job.lease_token,
            Job.lease_expires_at < now,
        )
        .values(
            status=JobStatus.queued.value,
            lease_token=None,
            lease_expires_at=None,
            dispatched_at=None,
            progress=0.0,
            stage_progress=None,
            eta_seconds=None,
            updated_at=now,
        ),
    ):
        return None
    message = _lost_event(session, job.id, job, max_attempts, now)
    session.commit()
    return message


def _lost_event(session: Session, job_id: str, job, max_attempts: int | None, now: datetime) -> str:
    """The "worker lost" event of a job whose lease expired (`job`: its lease_owner, stage, attempt)."""
    who = f"worker {job.lease_owner}" if job.lease_owner else "worker"
    of = f" of {max_attempts}" if max_attempts is not None else ""
    message = f"queued again: {who} lost at stage {job.stage or 'claim'} (attempt {job.attempt}{of})"
    status_changed(
        session,
        job_id,
        JobStatus.queued.value,
        now,
        message,
        reason="worker lost",
        attempt=job.attempt,
        stage=job.stage,
    )
    return message
