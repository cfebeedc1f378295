"""The worker's notes of what its class now holds for later jobs (class_caches, migration 0012): the model's
files after a load, a calibration's statistics once they are in the statistics cache, and the base model's evaluation once it is in the evaluation cache, under the
request-level keys of nbl/sizing/reuse.py, for the job's worker class (the queue its estimate chose). The
API's next estimate reads them (service/estimates/reuse.py). A job without an estimate's class notes nothing."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from nbl.recipe import Recipe
from nbl.sizing.reuse import BASE_EVALUATION, MODEL, STATISTICS, base_evaluation_key, model_key, statistics_key
from service.core.class_cache import ClassCache
from service.core.models import Job, utcnow


def keys(recipe: Recipe, statistics: bool = True) -> dict[str, str]:
    """{kind: key} of what a job on `recipe` fills; `statistics`: the worker keeps a statistics cache."""
    out = {MODEL: model_key(recipe), BASE_EVALUATION: base_evaluation_key(recipe)}
    if statistics:
        out[STATISTICS] = statistics_key(recipe)
    return out


def note(session: Session, job_id: str, kind: str, key: str) -> bool:
    """Whether a note was added (False: the class had it already, or the job names no class). Commits."""
    estimate = session.scalar(select(Job.estimate).where(Job.id == job_id)) or {}
    queue = estimate.get("worker_class") if isinstance(estimate, dict) else None
    if (
        not queue
        or session.scalar(
            select(ClassCache.id).where(
                ClassCache.worker_class == queue, ClassCache.kind == kind, ClassCache.key == key
            )
        )
        is not None
    ):
        session.rollback()
        return False
    session.add(ClassCache(worker_class=queue, kind=kind, key=key, job_id=job_id, created_at=utcnow()))
    try:
        session.commit()
    except IntegrityError:  # another worker of the class noted it at the same moment
        session.rollback()
        return False
    return True
