"""A job's estimate placed on the worker classes of this deployment (its Settings). The Options a Recipe asks
and the stored form of an estimate are nbl/sizing/job.py, which the worker's preflight shares.
"""

from __future__ import annotations

from nbl.recipe import Recipe
from nbl.sizing.classes import Placement, WorkerClass, parse_classes, place, queue_of
from nbl.sizing.job import as_json, job_options
from nbl.sizing.shapes import shape_of
from service.core.settings import Settings


def classes(settings: Settings) -> list[WorkerClass]:
    return parse_classes(settings.worker_classes)


def place_job(config: dict, recipe: Recipe, settings: Settings) -> Placement:
    """Raises ShapeError (a ValueError) when config.json lacks a number the estimate needs."""
    return place(
        shape_of(config),
        job_options(recipe, settings.host_cache_bytes, settings.greedy_width),
        classes(settings),
        settings.task_time_limit_s,
    )


def placement_json(p: Placement, settings: Settings) -> dict:
    return as_json(p.estimate, queue_of(settings.queue_name, p.cls) if p.cls is not None else None)
