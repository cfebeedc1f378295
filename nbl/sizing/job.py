"""A job's estimate in the words of its Recipe: the Options it asks of the estimate (model.py), and the form
the estimate is stored in (jobs.estimate, the API's answers, the worker's preflight).

A job always saves its outputs, reloads each in a fresh process and evaluates (worker/pipeline.py), so every
phase counts. Pure: the API places a job with it (service/estimates/jobs.py), the worker checks the job fits its
own devices (worker/preflight.py), `nbl estimate` prints it.
"""

from __future__ import annotations

from nbl.recipe import Recipe
from nbl.selection.score_fields import GREEDY_WIDTH

from .model import Estimate
from .options import Options


def job_options(recipe: Recipe, host_cache_bytes: int | None, greedy_width: int = GREEDY_WIDTH, **overrides) -> Options:
    """A job's Recipe (nbl/recipe.py: the API's and the worker's one form of the request)."""
    cal, comp, ev = recipe.calibration, recipe.compression, recipe.evaluation
    return Options(
        k_auto=comp.max_ppl_increase is not None,
        greedy_width=greedy_width,
        selection_samples=recipe.selection.num_samples if recipe.selection is not None else None,
        num_samples=cal.num_samples,
        seq_len=cal.seq_len,
        mode=comp.mode,
        method=comp.method,
        criterion=comp.criterion,
        form=comp.form,
        ks=tuple(comp.ks) or (1,),
        host_cache_bytes=host_cache_bytes,
        outputs=True,  # k auto: one
        whole_model=True,
        perplexity=tuple(ev.perplexity),
        eval_max_tokens=ev.max_tokens,
        tasks=tuple(ev.tasks),
        eval_limit=ev.limit,
        refit=comp.refit,
        heal=comp.heal,
        quantize=tuple(recipe.publishing.quantize) if recipe.publishing is not None else (),
        save_dtype=recipe.publishing.dtype if recipe.publishing is not None else "auto",
        quantized_eval=not ev.empty(),
        **overrides,
    )


def as_json(est: Estimate, worker_class: str | None) -> dict:
    """The stored form: the figures of the class the job goes to (worker_class; None on the worker itself), or
    of the largest class when none holds it."""
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
