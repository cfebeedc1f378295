"""The request's refinement of the fitted maps, after the layers are chosen (worker/engine/refine/stage.py).

    "compression": {"k": 8, "refit": "sequential", "heal": {"tokens": 16384, "steps": 64, "lr": 1e-4}}

- `refit`: `none` (the default: each map fitted once, on the base model's own activations) or `sequential`:
  the replaced layers refitted in depth order on the compressed model's own activations (earlier replacements
  applied), against the base layer's output on those same activations (worker/engine/refine/refit.py).
- `heal`: train only the maps (W, b) against the base model's next-token distribution on calibration text the
  fit never saw (worker/engine/refine/heal.py), bounded in tokens, steps and seconds. Absent: no healing. The healed
  maps are kept only if the perplexity of the held-out healing blocks did not rise, nor that of the job's
  selection dataset when it is not the calibration's (the guard against learning the healing text's domain).

Both need fitted maps the engine can run: method nbl, form nbl or linear (refit) / nbl (heal). Fold's map acts
on the previous block's MLP output and is folded into its down_proj weights, so a refit would have to refit that
MLP's input path too: refused, naming the field, as a 422. Torch-free: the API imports this.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt

REFITS = ("none", "sequential")
REFIT = "none"
HEAL_LR = 1e-5  # docs/quality.md: 1e-4 and 2e-5 (one block a step, constant) raised held-out perplexity
MAX_HEAL_TOKENS = 1 << 24  # 16.7 M: more is a fine-tuning job, not a heal


class HealSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    tokens: Annotated[
        StrictInt,
        Field(
            ge=1,
            le=MAX_HEAL_TOKENS,
            description=(
                "training tokens (at least two blocks are taken), from the calibration dataset after the calibration's own blocks (cut into blocks of "
                "calibration.seq_len; a tenth of them, at least one block, is held out to measure the perplexity before and "
                "after)"
            ),
        ),
    ]
    steps: Annotated[StrictInt, Field(ge=1, le=1 << 20)] | None = Field(
        default=None,
        description=(
            "optimiser steps (default: one per training block); each averages ceil(training blocks / steps) blocks, so "
            "the steps cover the training blocks once (more steps than blocks: one block a step, round-robin)"
        ),
    )
    lr: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = Field(
        default=HEAL_LR, description=("Adam's peak learning rate; it falls to 0 on a cosine over the steps")
    )
    max_seconds: Annotated[float, Field(gt=0, le=7 * 86400, allow_inf_nan=False)] | None = Field(
        default=None, description="stop training after this long (per output), whatever the steps left"
    )


def refine_error(form: str, method: str, refit: str, healing: bool) -> str | None:
    """Why maps of this form and method cannot be refitted or healed (None: they can)."""
    if refit not in REFITS:
        return f"refit must be one of {', '.join(REFITS)}, got {refit!r}"
    asked = [name for name, on in (("refit", refit != REFIT), ("heal", healing)) if on]
    if not asked:
        return None
    what = " and ".join(asked)
    if method != "nbl":
        return f"{what} refines fitted maps: method {method!r} has none (give method 'nbl', or drop {what})"
    if form == "fold":
        return (
            f"{what} is not offered for form 'fold': its map is folded into the previous MLP's down_proj, so "
            f"refining it would change that MLP too; use form 'nbl' or 'linear'"
        )
    if healing and form != "nbl":
        return (
            f"heal trains nbl's maps (W h + b); form {form!r} writes bias-free maps on a norm's output: "
            f"use form 'nbl', or refit 'sequential' alone"
        )
    return None


def blocks_per_step(train_blocks: int, steps: int) -> int:
    """Blocks whose gradients one healing step averages: the steps cover the training blocks once."""
    return max(1, math.ceil(train_blocks / max(1, steps)))


def heal_split(tokens: int, seq_len: int) -> tuple[int, int]:
    """(training blocks, held-out blocks) of a heal of `tokens`: ceil(tokens / seq_len) blocks, at least 2, a tenth
    of them (at least 1) held out (worker/engine/refine/stage.py; the estimates price the same)."""
    n = max(2, math.ceil(tokens / seq_len))
    held = max(1, n // 10)
    return n - held, held


RefitName = Literal[REFITS]  # type: ignore[valid-type]
