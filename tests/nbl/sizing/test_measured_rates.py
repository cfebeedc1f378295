"""The estimate from measured rates (nbl/sizing/rates.py): each stage's work over the rate its class
measured on work of the same kind, unmeasured stages at the class's overall rate, a range from the spread
of the measurements, worker-/GPU-hours and cost;
and the worker's Tracker keeps what it measured per stage (worker/progress.py)."""

from __future__ import annotations

import pytest

from nbl.sizing.rates import (
    FLOOR,
    MAX_WIDTH,
    UNMEASURED,
    budget,
    measured_range,
    parse_prices,
    shape_key,
    stage_times,
)
from worker.progress import StageCost, Tracker


def test_stage_times_use_each_stages_rate_and_the_overall_one_for_the_rest():
    weights = {"calibrate": 1000.0, "evaluate": 600.0, "select": 300.0, "publish": 0.0}
    times = stage_times(weights, {("calibrate", ""): [(2000.0, 4.0)], ("evaluate", ""): [(600.0, 6.0)]})
    assert times["calibrate"] == {"seconds": 2.0, "low": 2.0, "high": 2.0, "measured": True}  # 500 token-layers/s
    assert times["evaluate"] == {"seconds": 6.0, "low": 6.0, "high": 6.0, "measured": True}  # 100/s
    select = round(300 / (2600 / 10), 1)  # the overall 260/s, within UNMEASURED either way
    assert times["select"]["seconds"] == select and times["select"]["measured"] is False
    assert times["select"]["high"] / times["select"]["low"] == pytest.approx(UNMEASURED**2, rel=0.05)
    assert "publish" not in times  # no work
    assert stage_times(weights, {}) is None
    low, high = measured_range({s: times[s] for s in ("calibrate", "evaluate")})
    assert high / low == pytest.approx(FLOOR**2, rel=1e-2)  # one job each: no spread but the floor


def test_a_stage_is_priced_from_its_own_kind_only():
    """A cache-hit calibration's seconds never price a fresh one, nor the reverse."""
    measured = {("calibrate", "fresh"): [(1000.0, 200.0)], ("calibrate", "cached"): [(64.0, 4.0)]}
    fresh = stage_times({"calibrate": 1000.0}, measured, {"calibrate": "fresh"})["calibrate"]
    cached = stage_times({"calibrate": 64.0}, measured, {"calibrate": "cached"})["calibrate"]
    assert fresh["seconds"] == 200.0 and cached["seconds"] == 4.0
    unseen = stage_times({"export": 500.0}, measured, {"export": "gguf:Q4_K_M"})["export"]
    assert unseen["measured"] is False  # no row of that kind: the overall rate, not another kind's


def test_the_range_is_the_spread_of_the_measurements():
    """Three jobs whose calibration ran 100, 110 and 120 s for the same work: the range spans their rates
    (widened by FLOOR); a class whose rates scatter more is held to MAX_WIDTH around the central figure."""
    rows = {("calibrate", "fresh"): [(1000.0, 100.0), (1000.0, 110.0), (1000.0, 120.0)]}
    times = stage_times({"calibrate": 2000.0}, rows, {"calibrate": "fresh"})
    assert times["calibrate"]["low"] == 200.0 and times["calibrate"]["high"] == 240.0
    low, high = measured_range(times)
    assert low == pytest.approx(200 / FLOOR, abs=0.1) and high == pytest.approx(240 * FLOOR, abs=0.1)
    tight = stage_times({"calibrate": 2000.0}, {("calibrate", "fresh"): [(1000.0, 110.0)] * 3}, {"calibrate": "fresh"})
    assert measured_range(tight)[1] / measured_range(tight)[0] < high / low  # less spread, a narrower range
    wild = stage_times({"calibrate": 1000.0}, {("calibrate", ""): [(1000.0, 50.0), (1000.0, 400.0)]})
    low, high = measured_range(wild)
    assert high / low <= MAX_WIDTH + 1e-6 and low <= wild["calibrate"]["seconds"] <= high


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


def test_the_first_job_of_a_kind_keeps_its_margin():
    """A stage of a kind the class never ran is priced within UNMEASURED either way, and the job's range keeps
    that margin (the 2x cap is for jobs whose every stage was measured on its kind)."""
    rows = {("calibrate", "fresh"): [(1000.0, 10.0)]}
    times = stage_times({"calibrate": 1000.0, "score": 5000.0}, rows, {"calibrate": "fresh", "score": "cached"})
    assert times["score"]["measured"] is False
    low, high = measured_range(times)
    assert high / low > MAX_WIDTH and low <= times["score"]["seconds"] + 10.0 <= high
