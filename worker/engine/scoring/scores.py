"""Per-layer scores and the LMMSE map, as pure functions of the streamed sums (stats.py).

All maths in float64. Covariances are population covariances (divide by n); every quantity below
is invariant to that choice.

    mu_x, mu_y, C_xx, C_yy, C_yx         from n, Σx, Σy, Σxxᵀ, Σyyᵀ, Σyxᵀ about a shift
    W = C_yx (C_xx + λI)^-1               λ = ridge · tr(C_xx)/d guards rank deficiency
    b = mu_y - W mu_x
    CCA bound   Σ_i (1 - ρ_i²),  ρ = singular values of C_yy^-1/2 C_yx C_xx^-1/2
    NMSE        tr(E[(y - Wx - b)(y - Wx - b)ᵀ]) / tr(C_yy)  of the map actually used
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from worker.engine.calibration.stats import LayerStats, SplitSums

DEFAULT_RIDGE = 1e-6  # relative to the mean eigenvalue tr(C_xx)/d
EIG_FLOOR = 1e-10  # relative to the largest eigenvalue, for inverse square roots


@dataclass(frozen=True)
class Moments:
    """Means and covariances of a pair (x, y) over n tokens."""

    n: float
    mu_x: torch.Tensor  # (d_x,)
    mu_y: torch.Tensor  # (d_y,)
    cxx: torch.Tensor  # (d_x, d_x)
    cyy: torch.Tensor | None  # (d_y, d_y); None for one split, whose sums keep only its trace
    cyx: torch.Tensor  # (d_y, d_x)
    tr_cyy: float  # tr C_yy, all that scoring a map on the moments needs of C_yy


@dataclass(frozen=True)
class LinearMap:
    weight: torch.Tensor  # (d_y, d_x)
    bias: torch.Tensor  # (d_y,)
    ridge: float  # the absolute λ added to C_xx's diagonal


def moments(
    s: SplitSums, branch: str, shift_x: torch.Tensor, shift_y: torch.Tensor, yy: torch.Tensor | None = None
) -> Moments:
    """Means and covariances of (x, y_branch) from sums taken about (shift_x, shift_y); C_yy only
    when the matrix Σyyᵀ of the same blocks is given, else just its trace (from Σ‖y‖²)."""
    n = float(s.n)
    if n < 2:
        raise ValueError(f"need at least 2 tokens for covariances, have {n:g}")
    b = s.branches[branch]
    mx, my = s.x / n, b.y / n  # means of the shifted variables
    cyy = None if yy is None else _sym(yy / n - torch.outer(my, my))
    return Moments(
        n=n,
        mu_x=shift_x.double() + mx,
        mu_y=shift_y.double() + my,
        cxx=_sym(s.xx / n - torch.outer(mx, mx)),
        cyy=cyy,
        cyx=b.yx / n - torch.outer(my, mx),
        tr_cyy=float(torch.trace(cyy)) if cyy is not None else float(b.yy_tr / n - my @ my),
    )


def layer_moments(stats: LayerStats, branch: str, split: str | None = None) -> Moments:
    """Moments of one branch over one split ('fit', 'held': no C_yy) or, with split=None, all blocks."""
    if split is None:
        return moments(stats.total(), branch, stats.shift_x, stats.shift_y[branch], stats.yy[branch])
    return moments(stats.splits[split], branch, stats.shift_x, stats.shift_y[branch])


def with_residual(m: Moments) -> Moments:
    """Moments of (x, x + y) from those of (x, y): the post-residual stream the paper ranks on."""
    cyy = _sym(m.cyy + m.cyx + m.cyx.T + m.cxx)
    return Moments(
        n=m.n,
        mu_x=m.mu_x,
        mu_y=m.mu_y + m.mu_x,
        cxx=m.cxx,
        cyy=cyy,
        cyx=m.cyx + m.cxx,
        tr_cyy=float(torch.trace(cyy)),
    )


def lmmse(m: Moments, ridge: float = DEFAULT_RIDGE) -> LinearMap:
    """Closed-form least-squares map y ≈ W x + b; solves, never inverts."""
    d = m.cxx.shape[0]
    lam = ridge * float(torch.trace(m.cxx)) / d
    a = m.cxx + lam * torch.eye(d, dtype=m.cxx.dtype, device=m.cxx.device)
    # C_xx Wᵀ = C_xy; Cholesky is exact for the SPD regularised matrix, lstsq is the fallback.
    chol, info = torch.linalg.cholesky_ex(a)
    if int(info) == 0:
        wt = torch.cholesky_solve(m.cyx.T, chol)
    else:
        wt = torch.linalg.lstsq(a, m.cyx.T).solution
    w = wt.T
    return LinearMap(weight=w, bias=m.mu_y - w @ m.mu_x, ridge=lam)


def condition_number(evals: torch.Tensor) -> float:
    """λ_max / λ_min from ascending eigenvalues; inf for a singular matrix."""
    return float(evals[-1] / evals[0]) if evals[0] > 0 else float("inf")


def residual_mse(m: Moments, f: LinearMap) -> float:
    """E||y - W x - b||² under the moments m (which need not be those f was fitted on)."""
    w = f.weight
    offset = m.mu_y - w @ m.mu_x - f.bias
    cov = m.tr_cyy - 2 * torch.sum(w * m.cyx) + torch.sum((w @ m.cxx) * w)
    return float(cov + offset @ offset)


def nmse(m: Moments, f: LinearMap) -> float:
    """Residual error of the map, normalised by the variance of y. A y without variance (a branch whose
    output is constant, e.g. zeroed weights) has nothing to normalise by: 0 when the map reproduces it
    (its bias does), else inf, the worst score."""
    err = residual_mse(m, f)
    if float(m.tr_cyy) > 0:
        return err / float(m.tr_cyy)
    return 0.0 if err <= 1e-12 * (1.0 + float(m.mu_y @ m.mu_y)) else float("inf")


def inv_sqrt(c: torch.Tensor, floor: float = EIG_FLOOR) -> torch.Tensor:
    """C^-1/2 of a symmetric PSD matrix by eigendecomposition, eigenvalues clamped at floor·max."""
    evals, evecs = torch.linalg.eigh(c)
    evals = evals.clamp_min(float(evals[-1]) * floor)
    return (evecs * evals.rsqrt()) @ evecs.T


def canonical_correlations(m: Moments, floor: float = EIG_FLOOR) -> torch.Tensor:
    """ρ_i: singular values of C_yy^-1/2 C_yx C_xx^-1/2, clipped to [0, 1]."""
    t = inv_sqrt(m.cyy, floor) @ m.cyx @ inv_sqrt(m.cxx, floor)
    return torch.linalg.svdvals(t).clamp(0.0, 1.0)


def cca_bound(m: Moments, floor: float = EIG_FLOOR, cxx_chol=None) -> float:
    """The paper's NMSE bound (d_out - r) + Σ_{i≤r}(1 - ρ_i²); lower = more linearizable.

    Σρ_i² is the squared Frobenius norm of the whitened cross-covariance, whatever the whitening:
    with Cholesky factors L, ‖L_y⁻¹ C_yx L_x⁻ᵀ‖_F² = ‖C_yy^-1/2 C_yx C_xx^-1/2‖_F², with no SVD and no
    eigendecomposition (20x faster at d=576). A singular covariance, where Cholesky fails, falls back
    to the clamped eigendecomposition of `canonical_correlations`.
    """
    d_out, r = m.cyy.shape[0], min(m.cyy.shape[0], m.cxx.shape[0])
    lx = cxx_chol if cxx_chol is not None else _cholesky(m.cxx)
    ly = _cholesky(m.cyy)
    if lx is not None and ly is not None:
        t = torch.linalg.solve_triangular(ly, m.cyx, upper=False)  # L_y⁻¹ C_yx
        t = torch.linalg.solve_triangular(lx, t.T, upper=False).T  # ... L_x⁻ᵀ
        sum_rho2 = float(torch.sum(t * t))
        if -1e-9 <= sum_rho2 <= r * (1 + 1e-9):  # else ill-conditioned: take the clamped path
            return d_out - min(sum_rho2, float(r))
    rho = canonical_correlations(m, floor)
    return float((d_out - rho.numel()) + torch.sum(1 - rho**2))


def _cholesky(c: torch.Tensor) -> torch.Tensor | None:
    """Lower Cholesky factor, or None when c is not numerically positive definite."""
    chol, info = torch.linalg.cholesky_ex(c)
    return chol if int(info) == 0 else None


def mean_cosine(s: SplitSums, branch: str) -> float:
    """Mean over tokens of cos(h, h + y): near 1 means the branch barely turns the stream."""
    return float(s.branches[branch].cos / s.n)


def _sym(c: torch.Tensor) -> torch.Tensor:
    return (c + c.T) / 2


@dataclass(frozen=True)
class BranchScores:
    """Everything reported for one branch (attn or block) of one layer."""

    cca_bound: float  # ranked on (h, h + y), as the paper does
    nmse: float  # of the map fitted on all blocks, on all blocks
    cosine: float  # mean cos(h, h + y)
    cond: float  # condition number of C_xx
    heldout_nmse: float | None  # map fitted on the first 9/10 of blocks, scored on the last 1/10

    def as_dict(self) -> dict:
        """The report's shape: fields named as nbl/selection/score_fields.py SCORE_FIELDS (loss_rise is
        added by the loss probe)."""
        return asdict(self)


def score_layer(stats: LayerStats, ridge: float = DEFAULT_RIDGE) -> dict[str, BranchScores]:
    """Scores of the branches (modes) the sums hold. They share x = h, so C_xx is decomposed once."""
    total = stats.total()
    ms = {b: layer_moments(stats, b) for b in stats.branches}
    cxx = next(iter(ms.values())).cxx
    cond = condition_number(torch.linalg.eigvalsh(cxx))
    lx = _cholesky(cxx)
    has_held = float(stats.splits["held"].n) >= 2 and float(stats.splits["fit"].n) >= 2
    out = {}
    for b, m in ms.items():
        held = None
        if has_held:
            held = nmse(layer_moments(stats, b, "held"), lmmse(layer_moments(stats, b, "fit"), ridge))
        out[b] = BranchScores(
            cca_bound=cca_bound(with_residual(m), cxx_chol=lx),
            nmse=nmse(m, lmmse(m, ridge)),
            cosine=mean_cosine(total, b),
            cond=cond,
            heldout_nmse=held,
        )
    return out
