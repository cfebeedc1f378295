"""The per-layer score fields and the criteria that rank by them, defined once.

Torch-free, so the API may import it: the engine computes these fields (worker/engine/scoring/scores.py,
loss_probe.py), the store keeps one column each (service/core/models.py LayerScore), and the
response schema, `nbl compress`'s table and JSON, and the model card read them from here.
"""

from __future__ import annotations

# Every number reported for one branch (attn or block) of one layer; loss_rise only with criterion `loss`.
SCORE_FIELDS = ("cca_bound", "nmse", "cosine", "cond", "heldout_nmse", "loss_rise")

# How the card and the plot name them.
SCORE_LABELS = {
    "cca_bound": "CCA bound",
    "nmse": "NMSE",
    "cosine": "cosine",
    "cond": "cond(C_xx)",
    "heldout_nmse": "held-out NMSE",
    "loss_rise": "loss rise",
}

CRITERIA = ("cca", "nmse", "cosine", "loss")
# criterion -> the score field it ranks by (lower = more linear = replaced first; cosine: higher).
CRITERION_FIELD = {"cca": "cca_bound", "nmse": "nmse", "cosine": "cosine", "loss": "loss_rise"}
# Measured on selection data (worker/engine/selection/auto_k.py): greedy layer sets, and the best of cca, cosine, nmse, greedy.
MEASURED = ("greedy", "auto")
GREEDY_WIDTH = 8  # the greedy's candidates per step (Settings.greedy_width, `nbl compress --greedy-width`)
HIGHER_FIRST = frozenset({"cosine"})  # the criteria that replace the highest values first
