"""What each layer's sums regress, per form (nbl/outputs/forms.py), read from the same calibration pass.

For layer i with input h, attention branch a, MLP output f_i and block change Δ = h'' - h:

    form    mode   regressor x            target y   cosine stream
    nbl     any    h                      a | Δ      h   (calibrate.py's own path)
    linear  attn   LN1(h)                 a          h
    linear  block  LN2(h)                 Δ          h   (attention no_op: the MLP's norm sees h)
    fold    attn   f_{i-1}                a          h
    fold    block  f_{i-1}                Δ          h   + Σ Δ f_{i-r}ᵀ for r = 2..max_run (lags)

Layer 0 has no f_{-1}: under fold its sums regress on h and are never used (not eligible). A fold
run of blocks s..e is fitted from layer s's Σxxᵀ and the lags of layers s..e (fold_runs.py), so the
MLP outputs of the last `max_run` layers stay in the hidden cache, one entry per (layer, batch), and
leave it as soon as no later layer needs them.
"""

from __future__ import annotations

import torch

from worker.engine.calibration.activations import HiddenCache
from worker.engine.modeling.modeling_nbl import branch_end


class FormTaps:
    def __init__(self, form: str, mode: str, max_run: int, cache: HiddenCache, config):
        self.form, self.mode, self.cache, self.config = form, mode, cache, config
        # lags r = 2..max_run, fold block only (r = 1 is the layer's own Σyxᵀ)
        self.lags = tuple(range(2, max_run + 1)) if (form, mode) == ("fold", "block") else ()
        self.shift_x: dict[int, torch.Tensor] = {}  # layer -> the shift its x (f of the layer before) is about
        self._mlp: list[torch.Tensor] = []
        self._attn: list[torch.Tensor] = []

    def hooks(self, layer) -> list:
        """Forward hooks capturing what this form needs of `layer`'s forward, one batch at a time."""
        out = []
        if self.mode == "attn":
            out.append(
                branch_end(layer, self.config).register_forward_hook(lambda m, a, o: self._attn.append(_first(o)))
            )
        if self.form == "fold":
            out.append(layer.mlp.register_forward_hook(lambda m, a, o: self._mlp.append(_first(o))))
        return out

    def pairs(self, i: int, b: int, layer, h: torch.Tensor, out: torch.Tensor, device):
        """(x, ys, lags) of batch b at layer i, flattened to (N, d); stores f_i for later layers."""
        d = h.shape[-1]
        y = self._attn.pop() if self.mode == "attn" else out - h
        if self.form == "linear":
            norm = layer.input_layernorm if self.mode == "attn" else layer.post_attention_layernorm
            x = norm(h)
        elif i == 0:  # fold: nothing to fold into; regress on h, unused
            x = h
        else:
            x = self.cache.get(("f", i - 1, b)).to(device)
        lags = {}
        for r in self.lags:
            if i - r >= 0 and i - r + 1 in self.shift_x:
                f = self.cache.get(("f", i - r, b)).to(device).reshape(-1, d)
                lags[r] = f.double() - self.shift_x[i - r + 1].to(f.device)  # cast to the products' dtype later
        if self.form == "fold":
            self.cache.put(("f", i, b), self._mlp.pop())
        return x.reshape(-1, d), {self.mode: y.reshape(-1, d)}, lags

    def done(self, i: int, acc, num_batches: int) -> None:
        """After layer i: remember its x shift, drop the MLP outputs no later layer reads."""
        if self.form != "fold" or acc.stats is None:
            return
        if i > 0:
            self.shift_x[i] = acc.stats.shift_x.detach()
        old = i - max(self.lags, default=1)
        if old >= 0:
            for b in range(num_batches):
                self.cache.pop(("f", old, b))


def _first(o):
    return o[0] if isinstance(o, tuple) else o
