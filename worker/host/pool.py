"""Which Celery pool `nbl worker` runs, and what the solo pool needs to stand in for prefork.

prefork (Postgres + Redis, as docker-compose deploys): one child, a fresh child per job. The hard
time limit can kill a stuck job; a child that dies (OOM, SIGKILL) leaves the parent alive to
re-queue its message (task_reject_on_worker_lost) and take the next job; a job's memory (GPU
included) goes back to the system when its child exits.

solo, whenever the broker or the database is SQLite (the embedded default): the job runs in the
worker's own process, which never forks. Forking is what hung the embedded worker: billiard forks
the next child from its supervisor thread while the main thread polls the SQLite broker; a child
forked while that thread held SQLite's memory mutex deadlocks on its first SQLite call
(sqlite3Malloc in lease.claim_job), and the job stays queued forever. (The reconcile thread would
do the same with a SQLite database.) A fork-safe SQLite connection does not exist: the mutex is
SQLite's own, process-wide. What solo gives up, and what stands in:

- a killed job kills the worker: the restarted `nbl worker` runs a reconcile pass at start and on
  its interval (service/jobs/reconcile_loop.py), which queues the job again once its lease expires;
- time limits: Celery enforces none in solo; `install_solo_limits` raises SoftTimeLimitExceeded in
  the task with SIGALRM at NBL_TASK_SOFT_TIME_LIMIT (the job fails as `timeout`). There is no hard
  limit: code that never returns to Python keeps the worker until it is killed;
- memory: a job's tensors are freed when it ends, and the CUDA cache is emptied after each job, but
  the process stays (host memory may be kept by the allocator).
"""

from __future__ import annotations

import signal

from celery import signals
from celery.exceptions import SoftTimeLimitExceeded

from service.core.settings import Settings


def uses_sqlite(settings: Settings) -> bool:
    return settings.database_is_sqlite or "sqlite" in settings.broker_scheme


def pool_options(settings: Settings) -> list[str]:
    if uses_sqlite(settings):
        return ["--pool", "solo"]
    return ["--pool", "prefork", "--concurrency", "1", "--max-tasks-per-child", "1"]


class SoloTimeLimit:
    """The soft time limit of a task run inline by the solo pool: armed before the task, in the main
    thread that runs it (where SIGALRM's handler runs), disarmed after."""

    def __init__(self, limit_s: float):
        self.limit_s = limit_s

    def _expired(self, signum, frame):
        raise SoftTimeLimitExceeded(f"soft time limit ({self.limit_s:g} s) exceeded")

    def arm(self, **_) -> None:
        signal.signal(signal.SIGALRM, self._expired)
        signal.setitimer(signal.ITIMER_REAL, self.limit_s)

    def disarm(self, **_) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _empty_cuda_cache()  # no gc.collect(): it costs ~1 s with torch loaded; refcounting frees a job's tensors


def install_solo_limits(settings: Settings) -> None:
    limit = SoloTimeLimit(settings.task_soft_time_limit_s)
    signals.task_prerun.connect(limit.arm, weak=False)
    signals.task_postrun.connect(limit.disarm, weak=False)


def _empty_cuda_cache() -> None:
    import torch  # already loaded by the task's pipeline

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
