"""The worker's estimate of a job that came without one (the API could not read a Hub model's config)."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.orm import Session

from service.core.cas import cas
from service.core.models import Job, utcnow


def keep_estimate(session: Session, job_id: str, figures: dict) -> bool:
    """Store `figures` unless the job has an estimate already: the API's, which chose its queue, stays."""
    return cas(
        session,
        update(Job).where(Job.id == job_id, Job.estimate.is_(None)).values(estimate=figures, updated_at=utcnow()),
        commit=True,
    )  # updated_at: the job's view changed
