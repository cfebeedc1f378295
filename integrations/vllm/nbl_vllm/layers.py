"""The replaced decoder layers, in vLLM's layer protocol.

vLLM's decoder layers take and return `(hidden_states, residual)`, whose sum is the residual stream
h (the RMSNorms fuse the add); the first layer gets `residual=None` and h in `hidden_states`. Kept
layers are the family's own; a replaced layer is one of these, and neither builds an attention
module, so vLLM allocates no KV cache for it:

    attn + nbl    h' = h + (W h + b), then the layer's MLP block as usual
    attn + drop   h' = h,             then the MLP block
    block + nbl   h'' = h + (W h + b)
    block + drop  h'' = h

Module and parameter names follow the checkpoint (modeling_nbl.py): `self_attn.linear`,
`post_attention_layernorm`, `mlp` for attn; `linear` for block. The maps are plain nn.Linear (no
tensor parallelism: d x d is small) and run the same F.linear as transformers.
"""

from __future__ import annotations

import torch
from torch import nn


def _stream(hidden_states: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    return hidden_states if residual is None else hidden_states + residual  # (T, d)


class NBLMap(nn.Module):
    """y = W h + b (nbl) or 0 (drop), on the raw residual stream h: LN1 is replaced with it."""

    def __init__(self, hidden_size: int, linear: bool, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size, bias=bias) if linear else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(h) if self.linear is None else self.linear(h)  # (T, d)


class NBLAttnLayer(nn.Module):
    """A decoder layer whose LN1 + attention is the map: h' = h + y, then h' + MLP(LN2 h')."""

    def __init__(self, self_attn: NBLMap, post_attention_layernorm: nn.Module, mlp: nn.Module):
        super().__init__()
        self.self_attn = self_attn
        self.post_attention_layernorm = post_attention_layernorm
        self.mlp = mlp

    def forward(self, positions, hidden_states, residual, **kwargs):
        h = _stream(hidden_states, residual)
        y = self.self_attn(h)
        hidden_states, residual = self.post_attention_layernorm(y, h)  # residual = y + h, normed
        return self.mlp(hidden_states), residual


class NBLBlockLayer(nn.Module):
    """A whole decoder layer replaced: returns (y, h), which the next layer adds to h + y."""

    def __init__(self, hidden_size: int, linear: bool, bias: bool = True):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size, bias=bias) if linear else None

    def forward(self, positions, hidden_states, residual, **kwargs):
        h = _stream(hidden_states, residual)
        y = torch.zeros_like(h) if self.linear is None else self.linear(h)
        return y, h
