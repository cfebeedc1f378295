"""The deployment's limits on a request, checked at submit with the Settings (jobs/service.py, the estimate endpoint):
errors in FastAPI's shape, so they answer 422 as the schema's own do."""

from __future__ import annotations

from service.core.settings import Settings
from nbl.gates import gate_errors
from nbl.request import JobCreate
from nbl.selection_schema import budget_errors, selection_errors


def check_limits(spec: JobCreate, settings: Settings) -> list[dict]:
    """The deployment's limits, as validation errors in FastAPI's shape (empty when all is well)."""
    errors = []

    def over(loc: tuple, value: int, limit: int, what: str) -> None:
        if value > limit:
            errors.append({"loc": ["body", *loc], "msg": f"{what} must be at most {limit} on this server, got {value}",
                           "type": "limit_exceeded", "input": value})

    over(("calibration", "num_samples"), spec.calibration.num_samples, settings.max_num_samples, "num_samples")
    over(("calibration", "seq_len"), spec.calibration.seq_len, settings.max_seq_len, "seq_len")
    if spec.compression.ks:  # k auto: the worker searches below the layer count
        over(("compression", "k"), max(spec.compression.ks), settings.max_k, "k")
    if spec.selection is not None:
        over(("selection", "num_samples"), spec.selection.num_samples, settings.max_num_samples, "num_samples")
    if spec.evaluation.limit is not None:
        over(("evaluation", "limit"), spec.evaluation.limit, settings.max_eval_limit, "limit")
    return errors + gate_errors(spec) + selection_errors(spec) + budget_errors(spec)
