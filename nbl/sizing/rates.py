"""A job's time from what its worker class measured: each stage's planned work (token-layers,
nbl/sizing/stage_plan.py) over the rate, in token-layers per second, the class measured on that stage of
jobs on the same model shape. A stage the class has not measured (a selection stage no earlier job had)
runs at the class's rate over every stage it measured, as the worker's ETA assumes (worker/progress.py).

Rates are kept per stage and per kind of work (nbl/sizing/kinds.py). Once a class has run one job on a
shape, the range is each stage's work at the fastest and the slowest of its recent rates (the spread of the
measurements), widened by FLOOR and, once every stage is measured on its kind, at most MAX_WIDTH wide, not the FLOP model's (nbl/sizing/model.py),
which spans CPUs and GPUs of every speed. A stage of a kind the class has not run yet is priced at the
class's overall rate, within a factor UNMEASURED. GPU-hours are worker-hours times the class's GPUs; the cost
is worker-hours times its price (NBL_CLASS_PRICES). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .stage_plan import MIN_MEASURE_S

FETCH = "fetch"  # a load's first read of the weights (worker/fetch.py): its work is the checkpoint's bytes
FLOOR = 1.25  # each end of a measured range moves out by this at least: one job's rate is no spread, and the
# same work on the same class ran within this factor (bench/estimate_accuracy.py)
MAX_WIDTH = 2.0  # high / low at most: a wider range plans nothing (issue 38's target)
UNMEASURED = 2.0  # a stage of a kind the class has not run: its overall rate x [1/2, 2]


def shape_key(shape: Mapping | None) -> str | None:
    """The shape a rate holds for: layers, widths, heads and vocabulary (nbl/model/shape.py's summary)."""
    if not shape:
        return None
    try:
        return (
            f"{shape['layers']}x{shape['hidden_size']}x{shape['intermediate_size']}"
            f"h{shape['heads']}/{shape['kv_heads']}v{shape['vocab_size']}"
        )
    except KeyError:
        return None


def stage_times(
    weights: Mapping[str, float],
    measured: Mapping[tuple[str, str], Sequence[tuple[float, float]]],
    kinds: Mapping[str, str] | None = None,
) -> dict | None:
    """{stage: {"seconds", "low", "high", "measured"}} for the stages with work; None when nothing was measured.
    `measured`: {(stage, kind): [(token-layers, seconds) of each recent job]} of the class on this shape;
    `kinds`: the kind of work each stage will do (nbl/sizing/kinds.py; absent: kind ''). A stage is priced
    only from rows of its own kind: a cache-hit calibration never stands for a fresh one."""
    kinds = kinds or {}
    real = [(w, s) for rows in measured.values() for w, s in rows if w > 0 and s >= MIN_MEASURE_S]
    if not real:
        return None
    overall = sum(s for _, s in real) / sum(w for w, _ in real)  # s per token-layer over every measured stage
    out = {}
    for stage, weight in weights.items():
        if weight <= 0:
            continue
        rows = [(w, s) for w, s in measured.get((stage, kinds.get(stage, "")), ()) if w > 0 and s > 0]
        if rows:
            per = [s / w for w, s in rows]  # each job's seconds per token-layer
            mid, low, high = sum(s for _, s in rows) / sum(w for w, _ in rows), min(per), max(per)
        else:  # not measured on this kind yet: the class's overall rate, with a wide margin
            mid, low, high = overall, overall / UNMEASURED, overall * UNMEASURED
        out[stage] = {
            "seconds": round(weight * mid, 1),
            "low": round(weight * low, 1),
            "high": round(weight * high, 1),
            "measured": bool(rows),
        }
    return out


def measured_range(times: Mapping[str, Mapping]) -> tuple[float, float]:
    """The job's range: each stage's fastest and slowest recent rate of its kind, summed, each end moved out
    by FLOOR (one measurement is no spread). Once every stage was measured on its kind, at most MAX_WIDTH
    wide around the stages' sum; the first job of a kind keeps its unmeasured stage's margin."""
    low = sum(t.get("low", t["seconds"]) for t in times.values()) / FLOOR
    high = sum(t.get("high", t["seconds"]) for t in times.values()) * FLOOR
    mid = sum(t["seconds"] for t in times.values())
    if not all(t.get("measured", True) for t in times.values()):
        return round(low, 1), round(high, 1)
    if high > low * MAX_WIDTH:  # a class whose rates scatter this much: the band that holds the central figure
        low, high = max(low, mid / MAX_WIDTH**0.5), min(high, mid * MAX_WIDTH**0.5)
    low = round(low, 1)
    return low, min(round(high, 1), math.floor(low * MAX_WIDTH * 10) / 10)  # still within MAX_WIDTH, rounded


def parse_prices(text: str) -> dict[str, float]:
    """NBL_CLASS_PRICES, `NAME=PRICE` per worker-hour, comma-separated (`gpu-80g=4.10,cpu=0.20`)."""
    prices = {}
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        name, sep, price = part.partition("=")
        try:
            value = float(price)
        except ValueError:
            value = -1.0
        if not sep or not name.strip() or not value >= 0:
            raise ValueError(f"class price {part!r} is not NAME=PRICE per worker-hour (e.g. gpu-80g=4.10)")
        prices[name.strip()] = value
    return prices


def budget(seconds: tuple[float, float], devices: int, price: float | None) -> dict:
    """{"worker_hours", "gpu_hours", "cost"} ranges of a (low, high) time on a class with `devices` GPUs
    and `price` per worker-hour (None: no price set; the cost is null)."""
    hours = [round(s / 3600, 4) for s in seconds]
    return {
        "worker_hours": hours,
        "gpu_hours": [round(h * devices, 4) for h in hours],
        "cost": [round(h * price, 4) for h in hours] if price is not None else None,
    }
