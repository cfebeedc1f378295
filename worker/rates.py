"""After a job succeeds, what its worker measured per stage goes to stage_rates (migrations 0011, 0013): each
stage's planned token-layers, the kind of work it did and the seconds it took (worker/progress.py Tracker.measured), under the
job's worker class (the queue its estimate chose) and its model's shape key (nbl/sizing/rates.py). The
API's next estimate for that class and shape reads them (service/estimates/rates.py), and that job's
worker starts its ETA from the stage times it gave (`prior`). A job without an estimate (its Hub config
unread at submit) or without a shape in it records nothing."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.sizing.rates import FETCH, shape_key
from service.core.models import Job, utcnow
from service.core.stage_rate import StageRate

from .fetch import Fetched


def record(
    session: Session,
    job_id: str,
    measured: dict[str, tuple[float, float]],
    fetched: Fetched | None = None,
    kinds: dict[str, str] | None = None,
) -> int:
    """Rows written (0 when the job's estimate names no class or shape). Commits. `fetched`: a load that
    fetched the weights (worker/fetch.py) is recorded as its load without the fetch, and a `fetch` row of
    the estimate's checkpoint bytes (disk.download) and the fetch's seconds: the estimate prices a fetch
    per byte, and only for a model the class has not loaded. `kinds`: the kind of work each stage did
    (nbl/sizing/kinds.py, from what the job did: a calibration that read the cache is `cached`)."""
    estimate = session.scalar(select(Job.estimate).where(Job.id == job_id)) or {}
    key, queue = shape_key(estimate.get("shape")), estimate.get("worker_class")
    if not key or not queue:
        session.rollback()
        return 0
    now = utcnow()
    measured = dict(measured)
    if fetched is not None and not fetched.warm and "load" in measured:
        w, s = measured["load"]
        measured["load"] = (w, max(s - fetched.seconds, 0.01))
        measured[FETCH] = (float((estimate.get("disk") or {}).get("download") or 0), fetched.seconds)
    rows = [
        StageRate(
            job_id=job_id,
            worker_class=queue,
            shape=key,
            stage=stage,
            kind=(kinds or {}).get(stage, ""),
            weight=w,
            seconds=s,
            created_at=now,
        )
        for stage, (w, s) in measured.items()
        if w > 0 and s > 0
    ]
    session.add_all(rows)
    session.commit()
    return len(rows)


def prior(session: Session, job_id: str) -> dict[str, float]:
    """{stage: seconds} of the job's estimate when its worker class had measured rates (`stages`), for the
    ETA from the first second (worker/progress.py); {} otherwise."""
    estimate = session.scalar(select(Job.estimate).where(Job.id == job_id)) or {}
    session.rollback()
    stages = estimate.get("stages") if isinstance(estimate, dict) else None
    out = {
        s: float(t["seconds"])
        for s, t in (stages or {}).items()
        if isinstance(t, dict) and isinstance(t.get("seconds"), (int, float))
    }
    if FETCH in out:  # the fetch runs inside the load stage
        out["load"] = out.get("load", 0.0) + out.pop(FETCH)
    return out
