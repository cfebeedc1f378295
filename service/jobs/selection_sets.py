"""How many layer sets a measured selection scores: the selection stage's progress, a job's plan
(worker/progress.py) and its estimate's time (service/estimates) all price it the same way. Pure."""

from __future__ import annotations

import math

from .score_fields import GREEDY_WIDTH, MEASURED


def expected_sets(criterion: str, ks, n_layers: int, width: int = GREEDY_WIDTH, k_auto: bool = False) -> int:
    """About how many layer sets a selection measures, the base included. k auto is priced at most: the
    greedy's depth as L/2 and log2(L) tried ks (doubling stops near the k found, so a small budget measures
    fewer)."""
    top = n_layers // 2 if k_auto else max(ks, default=1)
    tried = max(1, math.ceil(math.log2(max(n_layers, 2)))) if k_auto else len(ks)
    greedy = sum(min(width, n_layers - s) for s in range(top)) if criterion in MEASURED else 0
    return 1 + greedy + tried * (3 if criterion == "auto" else 0 if criterion == "greedy" else 1)
