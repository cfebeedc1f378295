"""Choosing by measurement on the selection data: the `greedy` and `auto` criteria, and `k: auto`.

    criterion greedy   greedy.py's nested choice
    criterion auto     for each k, the layer sets of cca, cosine, nmse and greedy, each scored by the selection
                       data's loss (set_loss.py); the lowest wins (ties: in that order)
    k auto             the largest k whose selection perplexity stays within exp(base loss) x (1 + budget),
                       found by doubling k from 1, then bisection; it assumes the perplexity rises with k, and
                       records every k it tried (any criterion; with auto, criterion and k are chosen together)

Pure over the scores and a `loss(layers)` function; `record` is what `--json` and the job result report.
"""

from __future__ import annotations

import math
from typing import Callable

from nbl.selection.rise_error import paired
from nbl.selection.score_fields import MEASURED  # the criteria that need selection data (beside `loss`)
from nbl.selection.sets import expected_sets  # priced once, for the API's estimate too
from worker.engine.selection.criteria import choose
from worker.engine.selection.greedy import CHEAP, DEFAULT_WIDTH, Greedy, candidate_order

__all__ = ["MEASURED", "Chooser", "expected_sets"]


def ppl(loss: float) -> float | None:
    """exp(loss), None where it is not a finite number (JSON and the job's row hold no Infinity)."""
    return math.exp(loss) if math.isfinite(loss) and loss < 700 else None


class Chooser:
    """`layers(k)` -> (layers, criterion that won); every set it scored is in `tried`."""

    def __init__(
        self,
        layer_scores: list[dict],
        mode: str,
        criterion: str,
        loss: Callable[[tuple[int, ...]], float],
        base_loss: float,
        width: int = DEFAULT_WIDTH,
    ):
        self.scores, self.mode, self.criterion, self.loss, self.base_loss = (
            layer_scores,
            mode,
            criterion,
            loss,
            base_loss,
        )
        self.n_layers = len(layer_scores)
        self.greedy = Greedy(candidate_order(layer_scores, mode), loss, width)
        self.tried: list[dict] = []
        self.done: dict[int, tuple[list[int], str]] = {}

    def options(self, k: int) -> dict[str, list[int]]:
        if self.criterion == "auto":
            return {**{c: choose(self.scores, self.mode, c, k) for c in CHEAP}, "greedy": self.greedy.layers(k)}
        if self.criterion == "greedy":
            return {"greedy": self.greedy.layers(k)}
        return {self.criterion: choose(self.scores, self.mode, self.criterion, k)}

    def layers(self, k: int) -> tuple[list[int], str]:
        if not 0 < k < self.n_layers:
            raise ValueError(
                f"k must be between 1 and {self.n_layers - 1} for a model with {self.n_layers} layers, got {k}"
            )
        if k in self.done:
            return self.done[k]
        scored = []
        for criterion, layers in self.options(k).items():
            loss = self.loss(tuple(layers))
            scored.append((loss, criterion, layers))
            self.tried.append(
                {"k": k, "criterion": criterion, "layers": layers, "loss": loss, "heldout_ppl": ppl(loss)}
            )
        # the first of equal losses wins; NaN (a broken set) last
        loss, criterion, layers = min(scored, key=lambda t: (math.isnan(t[0]), t[0]))
        for t in self.tried[-len(scored) :]:
            t["chosen"] = t["criterion"] == criterion
        self.done[k] = layers, criterion
        return layers, criterion

    def auto_k(self, max_ppl_increase: float) -> int:
        """The largest k whose best set's selection perplexity is within the budget: doubling k from 1 until a k
        fails, then bisection below it. The greedy is nested and grown step by step, so its depth stays near the k
        found (at most twice it) instead of starting at L/2 as plain bisection would: budgets of 5-20 % keep k
        small, and each greedy step costs `width` set losses."""
        if not max_ppl_increase > 0:
            raise ValueError(f"max_ppl_increase must be positive, got {max_ppl_increase}")
        limit = self.base_loss + math.log1p(max_ppl_increase)

        def fits(k: int) -> bool:
            return self.loss(tuple(self.layers(k)[0])) <= limit

        lo, hi, k = 0, self.n_layers - 1, 1  # k = lo fits (0: nothing replaced); is there a larger one, up to hi?
        while k <= hi and fits(k):
            lo, k = k, 2 * k
        hi = min(hi, k - 1)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        if lo == 0:
            raise ValueError(
                f"no k is within the budget: replacing even one layer raises the selection data's "
                f"perplexity by more than {max_ppl_increase:.0%}"
            )
        return lo

    def error(self, layers: list[int]) -> dict:
        """{"rise", "rise_se", "sd_per_token", "blocks"} of a set on the selection data (nbl/selection/rise_error.py), from
        the per-block losses a SetLoss keeps; empty for a loss that has none (a plain function)."""
        if not hasattr(self.loss, "per_block"):
            return {}
        tokens = int(self.loss.blocks.shape[1]) - 1
        return paired(self.loss.per_block(()).tolist(), self.loss.per_block(tuple(layers)).tolist(), tokens)

    def record(self, data: dict, tokens: int, chosen: dict[int, tuple[list[int], str]]) -> dict:
        """The `selection` section of --json and of the job result."""
        ks = sorted(chosen)
        return {
            "criterion": self.criterion if len(ks) != 1 else chosen[ks[0]][1],
            "k": ks[0] if len(ks) == 1 else ks,
            "data": data,
            "tokens": tokens,
            "base_ppl": ppl(self.base_loss),
            "chosen": [
                {"k": k, "criterion": chosen[k][1], "layers": chosen[k][0], **self.error(chosen[k][0])} for k in ks
            ],
            "tried": [{key: t[key] for key in ("k", "criterion", "layers", "heldout_ppl")} for t in self.tried],
            "greedy_steps": [{"added": s["added"], "heldout_ppl": ppl(s["loss"])} for s in self.greedy.steps],
        }
