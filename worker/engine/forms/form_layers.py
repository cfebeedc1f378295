"""The compressed model of a linear or fold output, in memory: the base's modules with some swapped.

This is the reference the written files are checked against (worker/publish/loadcheck.py, the tests),
so it is built from other code than what loads them: nbl's replacement modules, and fold's map applied
at run time to the previous MLP's output (f + T f) rather than folded into its weights.

    linear attn    LN1 kept, self_attn -> W·(.) no bias                      h' = h + W·LN1(h)
    linear block   attention no_op, mlp -> W·(.) no bias, LN2 kept          h'' = h + W·LN2(h)
    fold attn      attention no_op; layer i-1's MLP returns f + T_i f
    fold block     run s..e skipped; layer s-1's MLP returns f + T_s f
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from worker.engine.forms.fold_runs import fold_targets
from worker.engine.modeling.modeling_nbl import NBLAttention, NBLBlock
from worker.engine.scoring.scores import LinearMap


class MapAfter(nn.Module):
    """A module followed by its output's map: f -> f + T f (fold, unfolded)."""

    def __init__(self, inner: nn.Module, t: torch.Tensor):
        super().__init__()
        self.inner = inner
        self.register_buffer("t", t, persistent=False)

    def forward(self, x):
        f = self.inner(x)
        return f + nn.functional.linear(f, self.t.to(f.dtype))


def _linear(d: int, fmap: LinearMap, ref: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(d, d, bias=False).to(device=ref.device, dtype=ref.dtype)
    with torch.no_grad():
        lin.weight.copy_(fmap.weight.to(ref.dtype))
    return lin


def swaps(layer, i: int, plan, maps: dict[int, LinearMap], d: int) -> dict[str, nn.Module] | None:
    """The modules of `layer` (attribute -> new module) that the plan replaces; None: skip the layer."""
    form, mode, chosen = plan.form, plan.mode, set(plan.layers)
    ref = next(layer.parameters())
    new: dict[str, nn.Module] = {}
    if form == "fold" and mode == "block" and i in chosen:
        return None
    if i in chosen:
        if form == "linear" and mode == "attn":
            attn = NBLAttention(d, i, linear=True, bias=False).to(device=ref.device, dtype=ref.dtype)
            attn.linear = _linear(d, maps[i], ref)
            new["self_attn"] = attn
        else:  # attention no_op: linear block, fold attn
            new["input_layernorm"] = nn.Identity()
            new["self_attn"] = NBLAttention(d, i, linear=False)
        if form == "linear" and mode == "block":
            new["mlp"] = _linear(d, maps[i], ref)
    into = {target: key for key, target in fold_targets(form, mode, chosen).items()}
    if i in into:
        new["mlp"] = MapAfter(layer.mlp, maps[into[i]].weight.to(device=ref.device, dtype=ref.dtype))
    return new


@contextmanager
def form_layer(layer, i: int, plan, maps, d: int):
    """`layer` with the plan's swaps for the duration (None: the layer is skipped), then restored."""
    new = swaps(layer, i, plan, maps, d)
    if new is None:
        yield None
        return
    saved = {name: getattr(layer, name) for name in new}
    try:
        for name, module in new.items():
            setattr(layer, name, module)
        yield layer
    finally:
        for name, module in saved.items():
            setattr(layer, name, module)


@torch.no_grad()
def apply_form(model, plan, maps: dict[int, LinearMap]) -> None:
    """Compress a loaded model in place, permanently (tests, benchmarks): skipped layers become a pass-through
    that holds no KV cache."""
    layers, d = model.model.layers, model.config.hidden_size
    for i in range(len(layers)):
        new = swaps(layers[i], i, plan, maps, d)
        if new is None:
            layers[i] = NBLBlock(d, i, linear=False)
            continue
        for name, module in new.items():
            setattr(layers[i], name, module)
