"""DeciLM / Nemotron-NAS (`model_type: nemotron-nas`, `DeciLMForCausalLM`) for transformers, shipped with the
outputs of forms linear and fold-attn (nbl/outputs/forms.py). Written for this service from the schema alone; it needs
only torch and transformers, and reads nothing outside its directory.

config.json's `block_configs` gives each decoder layer

    attention: {n_heads_in_group: int | null, no_op: bool, replace_with_linear: bool}
    ffn:       {ffn_mult: float | null, no_op: bool, replace_with_linear: bool}

and a layer computes, on the residual stream h (RMSNorms LN1, LN2 as in Llama):

    attention  normal: h + Attn(LN1 h)     replace_with_linear: h + W·LN1(h)     no_op: h
    ffn        normal: h + MLP(LN2 h)      replace_with_linear: h + W·LN2(h)     no_op: h

with W bias-free, stored as `model.layers.N.self_attn.linear_attn.weight` / `model.layers.N.mlp.linear_mlp.weight`.
The MLP width is ffn_mult·2d/3 rounded up to a multiple of 256 (as vLLM and llama.cpp read it). This file
covers what the service writes: one n_heads_in_group and one ffn_mult for all normal layers. A layer without
attention holds no KV cache. Load with `AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

try:  # transformers >= 5: a cache slot type for layers without attention
    from transformers.cache_utils import DummyLayer
except ImportError:  # pragma: no cover
    DummyLayer = None


class BlockPart(dict):
    """One side of a block config: a dict (saved as JSON) whose keys read as attributes, as vLLM reads them."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class BlockConfig(BlockPart):
    @classmethod
    def of(cls, raw) -> BlockConfig:
        raw = dict(raw)
        return cls(attention=BlockPart(raw.get("attention") or {}), ffn=BlockPart(raw.get("ffn") or {}))


def ffn_width(ffn_mult: float, hidden: int) -> int:
    width = int(2 * ffn_mult * hidden / 3)
    return width + (-width % 256)


class DeciLMConfig(LlamaConfig):
    model_type = "nemotron-nas"

    def __init__(self, *args, **kwargs):
        kwargs.pop("model_type", None)  # the class attribute is the truth
        blocks = [BlockConfig.of(b) for b in kwargs.pop("block_configs", None) or []]
        super().__init__(*args, **kwargs)
        self.block_configs = blocks
        groups = {b.attention.get("n_heads_in_group") for b in blocks if _normal(b.attention)}
        mults = {b.ffn.get("ffn_mult") for b in blocks if _normal(b.ffn)}
        if len(groups) > 1 or len(mults) > 1:
            raise ValueError("this modeling file reads one n_heads_in_group and one ffn_mult for all normal layers")
        if groups:
            self.num_key_value_heads = self.num_attention_heads // groups.pop()
        if mults:
            self.intermediate_size = ffn_width(mults.pop(), self.hidden_size)


def _normal(part) -> bool:
    return not part.get("no_op") and not part.get("replace_with_linear")


class _EmptySlot(DummyLayer if DummyLayer is not None else object):
    """The cache slot of a layer without attention: holds nothing; its length is the first real layer's."""

    def __init__(self, cache):
        super().__init__()
        self._cache = weakref.ref(cache)

    def get_seq_length(self) -> int:
        for layer in getattr(self._cache(), "layers", ()):
            if not isinstance(layer, DummyLayer):
                return layer.get_seq_length()
        return 0


def _no_cache(cache, i: int) -> None:
    layers = getattr(cache, "layers", None)
    if layers is None or DummyLayer is None:
        return
    grow = getattr(cache, "layer_class_to_replicate", None)
    while grow is not None and len(layers) < i:
        layers.append(grow())
    if i < len(layers):
        if not isinstance(layers[i], _EmptySlot):
            layers[i] = _EmptySlot(cache)
    else:
        layers.append(_EmptySlot(cache))


class DeciNoAttention(nn.Module):
    """attention no_op (the layer's LN1 is an identity) or replace_with_linear (W·LN1 h)."""

    def __init__(self, hidden: int, layer_idx: int, linear: bool):
        super().__init__()
        self.layer_idx = layer_idx
        if linear:
            self.linear_attn = nn.Linear(hidden, hidden, bias=False)

    def forward(self, hidden_states, *args, cache=None, past_key_values=None, **kwargs):
        _no_cache(cache if cache is not None else past_key_values, self.layer_idx)
        if hasattr(self, "linear_attn"):
            return self.linear_attn(hidden_states), None
        return torch.zeros_like(hidden_states), None


class DeciNoMLP(nn.Module):
    """ffn no_op (zero) or replace_with_linear (W·LN2 h)."""

    def __init__(self, hidden: int, linear: bool):
        super().__init__()
        if linear:
            self.linear_mlp = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        return self.linear_mlp(x) if hasattr(self, "linear_mlp") else torch.zeros_like(x)


class DeciLMForCausalLM(LlamaForCausalLM):
    config_class = DeciLMConfig

    def __init__(self, config):
        super().__init__(config)
        blocks = config.block_configs
        if len(blocks) != config.num_hidden_layers:
            raise ValueError(f"block_configs has {len(blocks)} entries for {config.num_hidden_layers} layers")
        d = config.hidden_size
        for i, (layer, block) in enumerate(zip(self.model.layers, blocks)):
            attn, ffn = block.attention, block.ffn
            if attn.get("no_op") or attn.get("replace_with_linear"):
                if attn.get("no_op"):
                    layer.input_layernorm = nn.Identity()
                layer.self_attn = DeciNoAttention(d, i, linear=not attn.get("no_op"))
            if ffn.get("no_op") or ffn.get("replace_with_linear"):
                if ffn.get("no_op"):
                    layer.post_attention_layernorm = nn.Identity()
                layer.mlp = DeciNoMLP(d, linear=not ffn.get("no_op"))
