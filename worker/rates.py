"""After a job succeeds, what its worker measured per stage goes to stage_rates (migration 0011): each
stage's planned token-layers and the seconds it took (worker/progress.py Tracker.measured), under the
job's worker class (the queue its estimate chose) and its model's shape key (nbl/sizing/rates.py). The
API's next estimate for that class and shape reads them (service/estimates/rates.py), and that job's
worker starts its ETA from the stage times it gave (`prior`). A job without an estimate (its Hub config
unread at submit) or without a shape in it records nothing."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.sizing.rates import shape_key
from service.core.models import Job, utcnow
from service.core.stage_rate import StageRate


def record(session: Session, job_id: str, measured: dict[str, tuple[float, float]], warm: bool | None = None) -> int:
    """Rows written (0 when the job's estimate names no class or shape). Commits. `warm`: whether the load
    found the model on disk (its row says so: a cold load's rate is a download's)."""
    estimate = session.scalar(select(Job.estimate).where(Job.id == job_id)) or {}
    key, queue = shape_key(estimate.get("shape")), estimate.get("worker_class")
    if not key or not queue:
        session.rollback()
        return 0
    now = utcnow()
    rows = [StageRate(job_id=job_id, worker_class=queue, shape=key, stage=stage, weight=w, seconds=s, created_at=now,
                      warm=warm if stage == "load" else None)
            for stage, (w, s) in measured.items() if w > 0 and s > 0]
    session.add_all(rows)
    session.commit()
    return len(rows)


def prior(session: Session, job_id: str) -> dict[str, float]:
    """{stage: seconds} of the job's estimate when its worker class had measured rates (`stages`), for the
    ETA from the first second (worker/progress.py); {} otherwise."""
    estimate = session.scalar(select(Job.estimate).where(Job.id == job_id)) or {}
    session.rollback()
    stages = estimate.get("stages") if isinstance(estimate, dict) else None
    return {s: float(t["seconds"]) for s, t in (stages or {}).items()
            if isinstance(t, dict) and isinstance(t.get("seconds"), (int, float))}
