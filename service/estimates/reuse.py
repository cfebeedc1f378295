"""Whether a job's worker class already holds its model (a warm load), its calibration's statistics (a
calibration that reads the cache) and its base model's evaluation (the outputs' evaluation alone), from the notes its workers left (class_caches, worker/host/caches.py) under
the request-level keys of nbl/sizing/reuse.py. A `local:NAME` model too: its first load hashes it."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.recipe import Recipe
from nbl.sizing.reuse import BASE_EVALUATION, MODEL, STATISTICS, base_evaluation_key, model_key, statistics_key
from service.core.class_cache import ClassCache


def holds(session: Session, worker_class: str, kind: str, key: str) -> bool:
    return (
        session.scalar(
            select(ClassCache.id)
            .where(ClassCache.worker_class == worker_class, ClassCache.kind == kind, ClassCache.key == key)
            .limit(1)
        )
        is not None
    )


def reuse(session: Session, worker_class: str, recipe: Recipe) -> tuple[bool, bool]:
    """(warm load, base evaluation cached) for `recipe` on `worker_class`; the second only when the job
    evaluates anything."""
    warm = holds(session, worker_class, MODEL, model_key(recipe))
    cached = not recipe.evaluation.empty() and holds(
        session, worker_class, BASE_EVALUATION, base_evaluation_key(recipe)
    )
    return warm, cached


def statistics_held(session: Session, worker_class: str, recipe: Recipe) -> bool:
    """Whether the class's statistics cache holds this calibration (the calibration stage will read it)."""
    return holds(session, worker_class, STATISTICS, statistics_key(recipe))
