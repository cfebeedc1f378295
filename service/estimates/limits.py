"""The deployment's limits on a request, checked at submit with the Settings (jobs/submit.py, the estimate endpoint):
errors in FastAPI's shape, so they answer 422 as the schema's own do. Among them what this deployment's data can
give: a heal past what the shipped calibration copy under NBL_DATA_DIR can hold (nbl/data/heal.py)."""

from __future__ import annotations

from nbl.data.heal import FIELD, bound_error
from nbl.data.shipped import most_tokens
from nbl.gates import gate_errors
from nbl.request import JobCreate
from nbl.selection.schema import budget_errors, selection_errors
from service.core.settings import Settings


def check_limits(spec: JobCreate, settings: Settings) -> list[dict]:
    """The deployment's limits, as validation errors in FastAPI's shape (empty when all is well)."""
    errors = []

    def over(loc: tuple, value: int, limit: int, what: str) -> None:
        if value > limit:
            errors.append(
                {
                    "loc": ["body", *loc],
                    "msg": f"{what} must be at most {limit} on this server, got {value}",
                    "type": "limit_exceeded",
                    "input": value,
                }
            )

    over(("calibration", "num_samples"), spec.calibration.num_samples, settings.max_num_samples, "num_samples")
    over(("calibration", "seq_len"), spec.calibration.seq_len, settings.max_seq_len, "seq_len")
    if spec.compression.ks:  # k auto: the worker searches below the layer count
        over(("compression", "k"), max(spec.compression.ks), settings.max_k, "k")
    if spec.selection is not None:
        over(("selection", "num_samples"), spec.selection.num_samples, settings.max_num_samples, "num_samples")
    if spec.evaluation.limit is not None:
        over(("evaluation", "limit"), spec.evaluation.limit, settings.max_eval_limit, "limit")
    return errors + heal_data_errors(spec, settings) + gate_errors(spec) + selection_errors(spec) + budget_errors(spec)


def heal_data_errors(spec: JobCreate, settings: Settings) -> list[dict]:
    """A heal the calibration data cannot hold, when this server knows what the data gives (a shipped copy)."""
    heal, cal = spec.compression.heal, spec.calibration
    if heal is None:
        return []
    why = bound_error(
        cal.num_samples,
        cal.seq_len,
        heal.tokens,
        most_tokens(settings.data_dir, cal.dataset, cal.split, cal.text_field),
    )
    return [] if why is None else [{"loc": ["body", *FIELD], "msg": why, "type": "heal_data", "input": heal.tokens}]
