"""The reconciler: the job row is the truth and the broker only a delivery hint, so one periodic pass
makes them agree again after a worker, the broker or the database went away.

Each pass (`reconcile_once`):

1. lost workers: a running job whose lease expired (its worker died, or stopped heartbeating) goes
   back to queued for another attempt; after Settings.max_attempts attempts it fails instead, with
   the reason ("worker lost 3 times (last at stage calibrate)"), so a poison job that kills every
   worker cannot loop. A cancelling job whose worker died is cancelled.
2. lost messages: queued jobs never sent (the broker was down when they were created) or sent more
   than Settings.redispatch_after_s ago (the broker restarted without persistence) are sent again
   (service.jobs.queue.dispatch_queued).

A duplicate message is harmless: the worker claims with a compare-and-set (service.jobs.lease.claim_job)
and drops, with a log line, any delivery of a job that is no longer queued (`drop_reason`).

Any number of copies may run: `nbl worker` and `nbl serve` run the loop in a thread
(service/jobs/reconcile_loop.py), `nbl reconcile [--once] [--interval S]` as a process of its own
(docker-compose runs one). Every transition is a compare-and-set (the lease token for a requeue or
a finish, `dispatched_at` for a send: service.jobs.queue.dispatch_one), so two passes at once requeue and
send each job once. On Postgres a pass also takes a transaction-scoped advisory lock first
(`pass_lock`) and a copy that finds it held skips its turn; on SQLite every write already waits for
the database's one write lock (BEGIN IMMEDIATE, service/core/db.py). Each loop also starts a thread that
delivers the webhooks that are due (service.webhooks.deliverer), apart from the passes: a slow
receiver never delays recovery. A pass that fails (database or broker down) is retried at the next
interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

from celery import Celery
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from service.core.models import OWNED, Job, JobStatus, utcnow
from service.core.settings import Settings
from service.jobs import lease, states
from service.jobs.queue import dispatch_queued

log = logging.getLogger(__name__)


@dataclass
class Pass:
    requeued: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.requeued or self.failed or self.cancelled or self.dispatched)


def reconcile_once(session: Session, celery: Celery, settings: Settings, *, now: datetime | None = None) -> Pass:
    result = recover_lost(session, settings, now=now)
    result.dispatched = dispatch_queued(session, celery, stale_after_s=settings.redispatch_after_s)
    return result


# pg_try_advisory_xact_lock's key: one per database, shared by every copy of the loop ("nblr").
LOCK_KEY = 0x6E626C72


@contextmanager
def pass_lock(engine: Engine) -> Iterator[bool]:
    """Yields whether this copy may run a pass now. On Postgres: a transaction-scoped advisory lock
    taken on a connection of its own (the pass's sessions commit many times, and a session-level
    lock could be released on another pooled connection); it goes when that transaction ends, or
    when the process dies and its connection closes. Other databases: always True."""
    if engine.dialect.name != "postgresql":
        yield True
        return
    with engine.connect() as conn:
        try:
            yield bool(conn.scalar(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": LOCK_KEY}))
        finally:
            conn.rollback()  # ends the transaction, and the lock with it


def locked_pass(engine: Engine, sessions: sessionmaker[Session], celery: Celery, settings: Settings) -> Pass | None:
    """One reconcile pass under `pass_lock`; None when another copy's pass holds it."""
    with pass_lock(engine) as mine:
        if not mine:
            return None
        with sessions() as s:
            return reconcile_once(s, celery, settings)


def recover_lost(session: Session, settings: Settings, *, now: datetime | None = None, limit: int = 1000) -> Pass:
    """Jobs whose lease expired: requeue, fail (attempts exhausted) or cancel them."""
    now = now or utcnow()
    lost = session.execute(
        select(Job.id, Job.status, Job.lease_token, Job.attempt, Job.stage, Job.lease_owner)
        .where(Job.status.in_(OWNED), Job.lease_expires_at < now)
        .order_by(Job.lease_expires_at)
        .limit(limit)
    ).all()
    session.commit()
    result = Pass()
    for job in lost:
        # The terminal moves go through states.finish (fenced by the token we saw), so they write the
        # same event, webhook and clean-up as a worker's own finish.
        if job.status == JobStatus.cancelling.value:
            if states.finish(session, job.id, job.lease_token, JobStatus.cancelled.value):
                result.cancelled.append(job.id)
        elif job.attempt >= settings.max_attempts:
            reason = f"worker lost {job.attempt} times (last at stage {job.stage or 'claim'})"
            if states.finish(
                session, job.id, job.lease_token, JobStatus.failed.value, error_type="system", error_message=reason
            ):
                result.failed.append(job.id)
                log.warning("job %s failed: %s, last on %s", job.id, reason, job.lease_owner or "?")
        else:
            message = lease.requeue_lost(session, job, settings.max_attempts, now)
            if message:
                result.requeued.append(job.id)
                log.warning("job %s: %s", job.id, message)
    return result


def drop_reason(session: Session, job_id: str) -> str:
    """Why a delivery of `job_id` was not claimed, for the worker's log line."""
    row = session.execute(
        select(Job.status, Job.attempt, Job.lease_owner, Job.lease_expires_at).where(Job.id == job_id)
    ).first()
    session.commit()
    if row is None:
        return "unknown job"
    if row.status in OWNED:
        if row.lease_expires_at is not None and row.lease_expires_at < utcnow():
            return f"{row.status}, lease expired after {row.attempt} attempts: left to the reconciler"
        return f"{row.status} under a live lease held by {row.lease_owner or 'another worker'}"
    return f"already {row.status}"


def run(settings: Settings, *, interval_s: float, once: bool = False, stop: threading.Event | None = None) -> int:
    """The reconciler process: a pass every `interval_s` until `stop` is set (or once). Webhooks go
    out from a thread of their own (service.webhooks.deliverer), so that no receiver, however slow,
    delays the recovery of a lease; with `once`, one delivery pass follows the reconcile pass."""
    from service.core.celery_app import make_celery
    from service.core.db import make_engine, make_sessionmaker
    from service.webhooks import deliverer

    engine = make_engine(settings)
    sessions = make_sessionmaker(engine)
    celery = make_celery(settings)
    stop = stop or threading.Event()
    webhooks = None if once else deliverer.start(sessions, settings, interval_s)
    failures = 0
    try:
        while True:
            try:
                result = locked_pass(engine, sessions, celery, settings)
                if result is None:
                    log.debug("reconciler: another copy is running a pass; skipped")
                elif result:
                    log.info(
                        "reconciler: requeued %s, failed %s, cancelled %s, dispatched %s",
                        result.requeued,
                        result.failed,
                        result.cancelled,
                        result.dispatched,
                    )
                failures = 0
            except Exception as e:  # noqa: BLE001 - the database or the broker is down: next pass
                failures += 1
                log.warning(
                    "reconciler pass failed (%s: %s); retrying in %g s", type(e).__name__, _first_line(e), interval_s
                )
            if once:
                deliverer.deliver_once(sessions, settings)
                return 1 if failures else 0
            if stop.wait(interval_s):
                return 1 if failures else 0
    finally:
        if webhooks is not None:
            webhooks.close()
        celery.close()
        engine.dispose()


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [""])[0]
