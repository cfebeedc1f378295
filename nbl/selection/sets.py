"""How many layer sets a measured selection scores: the selection stage's progress, a job's plan
(worker/progress.py) and its estimate's time (service/estimates) all price it the same way. Pure, and
closed-form: the layer count comes from a config.json, which is user input."""

from __future__ import annotations

import math

from .score_fields import GREEDY_WIDTH, MEASURED

# Host bytes measured selection keeps of hidden states with a prefix of replacements applied (a greedy step's
# chosen layers below each candidate: worker/engine/selection/prefix_cache.py), beside the base's; the estimate
# counts at most this.
PREFIX_CACHE_BYTES = 4 << 30


def expected_sets(criterion: str, ks, n_layers: int, width: int = GREEDY_WIDTH, k_auto: bool = False) -> int:
    """About how many layer sets a selection measures, the base included. k auto is priced at most: the
    greedy's depth as L/2 and log2(L) tried ks (doubling stops near the k found, so a small budget measures
    fewer)."""
    top = n_layers // 2 if k_auto else max(ks, default=1)
    tried = max(1, math.ceil(math.log2(max(n_layers, 2)))) if k_auto else len(ks)
    greedy = greedy_candidates(top, n_layers, width) if criterion in MEASURED else 0
    return 1 + greedy + tried * (3 if criterion == "auto" else 0 if criterion == "greedy" else 1)


def greedy_candidates(depth: int, n_layers: int, width: int) -> int:
    """Σ min(width, L - s) for s in range(depth): the candidates a greedy of `depth` steps tries, step s
    choosing among the L - s layers left, `width` at most. A depth past L counts L steps."""
    depth, width = max(0, min(depth, n_layers)), max(0, width)
    full = max(0, min(depth, n_layers - width + 1))  # the steps with `width` layers or more left
    rest = depth - full  # steps full .. depth-1 try every layer left: Σ (L - s)
    return full * width + rest * n_layers - (full + depth - 1) * rest // 2
