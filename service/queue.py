"""Commit, then enqueue: the task is sent by name only after the job row is committed, so a worker
can never pick up a job id whose row does not exist yet (Celery docs, "Database transactions").

If the broker is down the job simply stays `queued` with `dispatched_at` NULL; `dispatch_queued`
(the reconciler: `nbl admin dispatch`, or a periodic call) sends it later. Sending twice is harmless:
the worker's claim is a compare-and-set on the row.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import Celery
from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from .celery_app import RUN_JOB
from .models import Job, JobStatus, utcnow

log = logging.getLogger(__name__)


def send_run_job(celery: Celery, job_id: str) -> bool:
    """Send "nbl.run_job"(job_id) to the broker. False (logged) when the broker is unreachable."""
    try:
        celery.send_task(RUN_JOB, args=[job_id])
    except Exception as e:  # noqa: BLE001 - any broker failure leaves the job to the reconciler
        log.warning("could not enqueue %s (%s: %s); it stays queued for the reconciler", job_id, type(e).__name__, e)
        return False
    return True


def enqueue_job(session: Session, celery: Celery, job_id: str) -> bool:
    """Send the task for a committed job and record `dispatched_at`. Call only after the commit."""
    if session.in_transaction() and session.new:
        raise RuntimeError("enqueue_job called with uncommitted changes: commit the job first")
    if not send_run_job(celery, job_id):
        return False
    session.execute(update(Job).where(Job.id == job_id).values(dispatched_at=utcnow()))
    session.commit()
    return True


def dispatch_queued(session: Session, celery: Celery, *, stale_after_s: float | None = 3600,
                    limit: int = 1000) -> list[str]:
    """The reconciler's hook: re-send what the broker may not hold. Returns the job ids sent.

    - queued jobs never dispatched (the broker was down when they were created);
    - queued jobs dispatched more than `stale_after_s` ago (a message lost, e.g. taken by a worker
      that died, on a transport without re-delivery); None skips these;
    - running/cancelling jobs whose lease expired (the worker died): claim_job takes them over.
    """
    now = utcnow()
    conditions = [and_(Job.status == JobStatus.queued.value, Job.dispatched_at.is_(None)),
                  and_(Job.status.in_([JobStatus.running.value, JobStatus.cancelling.value]),
                       Job.lease_expires_at < now, or_(Job.dispatched_at.is_(None), Job.dispatched_at < Job.lease_expires_at))]
    if stale_after_s is not None:
        conditions.append(and_(Job.status == JobStatus.queued.value,
                               Job.dispatched_at < now - timedelta(seconds=stale_after_s)))
    ids = list(session.scalars(select(Job.id).where(or_(*conditions)).order_by(Job.id).limit(limit)))
    session.commit()  # end the read transaction before talking to the broker
    sent = [job_id for job_id in ids if enqueue_job(session, celery, job_id)]
    if ids:
        log.info("reconciler: %d of %d jobs re-sent", len(sent), len(ids))
    return sent
