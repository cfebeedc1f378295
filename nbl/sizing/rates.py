"""A job's time from what its worker class measured: each stage's planned work (token-layers,
nbl/sizing/stage_plan.py) over the rate, in token-layers per second, the class measured on that stage of
jobs on the same model shape. A stage the class has not measured (a selection stage no earlier job had)
runs at the class's rate over every stage it measured, as the worker's ETA assumes (worker/progress.py).

Once a class has run one job on a shape the range is the measured time x [1/SPREAD, SPREAD] (1.56x wide),
not the FLOP model's (nbl/sizing/model.py), which spans CPUs and GPUs of every speed. GPU-hours are
worker-hours times the class's GPUs; the cost is worker-hours times its price (NBL_CLASS_PRICES). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

FETCH = "fetch"  # a load's first read of the weights (worker/fetch.py): its work is the checkpoint's bytes
SPREAD = 1.25  # a stage of the same work on the same class ran within this factor (bench/estimate_accuracy.py)


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


def stage_times(weights: Mapping[str, float], measured: Mapping[str, tuple[float, float]]) -> dict | None:
    """{stage: {"seconds", "measured"}} for the stages with work; None when nothing was measured.
    `measured`: {stage: (token-layers, seconds)} summed over the class's recent jobs on this shape."""
    done = [(w, s) for w, s in measured.values() if w > 0 and s > 0]
    if not done:
        return None
    overall = sum(w for w, _ in done) / sum(s for _, s in done)  # token-layers/s over every measured stage
    out = {}
    for stage, weight in weights.items():
        if weight <= 0:
            continue
        w, s = measured.get(stage, (0.0, 0.0))
        rate = w / s if w > 0 and s > 0 else overall
        out[stage] = {"seconds": round(weight / rate, 1), "measured": w > 0 and s > 0}
    return out


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


def measured_range(times: Mapping[str, Mapping]) -> tuple[float, float]:
    total = sum(t["seconds"] for t in times.values())
    return round(total / SPREAD, 1), round(total * SPREAD, 1)
