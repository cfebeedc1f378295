"""The Celery application, configured once for both sides: the API sends "nbl.run_job" by name
(it never imports the task), the worker registers the task on the same configuration.

    worker side (worker/):   celery = make_celery(Settings())
                             @celery.task(name=RUN_JOB, bind=True)
                             def run_job(self, job_id: str): ...

acks_late with prefetch 1: a message is acknowledged only after the task returns, so a worker that
dies mid-job gets it re-delivered; that is safe because the task re-reads the row and claims it
with a lease (service.jobs.lease.claim_job), and every stage skips work already checkpointed. On Redis
the visibility timeout must outlive the longest task, or a running job is delivered twice
(Settings checks visibility_timeout_s > task_time_limit_s).
"""

from __future__ import annotations

from celery import Celery

from service.core.settings import Settings

RUN_JOB = "nbl.run_job"


def broker_transport_options(settings: Settings) -> dict:
    scheme = settings.broker_scheme
    if scheme.startswith(("redis", "rediss", "sentinel")):
        return {
            "visibility_timeout": settings.visibility_timeout_s,
            "socket_connect_timeout": settings.publish_timeout_s,
            "socket_timeout": 30,
        }
    if scheme.startswith(("sqs",)):
        return {"visibility_timeout": settings.visibility_timeout_s}
    # kombu's SQLAlchemy transport passes unknown options to create_engine(): give it none.
    # It has no visibility timeout: a message taken by a worker that then dies is not re-delivered;
    # service.jobs.queue.dispatch_queued (the reconciler) re-sends such jobs from the DB.
    return {}


def default_queue(settings: Settings) -> str:
    """Where a job without an estimate goes: the first (smallest) worker class's queue."""
    from nbl.sizing.classes import parse_classes, queue_of

    return queue_of(settings.queue_name, parse_classes(settings.worker_classes)[0])


def make_celery(settings: Settings) -> Celery:
    if settings.broker_url.startswith("sqla+sqlite"):
        settings.ensure_dirs()
    app = Celery("nbl", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,  # re-deliver when the worker process is killed (OOM, SIGKILL)
        worker_prefetch_multiplier=1,
        worker_concurrency=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_ignore_result=True,  # the DB row is the result
        result_backend=None,
        task_time_limit=settings.task_time_limit_s,
        task_soft_time_limit=settings.task_soft_time_limit_s,
        broker_transport_options=broker_transport_options(settings),
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=settings.publish_timeout_s,
        task_default_queue=default_queue(settings),
        task_routes={RUN_JOB: {"queue": default_queue(settings)}},
        task_create_missing_queues=True,
        # Publishing from the API: a couple of quick retries, then give up and leave the job
        # for the reconciler (the API still answers 201).
        task_publish_retry=True,
        task_publish_retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5},
        worker_hijack_root_logger=False,
        enable_utc=True,
    )
    return app
