"""A job's estimate: its Recipe read as estimate Options, placed on the worker classes.

A job always saves its outputs, reloads each in a fresh process and evaluates (worker/pipeline.py), so every
phase counts.
The stored form (jobs.estimate, the API's answers) is `as_json`: the figures of the class the job
goes to, or of the largest class when none holds it.
"""

from __future__ import annotations

from service.core.settings import Settings
from nbl.recipe import Recipe
from nbl.score_fields import GREEDY_WIDTH

from nbl.sizing.classes import Placement, WorkerClass, parse_classes, place, queue_of
from nbl.sizing.model import Estimate, Options
from nbl.sizing.shapes import shape_of


def job_options(recipe: Recipe, host_cache_bytes: int | None, greedy_width: int = GREEDY_WIDTH, **overrides) -> Options:
    """A job's Recipe (nbl/recipe.py: the API's and the worker's one form of the request)."""
    cal, comp, ev = recipe.calibration, recipe.compression, recipe.evaluation
    return Options(
        k_auto=comp.max_ppl_increase is not None, greedy_width=greedy_width,
        selection_samples=recipe.selection.num_samples if recipe.selection is not None else None,
        num_samples=cal.num_samples, seq_len=cal.seq_len, mode=comp.mode, method=comp.method,
        criterion=comp.criterion, form=comp.form, ks=tuple(comp.ks) or (1,), host_cache_bytes=host_cache_bytes, outputs=True,  # k auto: one
        whole_model=True, perplexity=tuple(ev.perplexity), eval_max_tokens=ev.max_tokens, tasks=tuple(ev.tasks),
        eval_limit=ev.limit, refit=comp.refit, heal=comp.heal, **overrides)


def classes(settings: Settings) -> list[WorkerClass]:
    return parse_classes(settings.worker_classes)


def place_job(config: dict, recipe: Recipe, settings: Settings) -> Placement:
    """Raises ShapeError (a ValueError) when config.json lacks a number the estimate needs."""
    return place(shape_of(config), job_options(recipe, settings.host_cache_bytes, settings.greedy_width), classes(settings),
                 settings.task_time_limit_s)


def as_json(est: Estimate, worker_class: str | None) -> dict:
    return {
        "device_bytes": est.device_bytes,
        "host_bytes": est.host_bytes,
        "disk_bytes": est.disk_bytes,
        "disk": est.disk,
        "seconds": list(est.seconds),
        "worker_class": worker_class,
        "devices": est.devices,
        "dtype": est.dtype,
        "batch_size": est.batch_size,
        "phases": est.phases,
    }


def placement_json(p: Placement, settings: Settings) -> dict:
    return as_json(p.estimate, queue_of(settings.queue_name, p.cls) if p.cls is not None else None)
