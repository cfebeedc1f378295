"""The estimate from measured rates (nbl/sizing/rates.py): each stage's work over the rate its class
measured, unmeasured stages at the class's overall rate, a range 1.56x wide, worker-/GPU-hours and cost;
and the worker's Tracker keeps what it measured per stage (worker/progress.py)."""

from __future__ import annotations

import pytest

from nbl.sizing.rates import budget, measured_range, parse_prices, shape_key, stage_times
from worker.progress import StageCost, Tracker


def test_stage_times_use_each_stages_rate_and_the_overall_one_for_the_rest():
    weights = {"calibrate": 1000.0, "evaluate": 600.0, "select": 300.0, "publish": 0.0}
    times = stage_times(weights, {"calibrate": (2000.0, 4.0), "evaluate": (600.0, 6.0)})
    assert times["calibrate"] == {"seconds": 2.0, "measured": True}  # 500 token-layers/s
    assert times["evaluate"] == {"seconds": 6.0, "measured": True}  # 100/s
    assert times["select"] == {"seconds": round(300 / (2600 / 10), 1), "measured": False}  # the overall 260/s
    assert "publish" not in times  # no work
    assert stage_times(weights, {}) is None
    low, high = measured_range(times)
    assert high / low == pytest.approx(1.5625, rel=1e-2)


def test_budget_prices_and_shape_key():
    assert budget((3600.0, 7200.0), 8, 2.0) == {
        "worker_hours": [1.0, 2.0],
        "gpu_hours": [8.0, 16.0],
        "cost": [2.0, 4.0],
    }
    assert budget((3600.0, 3600.0), 0, None)["cost"] is None
    assert parse_prices("gpu-80g=4.10, cpu=0.2") == {"gpu-80g": 4.1, "cpu": 0.2} and parse_prices("") == {}
    for bad in ("gpu", "cpu=-1", "cpu=x", "=3"):
        with pytest.raises(ValueError, match="NAME=PRICE"):
            parse_prices(bad)
    shape = {
        "layers": 30,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "heads": 9,
        "kv_heads": 3,
        "vocab_size": 49152,
    }
    assert shape_key(shape) == "30x576x1536h9/3v49152" and shape_key(None) is None and shape_key({"layers": 1}) is None


def test_the_tracker_keeps_each_stages_work_and_time():
    now = [0.0]
    t = Tracker(
        {
            "calibrate": StageCost(100, "tokens", 1000.0),
            "evaluate": StageCost(4, "documents", 400.0),
            "publish": StageCost(1, "outputs", 0.0),
        },
        clock=lambda: now[0],
    )
    t.update("calibrate", 0.0)
    now[0] = 10.0
    t.update("calibrate", 1.0)
    t.update("evaluate", 0.0)
    now[0] = 14.0
    t.update("evaluate", 1.0)
    t.update("publish", 0.5)  # no work: nothing to rate
    assert t.close() == {"calibrate": (1000.0, 10.0), "evaluate": (400.0, 4.0)}
    quick = Tracker(
        {"score": StageCost(8, "layers", 800.0), "evaluate": StageCost(4, "documents", 400.0)}, clock=lambda: now[0]
    )
    quick.update("score", 0.0)  # scores made during calibration: the stage ends at once, and counts as such
    quick.update("evaluate", 0.0)
    assert quick.close() == {"score": (800.0, 0.01), "evaluate": (400.0, 0.01)}
