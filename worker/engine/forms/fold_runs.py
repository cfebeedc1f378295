"""Form fold's maths: runs of consecutive blocks, one map per run, and the fold into down_proj.

Layer j computes m = h + attn(LN1 h), then h'' = m + f with f = W_down·act(...) its MLP output. Replacing
what follows f by a map of f:

    attn, layer i      m_i = h_i + a_i ≈ h_i + T f_{i-1}
    block, run s..e    h_{e+1} = h_s + Σ_{j=s..e} Δ_j ≈ h_s + T f_{s-1}

and h_i = m_{i-1} + f_{i-1}, so in both cases the stream after the replaced part is m_{s-1} + (I + T) f_{s-1}:
the map folds exactly into the previous MLP's down projection,

    W_down <- (I + T) W_down        (a down_proj bias b, if any: b <- (I + T) b)

so nothing is left at run time. A run's T regresses its total change Σ Δ_j on f_{s-1}: Σ x xᵀ is layer s's,
Σ y xᵀ adds layer s's Σ Δ_s xᵀ and the lags Σ Δ_j f_{s-1}ᵀ (r = j - s + 1) of layers s+1..e (form_taps.py).
Maps are keyed by the run's first layer s (attn: by the layer), and fold into layer s - 1.
"""

from __future__ import annotations

import torch

from nbl.outputs.forms import layer_error
from worker.engine.scoring.form_scores import lstsq_no_bias
from worker.engine.scoring.scores import DEFAULT_RIDGE, LinearMap, Moments, layer_moments


def runs(layers) -> list[tuple[int, ...]]:
    """Consecutive layers grouped: [1, 2, 5] -> [(1, 2), (5,)]."""
    out: list[list[int]] = []
    for i in sorted(set(layers)):
        if out and out[-1][-1] == i - 1:
            out[-1].append(i)
        else:
            out.append([i])
    return [tuple(r) for r in out]


def run_moments(get, run: tuple[int, ...], mode: str = "block") -> Moments:
    """Moments of (f_{s-1}, Σ_j Δ_j) over all blocks, from the layers' sums (`get(i)` -> LayerStats)."""
    s = run[0]
    first = get(s)
    total = first.total()
    n = float(total.n)
    mx = total.x / n
    sum_y = torch.zeros_like(total.x)
    shift_y = torch.zeros_like(total.x)
    yx = torch.zeros_like(total.xx)
    for j in run:
        st = first if j == s else get(j)
        r = j - s + 1
        if r > 1 and r not in st.lag:
            raise ValueError(f"layer {j}'s sums hold no lag {r}: calibrate with max_run >= {len(run)}")
        sum_y += st.total().branches[mode].y
        shift_y += st.shift_y[mode].double()
        yx += st.total().branches[mode].yx if r == 1 else st.lag[r]
    my = sum_y / n
    return Moments(
        n=n,
        mu_x=first.shift_x.double() + mx,
        mu_y=shift_y + my,
        cxx=first.total().xx / n - torch.outer(mx, mx),
        cyy=None,
        cyx=yx / n - torch.outer(my, mx),
        tr_cyy=float("nan"),
    )


def fit_form_maps(get, form: str, mode: str, layers, ridge: float = DEFAULT_RIDGE) -> dict[int, LinearMap]:
    """The maps of a linear or fold output: per layer, or per fold run of blocks (keyed by its first layer)."""
    why = layer_error(form, layers)
    if why is not None:
        raise ValueError(why)
    if form == "fold" and mode == "block":
        return {r[0]: lstsq_no_bias(run_moments(get, r, mode), ridge) for r in runs(layers)}
    return {i: lstsq_no_bias(layer_moments(get(i), mode), ridge) for i in layers}


def folded(down: torch.Tensor, t: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """(I + T) applied along `down`'s dimension `dim` (the hidden size's), in float64, returned in its dtype, at least
    float32: a 16-bit base's product rounded to 16 bits here would differ from the maps the model computes with
    even when the output is saved in float32 (the load check saw 0.011-0.027 on SmolLM2 in bfloat16); the writer
    rounds once, to the output's dtype. A (d, inter) W_down or a (d,) bias (dim 0), or a stacked experts' tensor."""
    w = down.double().movedim(dim, 0)
    shape = w.shape
    w = w.reshape(shape[0], -1)
    out = (w + t.double().to(w.device) @ w).reshape(shape).movedim(0, dim)
    return out.to(torch.promote_types(down.dtype, torch.float32))


def fold_targets(form: str, mode: str, layers) -> dict[int, int]:
    """The layer whose down_proj each map folds into: map key -> key - 1."""
    keys = [r[0] for r in runs(layers)] if mode == "block" else sorted(layers)
    return {k: k - 1 for k in keys} if form == "fold" else {}
