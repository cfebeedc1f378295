"""Scores and maps of the forms linear and fold (nbl/outputs/forms.py): closed-form least squares without bias.

Their sums (form_taps.py) regress the branch y on the form's own x (LN1 h, LN2 h, or the previous
MLP's output f); the runtimes that read these forms have no bias, so the map is

    W = E[y xᵀ] (E[x xᵀ] + λI)^-1          λ = ridge · tr E[x xᵀ] / d, in float64

from the same moments as nbl's (scores.py: E[x xᵀ] = C_xx + μ_x μ_xᵀ). Each criterion ranks on this fit:
    nmse        E‖y - W x‖² / tr C_yy of that map (the mean it cannot fit included)
    cca_bound   Σ(1 - ρ²) of (x, y) itself: how much of y no linear map of x explains
    cosine      the branch's mean cos(h, h + y), as for nbl (it needs no fit)
"""

from __future__ import annotations

import torch

from nbl.outputs.forms import layer_error
from worker.engine.calibration.stats import LayerStats
from worker.engine.scoring.scores import (
    DEFAULT_RIDGE,
    BranchScores,
    LinearMap,
    Moments,
    cca_bound,
    condition_number,
    layer_moments,
    mean_cosine,
    nmse,
)


def raw_second(m: Moments) -> tuple[torch.Tensor, torch.Tensor]:
    """(E[x xᵀ], E[y xᵀ]) from centred moments."""
    return m.cxx + torch.outer(m.mu_x, m.mu_x), m.cyx + torch.outer(m.mu_y, m.mu_x)


def lstsq_no_bias(m: Moments, ridge: float = DEFAULT_RIDGE) -> LinearMap:
    """The least-squares y ≈ W x with no intercept; solves, never inverts."""
    rxx, ryx = raw_second(m)
    d = rxx.shape[0]
    lam = ridge * float(torch.trace(rxx)) / d
    a = rxx + lam * torch.eye(d, dtype=rxx.dtype, device=rxx.device)
    chol, info = torch.linalg.cholesky_ex(a)
    wt = torch.cholesky_solve(ryx.T, chol) if int(info) == 0 else torch.linalg.lstsq(a, ryx.T).solution
    return LinearMap(weight=wt.T, bias=torch.zeros(m.mu_y.shape[0], dtype=wt.dtype, device=wt.device), ridge=lam)


def ineligible(reason: str) -> dict:
    """A layer the form cannot replace: no numbers, and the reason (selection skips it)."""
    return {
        **{f: None for f in ("cca_bound", "nmse", "cosine", "cond", "heldout_nmse")},
        "eligible": False,
        "reason": reason,
    }


def score_form_layer(i: int, stats: LayerStats, form: str, mode: str, ridge: float = DEFAULT_RIDGE) -> dict:
    """Layer i's scores in this form, the report's shape ({"layer": i, mode: {...}})."""
    why = layer_error(form, [i])
    if why is not None:
        return {"layer": i, mode: ineligible(why)}
    m = layer_moments(stats, mode)
    rxx, _ = raw_second(m)
    held = None
    if float(stats.splits["held"].n) >= 2 and float(stats.splits["fit"].n) >= 2:
        held = nmse(layer_moments(stats, mode, "held"), lstsq_no_bias(layer_moments(stats, mode, "fit"), ridge))
    sc = BranchScores(
        cca_bound=cca_bound(m),
        nmse=nmse(m, lstsq_no_bias(m, ridge)),
        cosine=mean_cosine(stats.total(), mode),
        cond=condition_number(torch.linalg.eigvalsh(rxx)),
        heldout_nmse=held,
    )
    return {"layer": i, mode: sc.as_dict()}
