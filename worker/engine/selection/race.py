"""Racing a greedy step's candidates over the selection blocks: stop scoring one that cannot win.

Each candidate set is scored on the first quarter of the batches, then on twice as many, and so on up to all of
them. After each round the leader is the candidate with the lowest mean loss on the blocks scored so far; a
candidate whose paired per-block differences with the leader, d_b = loss_b(candidate) - loss_b(leader), have

    mean(d) > Z * sd(d) / sqrt(n)          (n blocks scored, at least MIN_BLOCKS)

is dropped: it is worse than the leader by more than Z standard errors of the paired mean, so on the whole
selection set it would lose unless the blocks not yet scored reversed a gap that large. With Z = 3 that is a
one-sided 0.13 % chance per comparison under a normal model of the block differences; it is a statistical
bound, not a certainty, and bench/selection_cost.py reports whether the chosen layers changed. Survivors are
scored on every block; the lowest full mean wins, as without racing.

Pure over `per_block(candidate, n_batches) -> per-block losses of the first n batches` (set_loss.SetLoss).
"""

from __future__ import annotations

import math
from typing import Callable, Hashable, Sequence

import torch

Z = 3.0
MIN_BLOCKS = 4  # fewer paired differences give no usable standard deviation


def schedule(n_batches: int) -> list[int]:
    """Batches scored by each round: a quarter (at least one), doubling, then all."""
    rounds, n = [], max(1, n_batches // 4)
    while n < n_batches:
        rounds.append(n)
        n *= 2
    return rounds + [n_batches]


def significantly_worse(d: torch.Tensor, z: float = Z) -> bool:
    n = d.numel()
    if n < MIN_BLOCKS:
        return False
    mean, sd = float(d.mean()), float(d.std(unbiased=True))
    return mean > z * sd / math.sqrt(n) and mean > 0


def race(
    candidates: Sequence[Hashable], per_block: Callable[[Hashable, int], torch.Tensor], n_batches: int, z: float = Z
) -> dict[Hashable, dict]:
    """candidate -> {"loss": mean over the blocks scored, "blocks": how many, "full": scored on all of them}; the
    caller picks the winner among the full ones (its own tie rule)."""
    alive = list(candidates)
    seen: dict[Hashable, torch.Tensor] = {}
    for n in schedule(n_batches):
        for c in alive:
            seen[c] = per_block(c, n)
        if n == n_batches:
            break
        means = {c: float(seen[c].mean()) for c in alive}
        leader = min(alive, key=lambda c: (math.isnan(means[c]), means[c]))
        if math.isnan(means[leader]):
            continue
        alive = [
            c
            for c in alive
            if c == leader or not (math.isnan(means[c]) or significantly_worse(seen[c] - seen[leader], z))
        ]
    return {c: {"loss": float(v.mean()), "blocks": int(v.numel()), "full": c in alive} for c, v in seen.items()}
