"""Commit, then enqueue: the task is sent by name only after the job row is committed, so a worker
can never pick up a job id whose row does not exist yet (Celery docs, "Database transactions").

If the broker is down the job simply stays `queued` with `dispatched_at` NULL; `dispatch_queued`
(the reconciler: `nbl admin dispatch`, or a periodic call) sends it later. Sending twice is harmless:
the worker's claim is a compare-and-set on the row.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from celery import Celery
from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from service.core.cas import cas
from service.core.celery_app import RUN_JOB
from service.core.models import Job, JobStatus, utcnow

log = logging.getLogger(__name__)


def send_run_job(celery: Celery, job_id: str, queue: str | None = None) -> bool:
    """Send "nbl.run_job"(job_id) to the broker, to `queue` (the job's worker class; None: the first
    class's, celery_app.default_queue). False (logged) when the broker is unreachable."""
    try:
        celery.send_task(RUN_JOB, args=[job_id], **({"queue": queue} if queue else {}))
    except Exception as e:  # noqa: BLE001 - any broker failure leaves the job to the reconciler
        log.warning("could not enqueue %s (%s: %s); it stays queued for the reconciler", job_id, type(e).__name__, e)
        return False
    return True


def enqueue_job(session: Session, celery: Celery, job_id: str) -> bool:
    """Send the task for a committed job and record `dispatched_at`. Call only after the commit.
    True when the message went out (from here, or from a reconcile pass that got there first)."""
    if session.in_transaction() and session.new:
        raise RuntimeError("enqueue_job called with uncommitted changes: commit the job first")
    seen = session.scalar(select(Job.dispatched_at).where(Job.id == job_id))
    session.commit()
    if dispatch_one(session, celery, job_id, seen):
        return True
    return seen is None and _sent_by_another(session, job_id)  # a reconcile pass sent it first


def dispatch_one(session: Session, celery: Celery, job_id: str, seen: datetime | None) -> bool:
    """Send one job, if nobody sent it since we read `dispatched_at` == `seen`.

    The send is claimed first with a compare-and-set on `dispatched_at`, so that two senders that
    read the same row (two reconcile passes, or one and the API) send it once: the loser's update
    matches no row. A failed send puts the old value back (unless someone else sent it meanwhile).
    A sender that dies between the claim and the send leaves the job looking sent: it is re-sent
    after Settings.redispatch_after_s, like a message the broker lost."""
    stamp = utcnow()
    unchanged = Job.dispatched_at.is_(None) if seen is None else Job.dispatched_at == seen
    if not cas(session, update(Job).where(Job.id == job_id, unchanged).values(dispatched_at=stamp), commit=True):
        return False
    if send_run_job(celery, job_id, job_queue(session, job_id)):
        return True
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.dispatched_at == stamp)
        .values(dispatched_at=seen)
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return False


def job_queue(session: Session, job_id: str) -> str | None:
    """The queue of the job's worker class, from its stored estimate: every send of a job (the API's,
    the reconciler's) goes to the same queue. None: no estimate (the Hub was unreachable at submit)."""
    estimate = session.scalar(select(Job.estimate).where(Job.id == job_id))
    session.commit()
    return (estimate or {}).get("worker_class")


def _sent_by_another(session: Session, job_id: str) -> bool:
    sent = session.scalar(select(Job.dispatched_at).where(Job.id == job_id)) is not None
    session.commit()
    return sent


def due_for_dispatch(
    session: Session, *, stale_after_s: float | None = 3600, limit: int = 1000
) -> list[tuple[str, datetime | None]]:
    """(job id, dispatched_at as read) of the jobs the broker may not hold:

    - queued jobs never dispatched (the broker was down when they were created);
    - queued jobs dispatched more than `stale_after_s` ago (a message lost, e.g. taken by a worker
      that died, on a transport without re-delivery); None skips these;
    - running/cancelling jobs whose lease expired (the worker died): claim_job takes them over.
    """
    now = utcnow()
    conditions = [
        and_(Job.status == JobStatus.queued.value, Job.dispatched_at.is_(None)),
        and_(
            Job.status.in_([JobStatus.running.value, JobStatus.cancelling.value]),
            Job.lease_expires_at < now,
            or_(Job.dispatched_at.is_(None), Job.dispatched_at < Job.lease_expires_at),
        ),
    ]
    if stale_after_s is not None:
        conditions.append(
            and_(Job.status == JobStatus.queued.value, Job.dispatched_at < now - timedelta(seconds=stale_after_s))
        )
    rows = session.execute(
        select(Job.id, Job.dispatched_at).where(or_(*conditions)).order_by(Job.id).limit(limit)
    ).all()
    session.commit()  # end the read transaction before talking to the broker
    return [(r.id, r.dispatched_at) for r in rows]


def dispatch_queued(
    session: Session, celery: Celery, *, stale_after_s: float | None = 3600, limit: int = 1000
) -> list[str]:
    """The reconciler's hook: re-send what the broker may not hold (`due_for_dispatch`), each job once
    even when several passes run at once (`dispatch_one`). Returns the job ids sent."""
    due = due_for_dispatch(session, stale_after_s=stale_after_s, limit=limit)
    sent = [job_id for job_id, seen in due if dispatch_one(session, celery, job_id, seen)]
    if due:
        log.info("reconciler: %d of %d jobs re-sent", len(sent), len(due))
    return sent
