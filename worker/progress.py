"""A job's progress as one fraction and an ETA, from the fractions its stages report.

The pipeline reports (stage, fraction of that stage). `plan` gives each stage its expected cost from the
recipe, in one unit: one token through one decoder layer ("token-layers"). Calibration costs its tokens
x layers; the other stages are priced in the same unit by constants measured on SmolLM2-135M on a CPU
(bench/progress_smollm2.py). The job's fraction is the cost done over the whole cost, never going back.

The ETA comes from this job's own rates only: the current stage's remainder at its measured rate
(tokens/s in calibration, layers/s in scoring, documents/s in evaluation), the stages after it at the
rate, in token-layers per second, that the measured stages ran at. Before any stage has run long enough
to be measured it is None: a guess from nothing would be a number nobody can trust.

Pure and torch-free: `Tracker` takes a clock, so the tests drive it with a fake one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from nbl.sizing.model import EVAL_TOKENS_PER_CORPUS, TASK_DOCS, TASK_TOKENS_PER_DOC
from nbl.recipe import Recipe
from worker.engine.auto_k import MEASURED, expected_sets

STAGES = ("load", "calibrate", "score", "select", "compress", "check", "evaluate", "publish")  # select: measured only
LAYERS = 32  # before the model's config is read (only the loss probe's cost is not linear in layers)
# Token-layers per layer of each stage's one unit of work, measured on SmolLM2-135M (CPU, 2 cores under
# load, bench/results/progress_smollm2.json): scoring a layer from its sums ~0.9 s, saving an output ~4 s,
# reloading it in a fresh process ~20 s, loading the model ~1 s, where calibration ran ~2000 token-layers/s.
# Calibration scores each layer as its sums complete, so it carries the scoring too; the score stage costs
# as much again when the sums come from the statistics cache (else it is done at once).
SCORE_PER_LAYER = 2048
SAVE_PER_LAYER = 256
CHECK_PER_LAYER = 1024
LOAD_PER_LAYER = 128
PUBLISH_PER_LAYER = 64
EVAL_PER_TOKEN_LAYER = 0.65  # a forward alone: evaluation ran 2600 token-layers/s where calibration ran 1700
HEAD_LAYERS = 11  # an LM-head pass in layer passes (SmolLM2: 49k vocabulary, d = 576; the probe took 155 s
# for its 495 layer passes, then 110 s for its 31 head passes)
WINDOW = 2048  # tokens of a perplexity window (eval/perplexity.default_window on most models)
MIN_MEASURE_S = 1.0  # a stage done faster (a cache hit) measures nothing


@dataclass(frozen=True)
class StageCost:
    units: float  # the stage's work in its own unit: tokens, layers, documents, outputs
    unit: str
    weight: float  # expected cost in token-layers


def plan(recipe: Recipe, layers: int | None = None) -> dict[str, StageCost]:
    """Each stage's expected cost for `recipe` on a model of `layers` decoder layers (None: not known yet)."""
    L = layers or LAYERS
    cal, ev = recipe.calibration, recipe.evaluation
    tokens = cal.num_samples * cal.seq_len
    outputs = len(recipe.ks) or 1  # k auto: one output
    score = StageCost(L, "layers", L * SCORE_PER_LAYER)
    if recipe.compression.criterion == "loss":  # layer l runs on l + 2 streams of the held-out tenth, then
        held = max(1, cal.num_samples // 10) * cal.seq_len  # the LM head on each of the L + 1 streams
        score = StageCost(L, "layers", L * SCORE_PER_LAYER + held * (L * (L + 3) / 2 + (L + 1) * HEAD_LAYERS))
    comp, k_auto = recipe.compression, recipe.compression.max_ppl_increase is not None
    sets = expected_sets(comp.criterion, recipe.ks, L, k_auto=k_auto) if comp.criterion in MEASURED or k_auto else 0
    sel_tokens = (recipe.selection.num_samples if recipe.selection else max(1, cal.num_samples // 10)) * cal.seq_len
    ppl_tokens = ev.max_tokens or EVAL_TOKENS_PER_CORPUS
    task_docs = (len(ev.tasks) + len(ev.task_files)) * (ev.limit or TASK_DOCS)
    docs = len(ev.perplexity) * -(-ppl_tokens // WINDOW) + task_docs + (4 if ev.speed else 0)
    eval_tokens = len(ev.perplexity) * ppl_tokens + task_docs * TASK_TOKENS_PER_DOC + (8192 if ev.speed else 0)
    models = 1 + outputs
    return {
        "load": StageCost(1, "models", L * LOAD_PER_LAYER),
        "calibrate": StageCost(tokens, "tokens", tokens * L + L * SCORE_PER_LAYER),
        "score": score,
        # a set runs from its first replaced layer on (L/2 on average), then the LM head (set_loss.py)
        "select": StageCost(sets, "layer sets", sets * sel_tokens * (L / 2 + HEAD_LAYERS)),
        "compress": StageCost(outputs, "outputs", outputs * L * SAVE_PER_LAYER),
        "check": StageCost(outputs, "outputs", outputs * L * CHECK_PER_LAYER),
        "evaluate": StageCost(models * docs, "documents",
                              0 if ev.empty() else models * eval_tokens * L * EVAL_PER_TOKEN_LAYER),
        "publish": StageCost(outputs, "outputs", outputs * L * PUBLISH_PER_LAYER),
    }


@dataclass(frozen=True)
class Figures:
    progress: float  # the whole job's fraction
    stage_progress: float  # the current stage's fraction
    eta_seconds: float | None  # None before the first measurement
    rate: float | None = None  # the current stage's units per second, once measured
    unit: str | None = None

    def data(self) -> dict:
        """What a progress event carries besides its stage and progress, for a job's timeline."""
        out: dict = {"stage_progress": round(self.stage_progress, 4), "eta_seconds": self.eta_seconds}
        if self.rate is not None:
            out["rate"] = {"value": round(self.rate, 3), "unit": f"{self.unit}/s"}
        return out


class Tracker:
    """Turns (stage, fraction) reports into the job's Figures; one per attempt of a job."""

    def __init__(self, costs: dict[str, StageCost], clock: Callable[[], float] = time.monotonic):
        self.costs, self.clock = dict(costs), clock
        self.stage: str | None = None
        self.started = 0.0  # when the current stage began
        self.fraction = 0.0  # its highest reported fraction
        self.best = 0.0  # the job's highest fraction so far
        self.done_weight = 0.0  # token-layers done in measured, finished stages
        self.done_s = 0.0  # and the seconds they took

    def replan(self, costs: dict[str, StageCost]) -> None:
        """New costs (the model's layer count is known): the fraction still never goes back."""
        self.costs = dict(costs)

    def update(self, stage: str, fraction: float) -> Figures:
        now = self.clock()
        fraction = min(max(float(fraction), 0.0), 1.0)
        if stage != self.stage:
            self._finish(now)
            self.stage, self.started, self.fraction = stage, now, fraction
        self.fraction = max(self.fraction, fraction)
        self.best = max(self.best, self._overall(stage, self.fraction))
        elapsed = now - self.started
        cost = self.costs.get(stage)
        measured = elapsed >= MIN_MEASURE_S and self.fraction > 0 and cost is not None and cost.weight > 0
        rate = self.fraction * cost.units / elapsed if measured else None
        return Figures(self.best, self.fraction, self._eta(stage, elapsed, measured), rate,
                       cost.unit if measured else None)

    def _finish(self, now: float) -> None:
        """The stage that ends adds to the measured rate when it ran long enough to be measured."""
        cost = self.costs.get(self.stage or "")
        if cost is not None and now - self.started >= MIN_MEASURE_S and self.fraction > 0:
            self.done_weight += cost.weight * self.fraction
            self.done_s += now - self.started

    def _overall(self, stage: str, fraction: float) -> float:
        total = sum(c.weight for c in self.costs.values())
        if stage not in STAGES or total <= 0:
            return self.best
        before = sum(self.costs[s].weight for s in STAGES[: STAGES.index(stage)] if s in self.costs)
        return min(1.0, (before + self.costs[stage].weight * fraction) / total)

    def _eta(self, stage: str, elapsed: float, measured: bool) -> float | None:
        cost = self.costs.get(stage)
        weight = self.done_weight + (cost.weight * self.fraction if measured else 0.0)
        seconds = self.done_s + (elapsed if measured else 0.0)
        if weight <= 0 or seconds <= 0:
            return None
        per_s = weight / seconds  # token-layers per second over what this job has measured
        if measured:  # this stage at its own pace
            here = elapsed * (1 - self.fraction) / self.fraction
        else:
            here = (cost.weight if cost else 0.0) * (1 - self.fraction) / per_s
        later = STAGES[STAGES.index(stage) + 1:] if stage in STAGES else ()
        return round(here + sum(self.costs[s].weight for s in later if s in self.costs) / per_s, 1)
