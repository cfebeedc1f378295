"""What a worker class already holds, as the estimate can know it from the request alone: the model's
weights read before (a warm load: no download, no hashing of a local model's files: worker/fetch.py), the
calibration's statistics in its cache (calibration reads them instead of running the model), and the base
model's evaluation in its cache (worker/eval/evaluate.py keys
that by the model's content fingerprint, the evaluation spec, dtype and device, which only the worker can
compute). The worker notes each under these request-level keys (worker/host/caches.py, table class_caches) and
the API's estimate looks them up (service/estimates/reuse.py): a job on the same model id and revision with
the same evaluation section, on the same class, finds them. Pure."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from nbl.recipe import Recipe

MODEL = "model"  # class_caches.kind: the model's files are on the class's disk
BASE_EVALUATION = "base_evaluation"  # the base's evaluation is in the class's cache
STATISTICS = "statistics"  # the calibration's sums are in the class's statistics cache


def model_key(recipe: Recipe) -> str:
    """`MODEL@REVISION` as the job names it."""
    return f"{recipe.model}@{recipe.revision or 'main'}"[:255]


def base_evaluation_key(recipe: Recipe) -> str:
    """The model and everything in the evaluation section that changes its numbers (batching does not)."""
    spec = asdict(recipe.evaluation)
    spec.pop("batch_tokens", None)
    blob = json.dumps({"model": model_key(recipe), "evaluation": spec}, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def statistics_key(recipe: Recipe) -> str:
    """The model and what the statistics cache keys its sums by that a request sets
    (worker/engine/calibration/stage.stats_key): the calibration section, the mode (an entry holds the modes
    it was computed for), the form when not nbl, and a fold block run's longest run (max k). The worker's
    own parts (fingerprint, dtype, product dtype) are the class's, the same for every job on it."""
    comp = recipe.compression
    parts = {"model": model_key(recipe), "calibration": asdict(recipe.calibration), "mode": comp.mode}
    if comp.form != "nbl":
        parts["form"] = comp.form
    if (comp.form, comp.mode) == ("fold", "block"):
        parts["max_run"] = max(comp.ks or (1,))
    blob = json.dumps(parts, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]
