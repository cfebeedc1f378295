"""A job's estimate: its stored spec read as estimate Options, placed on the worker classes.

A job always saves its outputs and loads the whole model (worker/pipeline.py), so both phases count.
The stored form (jobs.estimate, the API's answers) is `as_json`: the figures of the class the job
goes to, or of the largest class when none holds it.
"""

from __future__ import annotations

from service.core.settings import Settings

from .classes import Placement, WorkerClass, parse_classes, place, queue_of
from .model import Estimate, Options
from .shapes import shape_of


def job_options(spec: dict, host_cache_bytes: int | None, **overrides) -> Options:
    cal, comp, ev = spec.get("calibration") or {}, spec.get("compression") or {}, spec.get("evaluation") or {}
    k = comp.get("k", 4)
    return Options(
        num_samples=cal.get("num_samples", 256), seq_len=cal.get("seq_len", 2048),
        mode=comp.get("mode", "attn"), method=comp.get("method", "nbl"), criterion=comp.get("criterion", "cca"),
        ks=tuple([k] if isinstance(k, int) else k), dtype=spec.get("dtype") or "auto",
        host_cache_bytes=host_cache_bytes, outputs=True, whole_model=True,
        perplexity=tuple(ev.get("perplexity", ["wikitext2"])), eval_max_tokens=ev.get("max_tokens"),
        tasks=tuple(ev.get("tasks") or ()), eval_limit=ev.get("limit"), **overrides)


def classes(settings: Settings) -> list[WorkerClass]:
    return parse_classes(settings.worker_classes)


def place_job(config: dict, spec: dict, settings: Settings) -> Placement:
    """Raises ShapeError (a ValueError) when config.json lacks a number the estimate needs."""
    return place(shape_of(config), job_options(spec, settings.host_cache_bytes), classes(settings), settings.task_time_limit_s)


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
