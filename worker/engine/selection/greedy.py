"""The `greedy` criterion: layers added one at a time, each the one whose replacement, together with those
already chosen, raises the selection data's next-token loss the least.

Per-layer criteria ignore how replacements interact; this measures the set. Its cost is bounded by the
candidates: at each step only the first M not yet chosen of `candidate_order` are tried (M = `width`), an
order that interleaves the cheap criteria's rankings (cca, cosine, nmse), so each one's best layers come
first. k steps cost at most k x M set losses (set_loss.py), each from its first replaced layer on.

Two savings when `loss` offers them (a SetLoss does): `warm(chosen, candidates)` caches the hidden states with
the chosen layers replaced at each candidate's input, so each candidate set runs from its own layer on; and
`per_block(set, n_batches)` lets the step race its candidates over the blocks (race.py), dropping one that is
worse than the leader by more than `z` standard errors before the remaining blocks are scored (z None: every
candidate on every block, as before).

Pure over `loss(layers) -> float`: the engine passes a SetLoss, the tests any function.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from nbl.selection.score_fields import GREEDY_WIDTH
from worker.engine.selection.criteria import ranking
from worker.engine.selection.race import Z, race

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

    def __init__(
        self,
        order: Sequence[int],
        loss: Callable[[tuple[int, ...]], float],
        width: int = DEFAULT_WIDTH,
        z: float | None = Z,
    ):
        if width < 1:
            raise ValueError(f"the greedy width (candidates per step) must be at least 1, got {width}")
        self.order, self.loss, self.width, self.z = list(order), loss, width, z
        self.chosen: list[int] = []
        # {"added", "loss", "tried": {layer: loss}, "blocks": {layer: blocks scored} for candidates raced out}
        self.steps: list[dict] = []

    def layers(self, k: int) -> list[int]:
        if not 0 < k < len(self.order) + 1:
            raise ValueError(f"k must be between 1 and {len(self.order)}, got {k}")
        while len(self.chosen) < k:
            self._step()
        return sorted(self.chosen[:k])

    def _step(self) -> None:
        candidates = [i for i in self.order if i not in self.chosen][: self.width]
        sets = {c: tuple(sorted([*self.chosen, c])) for c in candidates}
        if self.chosen and hasattr(self.loss, "warm"):
            self.loss.warm(self.chosen, candidates)
        cut: dict[int, int] = {}
        if self.z is not None and len(candidates) > 1 and hasattr(self.loss, "per_block"):
            raced = race(candidates, lambda c, n: self.loss.per_block(sets[c], n), len(self.loss.batches), self.z)
            tried = {c: r["loss"] for c, r in raced.items()}
            cut = {c: r["blocks"] for c, r in raced.items() if not r["full"]}
        else:
            tried = {c: self.loss(sets[c]) for c in candidates}
        # ties: the lower layer; NaN last; a candidate raced out never wins
        best = min((c for c in candidates if c not in cut), key=lambda c: (math.isnan(tried[c]), tried[c], c))
        if cut:  # the winner's full mean, as `loss` would give it (memoised)
            tried[best] = self.loss(sets[best])
        self.chosen.append(best)
        self.steps.append({"added": best, "loss": tried[best], "tried": tried, **({"raced_out": cut} if cut else {})})
