"""The estimate from measured rates: a job's stored estimate (and POST /v1/estimates') gains each stage's
time from what its worker class measured on the same model shape and the same kind of work (stage_rates,
written by the worker at the end of every job that succeeded: worker/rates.py), a range from the spread of
those measurements (nbl/sizing/rates.measured_range),
worker-hours, GPU-hours and the cost at NBL_CLASS_PRICES. A class that has run no job on the shape keeps
the FLOP model's range (nbl/sizing/model.py), with worker-hours, GPU-hours and cost from it.

What the class already holds (reuse.py) changes the plan: statistics in its cache make calibration a read
of the cache (priced from cache-hit calibrations only, `statistics_cached`), a base evaluation in its cache leaves the
outputs' evaluation alone (stage_plan.plan's base_cached: `base_evaluation_cached`, stages.evaluate
.base_cached); a model the class has not loaded yet adds its fetch (downloading or, for a local model,
hashing its weights the first time: worker/fetch.py) at the bytes per second the class measured on its
fetches (stages.fetch, `warm_load` false)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from nbl.recipe import Recipe
from nbl.sizing.classes import parse_classes, queue_of
from nbl.sizing.kinds import stage_kinds
from nbl.sizing.rates import FETCH, budget, measured_range, parse_prices, shape_key, stage_times
from nbl.sizing.stage_plan import plan
from service.core.settings import Settings
from service.core.stage_rate import StageRate

from .reuse import reuse, statistics_held

RECENT = 3  # a stage's rate: its last this many measurements of its kind on the class and shape


def measured(session: Session, worker_class: str, shape: str) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """{(stage, kind): [(token-layers, seconds) of each of the class's last RECENT measurements]} (`fetch`:
    bytes, seconds). Numbered per stage and kind in the query, so a kind run rarely keeps its rows."""
    n = func.row_number().over(partition_by=(StageRate.stage, StageRate.kind), order_by=StageRate.id.desc()).label("n")
    recent = (
        select(StageRate.stage, StageRate.kind, StageRate.weight, StageRate.seconds, n)
        .where(StageRate.worker_class == worker_class, StageRate.shape == shape)
        .subquery()
    )
    out: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for stage, kind, weight, seconds in session.execute(
        select(recent.c.stage, recent.c.kind, recent.c.weight, recent.c.seconds).where(recent.c.n <= RECENT)
    ):
        out.setdefault((stage, kind or ""), []).append((weight, seconds))
    return out


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
    stats = statistics_held(session, queue, recipe)
    kinds = stage_kinds(recipe, stats)
    costs = plan(recipe, shape.get("layers"), base_cached=cached, stats_cached=stats)
    weights = {s: c.weight for s, c in costs.items()}
    rates = measured(session, queue, key) if key else {}
    fetch = rates.pop((FETCH, ""), None)
    times = stage_times(weights, rates, kinds) if key else None
    out = dict(estimate, base_evaluation_cached=cached, warm_load=warm, statistics_cached=stats)
    if times is not None:
        for stage, kind in kinds.items():
            if stage in times:
                times[stage]["kind"] = kind
        if "load" in times:
            times["load"]["warm"] = warm
        download = (estimate.get("disk") or {}).get("download") or 0
        if not warm and fetch and download > 0:  # a load that reads the weights first: bytes/(bytes/s)
            per = [s / w for w, s in fetch if w > 0]
            mid = download * sum(s for _, s in fetch) / sum(w for w, _ in fetch)
            span = {"low": round(download * min(per), 1), "high": round(download * max(per), 1)} if per else {}
            times = {FETCH: {"seconds": round(mid, 1), **span, "measured": True}, **times}
        if "evaluate" in times:
            times["evaluate"]["base_cached"] = cached
        out.update(stages=times, seconds=list(measured_range(times)), basis="measured")
    else:
        out.update(stages=None, basis="model")
    out.update(budget(tuple(out["seconds"]), devices.get(queue, 0), prices.get(queue)))
    return out
