"""How sure a selection's perplexity rise is: its standard error, and the selection tokens a budget needs.

The rise of a layer set S over the base on B selection blocks, each of T next-token predictions:

    d_b  = loss_b(S) - loss_b(base)             (paired: the same block under both models)
    rise = exp(mean d) - 1
    se   = exp(mean d) * sd(d) / sqrt(B)       (delta method; sd with B - 1)

Pairing removes what makes one block harder than another for both models, which dominates the spread of the
losses themselves. The spread of d scaled to one token, s = sd(d) * sqrt(T), is what more tokens divide:
se ≈ (1 + rise) * s / sqrt(B T). A budget r is resolved when se <= r / 3 at a rise near r, so

    tokens needed  N = (3 (1 + r) s / r)^2

At submit the model has not run, so s comes from a prior: s grows with the rise a set makes, from a floor that
a single replaced layer already has. Measured on SmolLM2 (bench/rise_spread.py, bench/results/rise_spread.json:
cosine-ranked Attn NBL sets k = 1..8, WikiText-2 validation 16 x 128): s = 0.21, 0.44, 0.64, 0.98, 1.18 at rises
of +1.4, +8.9, +12.2, +28.7, +42.7 %. The prior is the straight line over all five,
s(r) = PRIOR_S_FLOOR + PRIOR_S_PER_LOG_RISE * log(1 + r); a +10 % budget then needs 384 tokens and a +1 % one
7,501. One model's measurement: the worker reports the measured s and warns when the measured se is above a
third of the budget. Torch-free: the API imports this.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# The upper envelope of bench/rise_spread.py's five SmolLM2 sets (the docstring): at or above every one measured.
PRIOR_S_FLOOR = 0.25
PRIOR_S_PER_LOG_RISE = 3.6
RESOLVE = 3  # the budget must be at least this many standard errors of the rise


def paired(base: Sequence[float], cand: Sequence[float], tokens_per_block: int) -> dict:
    """{"rise", "rise_se", "sd_per_token", "blocks"} of a set from per-block mean losses; se None on one block."""
    d = [c - b for b, c in zip(base, cand, strict=True)]
    n = len(d)
    mean = sum(d) / n
    rise = math.expm1(mean) if mean < 700 else math.inf
    if n < 2 or not math.isfinite(mean):
        return {"rise": _num(rise), "rise_se": None, "sd_per_token": None, "blocks": n}
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    return {
        "rise": _num(rise),
        "rise_se": _num(math.exp(mean) * sd / math.sqrt(n)),
        "sd_per_token": _num(sd * math.sqrt(tokens_per_block)),
        "blocks": n,
    }


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def unresolved(rise_se: float | None, budget: float) -> bool:
    """The measured error is too large for the budget to be told apart from a rise within it."""
    return rise_se is not None and rise_se > budget / RESOLVE


def prior_sd(budget: float) -> float:
    """The per-token spread s a set at the edge of `budget` is expected to have (the prior above)."""
    return PRIOR_S_FLOOR + PRIOR_S_PER_LOG_RISE * math.log1p(budget)


def tokens_needed(budget: float, sd_per_token: float | None = None) -> int:
    """Selection tokens (next-token predictions) for se <= budget / 3 at a rise equal to the budget."""
    s = prior_sd(budget) if sd_per_token is None else sd_per_token
    need = (RESOLVE * (1 + budget) * s / budget) ** 2
    return math.ceil(need) if need < 1e18 else 10**18  # a vanishing budget (5e-324) needs more than any data has
