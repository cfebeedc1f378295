"""What a worker class already holds, as the estimate can know it from the request alone: the model's
weights read before (a warm load: no download, no hashing of a local model's files: worker/fetch.py) and the base model's evaluation in its cache (worker/eval/evaluate.py keys
that by the model's content fingerprint, the evaluation spec, dtype and device, which only the worker can
compute). The worker notes both under these request-level keys (worker/host/caches.py, table class_caches) and
the API's estimate looks them up (service/estimates/reuse.py): a job on the same model id and revision with
the same evaluation section, on the same class, finds them. Pure."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from nbl.recipe import Recipe

MODEL = "model"  # class_caches.kind: the model's files are on the class's disk
BASE_EVALUATION = "base_evaluation"  # the base's evaluation is in the class's cache


def model_key(recipe: Recipe) -> str:
    """`MODEL@REVISION` as the job names it."""
    return f"{recipe.model}@{recipe.revision or 'main'}"[:255]


def base_evaluation_key(recipe: Recipe) -> str:
    """The model and everything in the evaluation section that changes its numbers (batching does not)."""
    spec = asdict(recipe.evaluation)
    spec.pop("batch_tokens", None)
    blob = json.dumps({"model": model_key(recipe), "evaluation": spec}, sort_keys=True, default=list)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]
