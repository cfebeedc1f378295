"""Model surgery: put fitted maps (or nothing, for DROP) in place of attention or whole blocks.

The replacement modules and the rewiring live in modeling_nbl.py, the file shipped with every
output, so the in-memory compressed model and the reloaded one are built by the same code.
`replaced(...)` swaps temporarily and restores the original modules, so one loaded base model
serves several plans (several k, the loss probe) without a copy.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from worker.engine.modeling.modeling_nbl import apply_nbl, attn_branch
from worker.engine.scoring.scores import LinearMap


@dataclass(frozen=True)
class Plan:
    mode: str  # attn | block
    method: str  # nbl | drop
    layers: tuple[int, ...]
    form: str = "nbl"  # nbl | linear | fold (nbl/outputs/forms.py); linear and fold: form_layers.py, saving_forms.py

    def as_config(self) -> dict:
        return {"mode": self.mode, "method": self.method, "layers": sorted(self.layers), "bias": True}


def _load_maps(model, plan: Plan, maps: dict[int, LinearMap]) -> None:
    if plan.method != "nbl":
        return
    layers = model.model.layers
    for i in plan.layers:
        lin = layers[i].self_attn.linear if plan.mode == "attn" else layers[i].linear
        lin.weight.copy_(maps[i].weight.to(lin.weight.dtype))
        lin.bias.copy_(maps[i].bias.to(lin.bias.dtype))


@torch.no_grad()
def apply(model, plan: Plan, maps: dict[int, LinearMap] | None = None) -> None:
    """Compress `model` in place, permanently."""
    apply_nbl(model, plan.as_config())
    _load_maps(model, plan, maps or {})
    model.config.nbl = plan.as_config()


@contextmanager
def replaced(model, plan: Plan, maps: dict[int, LinearMap] | None = None):
    """Compress `model` for the duration of the block, then put the original modules back."""
    layers = model.model.layers
    branch = attn_branch(model.config)
    saved = {i: (layers[i], {name: getattr(layers[i], name) for name in branch}) for i in plan.layers}
    had_nbl = getattr(model.config, "nbl", None)
    try:
        apply(model, plan, maps)
        yield model
    finally:
        for i, (layer, modules) in saved.items():
            for name, module in modules.items():
                setattr(layer, name, module)
            layers[i] = layer
        if had_nbl is None:
            if hasattr(model.config, "nbl"):
                del model.config.nbl
        else:
            model.config.nbl = had_nbl
