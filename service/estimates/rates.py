"""The estimate from measured rates: a job's stored estimate (and POST /v1/estimates') gains each stage's
time from what its worker class measured on the same model shape (stage_rates, written by the worker at
the end of every job that succeeded: worker/rates.py), a range no wider than nbl/sizing/rates.SPREAD²,
worker-hours, GPU-hours and the cost at NBL_CLASS_PRICES. A class that has run no job on the shape keeps
the FLOP model's range (nbl/sizing/model.py), with worker-hours, GPU-hours and cost from it.

What the class already holds (reuse.py) changes the plan: a base evaluation in its cache leaves the
outputs' evaluation alone (stage_plan.plan's base_cached: `base_evaluation_cached`, stages.evaluate
.base_cached); a model the class has not loaded yet adds its fetch (downloading or, for a local model,
hashing its weights the first time: worker/fetch.py) at the bytes per second the class measured on its
fetches (stages.fetch, `warm_load` false)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.recipe import Recipe
from nbl.sizing.classes import parse_classes, queue_of
from nbl.sizing.rates import FETCH, budget, measured_range, parse_prices, shape_key, stage_times
from nbl.sizing.stage_plan import plan
from service.core.settings import Settings
from service.core.stage_rate import StageRate

from .reuse import reuse

RECENT = 3  # a stage's rate: its last this many measurements on the class and shape


def measured(session: Session, worker_class: str, shape: str) -> dict[str, tuple[float, float]]:
    """{stage: (token-layers, seconds)} summed over the class's last RECENT measurements of each stage
    (`fetch`: bytes, seconds)."""
    rows = session.execute(
        select(StageRate.stage, StageRate.weight, StageRate.seconds)
        .where(StageRate.worker_class == worker_class, StageRate.shape == shape)
        .order_by(StageRate.id.desc())
        .limit(RECENT * 16)
    ).all()
    out: dict[str, list[float]] = {}
    seen: dict[str, int] = {}
    for stage, weight, seconds in rows:
        if seen.get(stage, 0) >= RECENT:
            continue
        seen[stage] = seen.get(stage, 0) + 1
        w, s = out.setdefault(stage, [0.0, 0.0])
        out[stage] = [w + weight, s + seconds]
    return {stage: (w, s) for stage, (w, s) in out.items()}


def with_rates(session: Session, estimate: dict | None, recipe: Recipe, settings: Settings) -> dict | None:
    """`estimate` (an as_json dict with `shape` and `worker_class`) with stages, basis, and the budget."""
    if not estimate or not estimate.get("worker_class"):
        return estimate
    queue, shape = estimate["worker_class"], estimate.get("shape") or {}
    devices = {queue_of(settings.queue_name, c): c.devices for c in parse_classes(settings.worker_classes)}
    prices = {
        queue_of(settings.queue_name, c): parse_prices(settings.class_prices).get(c.name)
        for c in parse_classes(settings.worker_classes)
    }
    key = shape_key(shape)
    warm, cached = reuse(session, queue, recipe)
    weights = {s: c.weight for s, c in plan(recipe, shape.get("layers"), base_cached=cached).items()}
    rates = measured(session, queue, key) if key else {}
    fetch = rates.pop(FETCH, None)
    times = stage_times(weights, rates) if key else None
    out = dict(estimate, base_evaluation_cached=cached, warm_load=warm)
    if times is not None:
        if "load" in times:
            times["load"]["warm"] = warm
        download = (estimate.get("disk") or {}).get("download") or 0
        if not warm and fetch is not None and download > 0:  # a load that reads the weights first: bytes/(bytes/s)
            times = {FETCH: {"seconds": round(download * fetch[1] / fetch[0], 1), "measured": True}, **times}
        if "evaluate" in times:
            times["evaluate"]["base_cached"] = cached
        out.update(stages=times, seconds=list(measured_range(times)), basis="measured")
    else:
        out.update(stages=None, basis="model")
    out.update(budget(tuple(out["seconds"]), devices.get(queue, 0), prices.get(queue)))
    return out
