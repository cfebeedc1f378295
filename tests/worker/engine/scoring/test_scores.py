"""The scores and the LMMSE map, against NumPy references on stacked data."""

import numpy as np
import pytest
import torch

from worker.engine.calibration.stats import LayerAccumulator
from worker.engine.scoring import scores


def _accumulate(x, ys, holdout_rows=0, product_dtype=torch.float64, batch=97):
    """Stream rows of x (N, d) and ys {branch: (N, d)} through an accumulator in uneven batches."""
    acc = LayerAccumulator(x.shape[1], "cpu", product_dtype)
    n_fit = x.shape[0] - holdout_rows
    for lo, hi, split in [(0, n_fit, "fit"), (n_fit, x.shape[0], "held")]:
        for s in range(lo, hi, batch):
            e = min(s + batch, hi)
            acc.add(x[s:e], {b: y[s:e] for b, y in ys.items()}, split)
    return acc.stats


def _np_cca_bound(x, y):
    """Σ(1 - ρ²) with ρ from NumPy on stacked data (full-rank case)."""
    xc, yc = x - x.mean(0), y - y.mean(0)
    cxx, cyy, cyx = xc.T @ xc / len(x), yc.T @ yc / len(x), yc.T @ xc / len(x)

    def isqrt(c):
        w, v = np.linalg.eigh(c)
        return (v / np.sqrt(w)) @ v.T

    rho = np.linalg.svd(isqrt(cyy) @ cyx @ isqrt(cxx), compute_uv=False)
    return float(np.sum(1 - np.clip(rho, 0, 1) ** 2))


def test_exactly_linear_branch_is_recovered_and_scores_zero():
    g = torch.Generator().manual_seed(0)
    d, n = 16, 4000
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * 3 + 5
    w_true = torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5
    b_true = torch.randn(d, generator=g, dtype=torch.float64)
    y = x @ w_true.T + b_true
    st = _accumulate(x, {"attn": y, "block": y})
    m = scores.layer_moments(st, "attn")
    f = scores.lmmse(m, ridge=0.0)
    assert torch.allclose(f.weight, w_true, atol=1e-6)
    assert torch.allclose(f.bias, b_true, atol=1e-6)
    assert scores.nmse(m, f) < 1e-10
    # CCA on (x, x + y): every canonical correlation is 1
    assert scores.cca_bound(scores.with_residual(m)) < 1e-6


