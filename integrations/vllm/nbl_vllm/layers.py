"""The replaced decoder layers, in vLLM's layer protocol.

vLLM's decoder layers take and return `(hidden_states, residual)`, whose sum is the residual stream
h (the RMSNorms fuse the add); the first layer gets `residual=None` and h in `hidden_states`.
Kept layers are the family's own; a replaced one is built here, and neither form keeps an attention
module, so vLLM allocates no KV cache for it:

    attn + nbl    h' = h + (W h + b), then the layer's MLP branch as usual
    attn + drop   h' = h,             then the MLP branch
    block + nbl   h'' = h + (W h + b)
    block + drop  h'' = h

Attn mode keeps the family's own layer and its forward, with the modules of the attention branch
swapped, as modeling_nbl.apply_nbl does in transformers: the norms of the branch pass h through and the
attention module is the map. So the MLP branch (dense, a mixture of experts, Gemma's norms around it)
is the family's own code and names, whatever it is. Block mode replaces the whole layer.

Module and parameter names follow the checkpoint (modeling_nbl.py): `self_attn.linear` for attn,
`linear` for block. The maps are plain nn.Linear (no tensor parallelism: d x d is small) and run the
same F.linear as transformers.
"""

from __future__ import annotations

import functools

import torch
from torch import nn


def _stream(hidden_states: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    return hidden_states if residual is None else hidden_states + residual  # (T, d)


class NBLMap(nn.Module):
    """Stands in for the attention module: y = W h + b (nbl) or 0 (drop) on what the branch's (now passing)
    norm gave it, the raw residual stream h. Called as the family calls its attention: h by keyword
    (`hidden_states=`) or first (gpt-oss's `attn(hidden_states, positions)`)."""

    def __init__(self, hidden_size: int, linear: bool, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size, bias=bias) if linear else None

    def forward(self, *args, hidden_states: torch.Tensor | None = None, **kwargs) -> torch.Tensor:
        h = args[0] if hidden_states is None else hidden_states
        return torch.zeros_like(h) if self.linear is None else self.linear(h)  # (T, d)


class PassNorm(nn.Module):
    """A norm of the replaced branch: h unchanged; with the residual (vLLM's fused add-and-norm) the sum h,
    as both the normed output and the new residual."""

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            return x
        h = x + residual
        return h, h


def replace_branch(layer: nn.Module, branch: tuple[str, ...], nbl_map: NBLMap, prefix: str, vllm_config) -> None:
    """Swap the attention branch of a built family layer (`branch`: its modules, the attention one ending in
    `attn`) for the map, and unregister the attention that was built with it (vLLM sizes the KV cache from
    the attention layers registered in its static forward context)."""
    for name in branch:
        if name.endswith("attn"):
            setattr(layer, name, nbl_map)
            context = vllm_config.compilation_config.static_forward_context
            for key in [k for k in context if k.startswith(f"{prefix}.{name}.")]:
                del context[key]
        else:
            setattr(layer, name, PassNorm())


class NBLBlockLayer(nn.Module):
    """A whole decoder layer replaced: returns (y, h), which the next layer adds to h + y.

    Made a subclass of the family's layer (block_layer_type) without running its __init__: vLLM's MoE models
    assert that every layer is their decoder layer type and read its `mlp` (None here: a replaced block has no
    experts)."""

    mlp = None
    hidden_first = False  # gpt-oss calls its layers (hidden_states, positions, residual)

    def __init__(self, hidden_size: int, linear: bool, bias: bool = True):
        nn.Module.__init__(self)  # not the family layer's: nothing of it is built
        self.linear = nn.Linear(hidden_size, hidden_size, bias=bias) if linear else None

    def forward(self, first, second, residual, **kwargs):
        h = _stream(first if self.hidden_first else second, residual)
        y = torch.zeros_like(h) if self.linear is None else self.linear(h)
        return y, h


@functools.cache
def block_layer_type(family_layer: type, hidden_first: bool = False) -> type:
    name = f"NBLBlock{family_layer.__name__}"
    return type(name, (NBLBlockLayer, family_layer), {"hidden_first": hidden_first, "__module__": __name__})
