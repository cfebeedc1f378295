"""worker/progress.py on a fake clock: the job's fraction weighted by the stages' costs and never going
back, the stage's own fraction, and an ETA from this job's measured rates, None before the first."""

from __future__ import annotations

import pytest

from nbl.recipe import Calibration, Compression, Evaluation, Recipe
from worker.progress import STAGES, StageCost, Tracker, plan


def recipe(criterion="cca", **evaluation) -> Recipe:
    return Recipe(
        model="local:m",
        compression=Compression(ks=(2, 4), criterion=criterion),
        calibration=Calibration(num_samples=32, seq_len=512),
        evaluation=Evaluation(**evaluation),
    )


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_costs_follow_the_recipe():
    cca, loss = plan(recipe(), layers=30), plan(recipe("loss"), layers=30)
    assert cca["calibrate"] == StageCost(32 * 512, "tokens", 32 * 512 * 30 + 30 * cca["score"].weight / 30)
    assert loss["score"].weight > 10 * cca["score"].weight  # the probe runs ~L²/2 layer passes
    ev = plan(recipe(perplexity=("wikitext2",), max_tokens=4096), 30)["evaluate"]
    assert (ev.units, ev.unit) == (3 * 2, "documents")  # base + two outputs, two windows each
    assert ev.weight == pytest.approx(3 * 4096 * 30 * 0.65)
    assert plan(recipe(), 30)["evaluate"].weight == 0  # nothing to evaluate: no share of the job
    twice = plan(recipe(perplexity=("wikitext2",), max_tokens=8192), 30)["evaluate"].weight
    assert twice == 2 * plan(recipe(perplexity=("wikitext2",), max_tokens=4096), 30)["evaluate"].weight


def test_progress_is_monotone_across_stages_and_weighted_by_cost():
    costs = plan(recipe(perplexity=("wikitext2",), max_tokens=4096), layers=30)
    total = sum(c.weight for c in costs.values())
    clock = Clock()
    tr = Tracker(costs, clock)
    seen = []
    for stage in STAGES:
        for f in (0.0, 0.3, 0.3, 0.7, 1.0):
            clock.t += 2
            fig = tr.update(stage, f)
            assert fig.stage_progress == f
            seen.append(fig.progress)
    assert seen == sorted(seen) and seen[-1] == pytest.approx(1.0)
    # halfway through calibration: load's share, then half of calibration's
    fig = Tracker(costs, clock).update("calibrate", 0.5)
    assert fig.progress == pytest.approx((costs["load"].weight + costs["calibrate"].weight / 2) / total)


def test_progress_never_goes_back():
    clock = Clock()
    tr = Tracker(plan(recipe(), 30), clock)
    high = tr.update("compress", 0.5).progress
    assert tr.update("compress", 0.2).stage_progress == 0.5  # within a stage
    assert tr.update("calibrate", 0.1).progress == high  # a stage reported late, or again
    tr.replan(plan(recipe(), 4))  # the layer count, once known, changes the weights but not the past
    assert tr.update("compress", 0.5).progress >= high


def test_eta_is_none_before_the_first_measurement_then_from_the_measured_rate():
    costs = {
        "load": StageCost(1, "models", 0.0),
        "calibrate": StageCost(1000, "tokens", 1000.0),
        "score": StageCost(10, "layers", 500.0),
        "evaluate": StageCost(20, "documents", 1500.0),
    }
    clock = Clock()
    tr = Tracker(costs, clock)
    assert tr.update("load", 0.0).eta_seconds is None
    clock.t += 5
    assert tr.update("calibrate", 0.0).eta_seconds is None  # calibration started, nothing measured
    clock.t += 0.5
    assert tr.update("calibrate", 0.01).eta_seconds is None  # under a second: not yet a measurement
    clock.t += 9.5
    fig = tr.update("calibrate", 0.25)  # 250 token-layers in 10 s: 25 per second, 25 tokens/s
    assert fig.rate == pytest.approx(25.0) and fig.unit == "tokens"
    assert fig.eta_seconds == pytest.approx(30 + (500 + 1500) / 25)
    assert fig.data()["rate"] == {"value": 25.0, "unit": "tokens/s"}
    clock.t += 30
    tr.update("calibrate", 1.0)
    fig = tr.update("score", 0.0)  # calibration done in 40 s; scoring not measured yet: at 25 per second
    assert fig.eta_seconds == pytest.approx((500 + 1500) / 25) and fig.rate is None
    clock.t += 2
    fig = tr.update("score", 0.5)  # its own pace: 5 layers in 2 s, so 2 s left here
    assert fig.rate == pytest.approx(2.5) and fig.unit == "layers"
    per_s = (1000 + 250) / 42
    assert fig.eta_seconds == pytest.approx(2 + 1500 / per_s, abs=0.1)


def test_a_stage_done_at_once_measures_nothing():
    costs = {"calibrate": StageCost(1000, "tokens", 1000.0), "score": StageCost(10, "layers", 500.0)}
    clock = Clock()
    tr = Tracker(costs, clock)
    tr.update("calibrate", 1.0)  # a statistics cache hit
    clock.t += 0.01
    assert tr.update("score", 0.0).eta_seconds is None  # no rate from a cache hit
    clock.t += 3
    assert tr.update("score", 0.3).eta_seconds == pytest.approx(7.0)


def test_the_layer_count_comes_from_the_config_before_the_weights_load(tmp_path):
    from testkit.models import save_tiny_checkpoint

    from worker.pipeline import layer_count

    assert layer_count(save_tiny_checkpoint(tmp_path / "m", layers=3)) == 3
    assert layer_count(tmp_path / "absent") is None  # the plan then assumes progress.LAYERS


def test_the_first_stage_runs_from_the_jobs_start():
    """The worker's preparation before its first report counts in the first stage: the stages' times add up
    to the job's, which is what the estimate's range is held against (issue 38)."""
    now = [0.0]
    t = Tracker(
        {"load": StageCost(1, "models", 100.0), "calibrate": StageCost(10, "tokens", 1000.0)}, clock=lambda: now[0]
    )
    now[0] = 5.0
    t.update("load", 0.0)  # 5 s of imports and preparation before the load said anything
    now[0] = 6.0
    t.update("calibrate", 0.0)
    now[0] = 16.0
    assert t.close() == {"load": (100.0, 6.0), "calibrate": (1000.0, 10.0)}
