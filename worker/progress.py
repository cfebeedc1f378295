"""A job's progress as one fraction and an ETA, from the fractions its stages report.

The pipeline reports (stage, fraction of that stage). `plan` gives each stage its expected cost from the
recipe, in one unit: one token through one decoder layer ("token-layers"). Calibration costs its tokens
x layers; the other stages are priced in the same unit by constants measured on SmolLM2-135M on a CPU
(bench/progress_smollm2.py). The job's fraction is the cost done over the whole cost, never going back.

The ETA: the current stage's remainder at its measured rate (tokens/s in calibration, layers/s in
scoring, documents/s in evaluation), else at the time its worker class took for it (`prior`, from the
job's estimate: service/estimates/rates.py); the stages after it at their class's times, else at the
rate, in token-layers per second, that this job's measured stages ran at. With neither (a class that has
run no job on the shape, before any stage has run long enough to be measured) it is None: a guess from
nothing would be a number nobody can trust.

Pure and torch-free: `Tracker` takes a clock, so the tests drive it with a fake one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from nbl.sizing.stage_plan import LAYERS, MIN_MEASURE_S, STAGES, StageCost, plan  # noqa: F401 (re-exported)


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

    def __init__(
        self,
        costs: dict[str, StageCost],
        clock: Callable[[], float] = time.monotonic,
        prior: dict[str, float] | None = None,
    ):
        """`prior`: each stage's seconds as the job's estimate priced them from its worker class's measured
        rates (service/estimates/rates.py): the ETA from the first second, before this job measured anything."""
        self.costs, self.clock, self.prior = dict(costs), clock, dict(prior or {})
        self.stage: str | None = None
        self.opened = clock()  # the job's start: the first stage's time runs from here, so that the whole job
        # is in its stages' times (the worker's preparation before the load is priced with the load)
        self.started = 0.0  # when the current stage began
        self.fraction = 0.0  # its highest reported fraction
        self.best = 0.0  # the job's highest fraction so far
        self.done_weight = 0.0  # token-layers done in measured, finished stages
        self.done_s = 0.0  # and the seconds they took
        self.measured: dict[str, tuple[float, float]] = {}  # ended stage -> (token-layers, seconds): worker/rates.py

    def replan(self, costs: dict[str, StageCost]) -> None:
        """New costs (the model's layer count is known, a calibration read the cache): the fraction still never
        goes back. A finished stage's measurement takes its new cost: the work it turned out to be, so that the
        rate recorded for a cache-hit calibration is per the work of one (worker/rates.py)."""
        for stage, (w, s) in list(self.measured.items()):
            old, new = self.costs.get(stage), costs.get(stage)
            if old is not None and new is not None and old.weight > 0 and new.weight != old.weight:
                self.measured[stage] = (w * new.weight / old.weight, s)
        self.costs = dict(costs)

    def update(self, stage: str, fraction: float) -> Figures:
        now = self.clock()
        fraction = min(max(float(fraction), 0.0), 1.0)
        if stage != self.stage:
            first = self.stage is None and not self.measured
            self._finish(now)
            self.stage, self.started, self.fraction = stage, self.opened if first else now, fraction
        self.fraction = max(self.fraction, fraction)
        self.best = max(self.best, self._overall(stage, self.fraction))
        elapsed = now - self.started
        cost = self.costs.get(stage)
        measured = elapsed >= MIN_MEASURE_S and self.fraction > 0 and cost is not None and cost.weight > 0
        rate = self.fraction * cost.units / elapsed if measured else None
        return Figures(
            self.best, self.fraction, self._eta(stage, elapsed, measured), rate, cost.unit if measured else None
        )

    def _finish(self, now: float) -> None:
        """The stage that ends adds to the measured rate when it ran long enough to be measured."""
        cost = self.costs.get(self.stage or "")
        if cost is not None and now - self.started >= MIN_MEASURE_S and self.fraction > 0:
            self.done_weight += cost.weight * self.fraction
            self.done_s += now - self.started
        if cost is not None and cost.weight > 0:  # the stage ended, however fast (a cache hit, scores made in
            w, s = self.measured.get(self.stage or "", (0.0, 0.0))  # calibration): its whole work, its time
            self.measured[self.stage or ""] = (w + cost.weight, s + max(now - self.started, 0.01))

    def close(self) -> dict[str, tuple[float, float]]:
        """The job ended: its last stage counts too. Returns `measured`."""
        self._finish(self.clock())
        self.stage = None
        return self.measured

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
        per_s = weight / seconds if weight > 0 and seconds > 0 else None  # token-layers/s this job measured
        if measured:  # this stage at its own pace
            here = elapsed * (1 - self.fraction) / self.fraction
        elif stage in self.prior:  # as its class ran it
            here = self.prior[stage] * (1 - self.fraction)
        elif per_s is not None:
            here = (cost.weight if cost else 0.0) * (1 - self.fraction) / per_s
        else:
            return None
        later = [s for s in (STAGES[STAGES.index(stage) + 1 :] if stage in STAGES else ()) if s in self.costs]
        if per_s is None and any(s not in self.prior for s in later if self.costs[s].weight > 0):
            return None  # a stage ahead with neither the class's time nor a rate of this job's
        rest = sum(
            self.prior[s] if s in self.prior else self.costs[s].weight / per_s
            for s in later
            if s in self.prior or self.costs[s].weight > 0
        )
        return round(here + rest, 1)
