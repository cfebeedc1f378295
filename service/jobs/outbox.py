"""The webhook outbox's producer: the row a job's new state sends, written by the job's state machine
(service/jobs/states.py, the only caller) in the transaction of the change, so the event commits or rolls
back with it. One `webhook_deliveries` row with the exact body:

    {"type": "job.succeeded", "timestamp": "...Z", "data": <the job, as GET /v1/jobs/{id} shows it>}

service/webhooks/delivery.py sends it (signed, retried); it never reads a job again.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import Job, JobStatus, utcnow
from service.core.webhook_tables import WebhookDelivery, WebhookStatus
from service.jobs.views import job_view

EVENTS = {  # job status -> event type
    JobStatus.running.value: "job.running",
    JobStatus.succeeded.value: "job.succeeded",
    JobStatus.failed.value: "job.failed",
    JobStatus.cancelled.value: "job.cancelled",
}
# Keys never sent in a webhook body, at any depth (belt and braces: the job view holds none today).
_SECRET_KEY = re.compile(r"(^|_)token$|secret|password|authorization|api_?key", re.IGNORECASE)


def scrub(value):
    """A copy of a JSON value without any key that names a secret."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def enqueue(session: Session, job_id: str, status: str, now: datetime | None = None) -> str | None:
    """Queue the event for a job's new `status`, in the caller's transaction (no commit). Returns
    the webhook-id, or None when the job has no webhook_url or the status has no event."""
    event = EVENTS.get(status)
    if event is None:
        return None
    job = session.scalar(select(Job).where(Job.id == job_id).execution_options(populate_existing=True))
    url = (job.spec or {}).get("webhook_url") if job is not None else None
    if not url:
        return None
    now = now or utcnow()
    body = {
        "type": event,
        "timestamp": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "data": scrub(job_view(session, job).model_dump(mode="json")),
    }
    msg_id = "msg_" + os.urandom(16).hex()
    session.add(
        WebhookDelivery(
            id=msg_id,
            job_id=job_id,
            event=event,
            url=url,
            status=WebhookStatus.pending.value,
            payload=json.dumps(body, separators=(",", ":")),
            attempts=0,
            next_attempt_at=now,
            created_at=now,
        )
    )
    return msg_id
