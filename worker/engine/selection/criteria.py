"""Which k layers to replace: one-shot choice by a criterion.

    cca     lowest CCA bound Σ(1 - ρ²) first (the paper)
    nmse    lowest NMSE of the fitted map first
    cosine  highest mean cos(h, h + y) first (the DROP baselines)
    loss    lowest measured rise in next-token loss when that layer alone is replaced, on the
            held-out calibration blocks, with maps fitted on the other blocks (not in the paper;
            measured by loss_probe.py)

No refit after earlier choices: the k best by the criterion, as in the paper. A layer whose scores say
`"eligible": false` (form fold's layer 0, with a `reason`) is never ranked.
"""

from __future__ import annotations

import math

# Defined once, torch-free, where the API can read them too.
from nbl.selection.score_fields import CRITERIA, CRITERION_FIELD, HIGHER_FIRST

__all__ = ["CRITERIA", "CRITERION_FIELD", "ranking", "choose"]


def ranking(layer_scores: list[dict], mode: str, criterion: str) -> list[int]:
    """Layer indices, most replaceable first. `layer_scores[i][mode][metric]` as in the report."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {CRITERIA}, got {criterion!r}")
    key = CRITERION_FIELD[criterion]
    eligible = [i for i, s in enumerate(layer_scores) if eligible_layer(s, mode)]
    values = {i: layer_scores[i][mode].get(key) for i in eligible}
    if any(v is None for v in values.values()):
        raise ValueError(f"criterion {criterion!r} needs {key!r} for every layer in mode {mode!r}")
    sign = -1.0 if criterion in HIGHER_FIRST else 1.0
    # NaN (a degenerate layer) ranks last, ties by layer index, for a stable order.
    return sorted(eligible, key=lambda i: (math.isnan(values[i]), sign * values[i], i))


def eligible_layer(scores: dict, mode: str) -> bool:
    """False for a layer the form cannot replace (form fold's layer 0): its scores say why."""
    return scores[mode].get("eligible", True) is not False


def choose(layer_scores: list[dict], mode: str, criterion: str, k: int) -> list[int]:
    n = len(layer_scores)
    if not 0 < k < n:
        raise ValueError(f"k must be between 1 and {n - 1} for a model with {n} layers, got {k}")
    order = ranking(layer_scores, mode, criterion)
    if k > len(order):
        why = next(s[mode].get("reason") for s in layer_scores if not eligible_layer(s, mode))
        raise ValueError(f"k={k} but only {len(order)} layers are eligible: {why}")
    return sorted(order[:k])