def test_moments_scores_and_heldout_match_numpy_reference():
    rng = np.random.default_rng(1)
    d, n, hold = 12, 3000, 300
    x = rng.normal(size=(n, d)) @ rng.normal(size=(d, d)) + 50.0  # large common mean
    y = np.tanh(x @ rng.normal(size=(d, d)) / 10) + 0.1 * rng.normal(size=(n, d))
    st = _accumulate(torch.from_numpy(x), {"attn": torch.from_numpy(y), "block": torch.from_numpy(-y)}, hold)

    m = scores.layer_moments(st, "attn")
    np.testing.assert_allclose(m.mu_x.numpy(), x.mean(0), rtol=1e-10)
    np.testing.assert_allclose(m.cxx.numpy(), np.cov(x.T, bias=True), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(m.cyx.numpy(), ((y - y.mean(0)).T @ (x - x.mean(0))) / n, atol=1e-10)

    # LMMSE equals NumPy least squares with an intercept
    f = scores.lmmse(m, ridge=0.0)
    xa = np.hstack([x, np.ones((n, 1))])
    coef = np.linalg.lstsq(xa, y, rcond=None)[0]
    np.testing.assert_allclose(f.weight.numpy(), coef[:d].T, atol=1e-7)
    np.testing.assert_allclose(f.bias.numpy(), coef[d], atol=1e-6)
    resid = y - xa @ coef
    assert scores.nmse(m, f) == pytest.approx(np.sum(resid**2) / np.sum((y - y.mean(0)) ** 2), rel=1e-8)

    # CCA bound on the post-residual pair (x, x + y)
    assert scores.cca_bound(scores.with_residual(m)) == pytest.approx(_np_cca_bound(x, x + y), rel=1e-7)

    # held-out: fit on the first n - hold rows, score on the last hold rows
    f_fit = scores.lmmse(scores.layer_moments(st, "attn", "fit"), ridge=0.0)
    coef_fit = np.linalg.lstsq(xa[:-hold], y[:-hold], rcond=None)[0]
    err = y[-hold:] - xa[-hold:] @ coef_fit
    want = np.sum(err**2) / np.sum((y[-hold:] - y[-hold:].mean(0)) ** 2)
    assert scores.nmse(scores.layer_moments(st, "attn", "held"), f_fit) == pytest.approx(want, rel=1e-7)
    assert scores.score_layer(st, ridge=0.0)["attn"].heldout_nmse == pytest.approx(want, rel=1e-7)


def test_float32_products_about_a_shift_match_float64():
    """Per-batch float32 products are allowed because, about a shift, they equal float64 ones."""
    rng = np.random.default_rng(2)
    d, n = 32, 6000
    x = (rng.normal(size=(n, d)) * 0.5 + rng.normal(size=d) * 200).astype(np.float32)  # massive mean
    y = (x @ rng.normal(size=(d, d)).astype(np.float32) * 0.01 + rng.normal(size=(n, d))).astype(np.float32)
    ys = {"attn": torch.from_numpy(y), "block": torch.from_numpy(y * 2)}
    s32 = scores.score_layer(_accumulate(torch.from_numpy(x), ys, 600, torch.float32, batch=512))
    s64 = scores.score_layer(_accumulate(torch.from_numpy(x), ys, 600, torch.float64, batch=512))
    for b in ("attn", "block"):
        for key in ("cca_bound", "nmse", "cosine", "heldout_nmse"):
            assert getattr(s32[b], key) == pytest.approx(getattr(s64[b], key), rel=1e-4), (b, key)


def test_rank_deficient_inputs_stay_finite():
    """A constant input direction makes C_xx singular: the ridge and eigenvalue floor keep it finite."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 8))
    x[:, 3] = 1.0
    y = x @ rng.normal(size=(8, 8))
    st = _accumulate(torch.from_numpy(x), {"attn": torch.from_numpy(y), "block": torch.from_numpy(y)})
    sc = scores.score_layer(st)["attn"]
    assert np.isfinite(sc.cca_bound) and np.isfinite(sc.nmse)
    assert sc.cond == float("inf") or sc.cond > 1e12
    assert sc.nmse < 1e-6


def test_cholesky_cca_bound_equals_the_eigendecomposition_definition():
    """The fast Frobenius-norm form and method.md's definition (eigh + SVD) give the same bound."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2000, 10)) @ rng.normal(size=(10, 10))
    y = np.sin(x) @ rng.normal(size=(10, 10)) + 0.3 * rng.normal(size=(2000, 10))
    st = _accumulate(torch.from_numpy(x), {"attn": torch.from_numpy(y), "block": torch.from_numpy(y)})
    m = scores.with_residual(scores.layer_moments(st, "attn"))
    rho = scores.canonical_correlations(m)
    assert scores.cca_bound(m) == pytest.approx(float(torch.sum(1 - rho**2)), rel=1e-9)


def test_nmse_of_a_branch_without_variance_is_0_when_reproduced_else_inf():
    """A branch that outputs a constant (zeroed weights) has tr C_yy = 0: no division by zero; its bias
    reproduces it exactly (0), any other map is as bad as a score can be (inf)."""
    from worker.engine.scoring.scores import LinearMap, Moments, lmmse, nmse

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 3, generator=g, dtype=torch.float64)
    mu_x, cxx = x.mean(0), torch.cov(x.T, correction=0)
    for mu_y in (torch.zeros(2, dtype=torch.float64), torch.tensor([1.5, -2.0], dtype=torch.float64)):
        m = Moments(
            n=64.0,
            mu_x=mu_x,
            mu_y=mu_y,
            cxx=cxx,
            cyy=torch.zeros(2, 2, dtype=torch.float64),
            cyx=torch.zeros(2, 3, dtype=torch.float64),
            tr_cyy=0.0,
        )
        assert nmse(m, lmmse(m)) == 0.0
        off = LinearMap(weight=torch.zeros(2, 3, dtype=torch.float64), bias=mu_y + 1.0, ridge=0.0)
        assert nmse(m, off) == float("inf")


def test_the_sums_read_mid_way_are_whole_and_later_batches_still_count():
    """LayerAccumulator adds Σxxᵀ and Σyyᵀ on their upper blocks and mirrors them when `stats` is read:
    a read between batches sees whole symmetric sums, and batches added after it still count."""
    d = 300  # wide enough for stats.gram to work in blocks
    g = torch.Generator().manual_seed(5)
    batches = [(torch.randn(40, d, generator=g) + 1.0, torch.randn(40, d, generator=g)) for _ in range(3)]
    acc, ref = (LayerAccumulator(d, "cpu", branches=("attn",)) for _ in range(2))
    for h, y in batches[:2]:
        acc.add(h, {"attn": y}, "fit")
    mid = acc.stats.splits["fit"].xx.clone()
    assert torch.equal(mid, mid.T)
    acc.add(batches[2][0], {"attn": batches[2][1]}, "fit")
    for h, y in batches:
        ref.add(h, {"attn": y}, "fit")
    xx, yy = acc.stats.splits["fit"].xx, acc.stats.yy["attn"]
    assert not torch.equal(xx, mid) and torch.equal(xx, ref.stats.splits["fit"].xx) and torch.equal(xx, xx.T)
    assert torch.equal(yy, yy.T)
    x = torch.cat([h for h, _ in batches]).double() - acc.stats.shift_x
    torch.testing.assert_close(xx, x.T @ x, rtol=1e-5, atol=1e-3)
