"""A delivery of a job that has ended is dropped in the worker's main process, before the pool.

A job cancelled while queued no longer counts against its team's caps, but its message stays in
the shared queue. Handed to the pool, each such dead message cost a whole prefork child (forked
from a parent that holds torch, one task, exit: `--max-tasks-per-child 1`) just for the claim to
say "already cancelled": about 5 s each on a loaded machine, so a team that submitted and
cancelled in a loop stalled every team's jobs behind its dead messages (issue 24, red-team pass).

Celery asks `Request.revoked()` in the main process right before it hands a request to the pool
(`execute_using_pool`, prefork and solo alike). `JobRequest.revoked` also reads the job's status
there: a job that is unknown or terminal is dropped as a revoked task is (acknowledged, no child,
no torch), in a few milliseconds. Anything else (queued, running, cancelling) goes to the pool,
whose claim decides: a running job of a dead child is taken over there, a cancelling one ends.
Terminal states never change (service/jobs/states.py), so a drop is never wrong; a job queued
again later gets a message of its own. A read that fails (the database is away) lets the delivery
through: the task rides the outage out as before.

Revoking the task at cancel time would not do: a worker that starts later never hears of it.

The read has an engine of its own without a pool: the main process forks the pool's children,
which must not inherit its connections (the job's code builds its own engine in the child).
"""

from __future__ import annotations

import logging

from celery.worker.request import Request
from sqlalchemy import Engine, select
from sqlalchemy.pool import NullPool

from service.core.models import TERMINAL, Job

log = logging.getLogger(__name__)
_engine: Engine | None = None
CONNECT_TIMEOUT_S = 5  # a database that does not answer: the delivery goes to the pool, which waits it out


def _gate_engine() -> Engine:
    global _engine
    if _engine is None:
        from service.core.db import make_engine
        from worker.tasks import settings  # the worker's one Settings (loaded before any delivery)

        extra = {} if settings.database_is_sqlite else {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}}
        _engine = make_engine(settings, poolclass=NullPool, **extra)
    return _engine


def ended(job_id: str) -> str | None:
    """Why a delivery of `job_id` can only be dropped ("already cancelled", "unknown job"), or None
    when it must go to the pool (the job may still be claimed, or the database did not answer)."""
    try:
        with _gate_engine().connect() as conn:
            status = conn.scalar(select(Job.status).where(Job.id == job_id))
    except Exception as e:  # noqa: BLE001 - the task itself handles an unreachable database
        log.warning("job %s: status not read before the pool (%s); delivering", job_id, type(e).__name__)
        return None
    if status is None:
        return "unknown job"
    return f"already {status}" if status in TERMINAL else None


class JobRequest(Request):
    """nbl.run_job's request in the worker's main process (the task's `Request`)."""

    def revoked(self) -> bool:
        if super().revoked():
            return True
        job_id = (self.args or [None])[0] or (self.kwargs or {}).get("job_id")
        if not isinstance(job_id, str):
            return False  # not ours to judge: the task refuses it
        reason = ended(job_id)
        if reason is None:
            return False
        log.info("job %s: delivery dropped: %s (before the pool)", job_id, reason)
        # Celery's own bookkeeping of a revoked request: off the reserved list, acknowledged, never run.
        self._announce_revoked(reason, terminated=False, signum=None, expired=False)
        return True
