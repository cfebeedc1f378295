"""The `greedy` criterion: layers added one at a time, each the one whose replacement, together with those
already chosen, raises the selection data's next-token loss the least.

Per-layer criteria ignore how replacements interact; this measures the set. Its cost is bounded by the
candidates: at each step only the first M not yet chosen of `candidate_order` are tried (M = `width`), an
order that interleaves the cheap criteria's rankings (cca, cosine, nmse), so each one's best layers come
first. k steps cost at most k x M set losses (set_loss.py), each from its first replaced layer on.

Pure over `loss(layers) -> float`: the engine passes a SetLoss, the tests any function.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from nbl.score_fields import GREEDY_WIDTH

from .selection import ranking

CHEAP = ("cca", "cosine", "nmse")  # the criteria read from the cached sums, without a forward pass
DEFAULT_WIDTH = GREEDY_WIDTH


def candidate_order(layer_scores: list[dict], mode: str, criteria: Sequence[str] = CHEAP) -> list[int]:
    """Every layer once, round-robin over the criteria's rankings: each one's best, then each one's second, ..."""
    rankings = [ranking(layer_scores, mode, c) for c in criteria]
    out: list[int] = []
    for row in zip(*rankings):
        out.extend(i for i in row if i not in out)
    return out


class Greedy:
    """The greedy choice, extended on demand: `layers(k)` is the first k added (sorted), `steps` says what each
    step tried. Nested: layers(k) is within layers(k + 1)."""

    def __init__(self, order: Sequence[int], loss: Callable[[tuple[int, ...]], float], width: int = DEFAULT_WIDTH):
        if width < 1:
            raise ValueError(f"the greedy width (candidates per step) must be at least 1, got {width}")
        self.order, self.loss, self.width = list(order), loss, width
        self.chosen: list[int] = []
        self.steps: list[dict] = []  # {"added", "loss", "tried": {layer: loss}}

    def layers(self, k: int) -> list[int]:
        if not 0 < k < len(self.order) + 1:
            raise ValueError(f"k must be between 1 and {len(self.order)}, got {k}")
        while len(self.chosen) < k:
            self._step()
        return sorted(self.chosen[:k])

    def _step(self) -> None:
        candidates = [i for i in self.order if i not in self.chosen][: self.width]
        tried = {c: self.loss(tuple(sorted([*self.chosen, c]))) for c in candidates}
        best = min(candidates, key=lambda c: (math.isnan(tried[c]), tried[c], c))  # ties: the lower layer; NaN last
        self.chosen.append(best)
        self.steps.append({"added": best, "loss": tried[best], "tried": tried})
