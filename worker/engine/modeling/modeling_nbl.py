"""Neural Block Linearization (arXiv 2505.21077): the modeling file shipped with every compressed model.

This one file is copied next to `config.json` of each output directory, so it must need nothing but
torch and transformers, and must read nothing from outside its directory: the linear maps travel in
`model.safetensors` like every other weight.

A compressed model is its base family's `*ForCausalLM` with some decoder layers rewired, as recorded
in `config.nbl = {"mode", "method", "layers"}`:

    attn + nbl    h' = h + (W h + b)          LN1 and attention replaced; LN2 and the MLP stay
    attn + drop   h' = h                      attention removed (residual only)
    block + nbl   h'' = h + (W h + b)         the whole decoder layer replaced
    block + drop  h'' = h                     the whole decoder layer removed

A replaced layer holds no KV cache: its cache slot becomes an `EmptySlot` (transformers' `DummyLayer`),
so it stores nothing, and its length is that of the first layer that still has attention. That is what
keeps generation right when layer 0 is replaced: transformers >= 5.25 reads `get_seq_length()` from
layer 0 alone, and a bare `DummyLayer` has no length.

Load with `AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)`.
"""

from __future__ import annotations

import weakref

import torch
import transformers
from torch import nn

try:  # transformers >= 5 has a cache slot type for layers without attention
    from transformers.cache_utils import DummyLayer
except ImportError:  # pragma: no cover - older transformers
    DummyLayer = None

if DummyLayer is not None:

    class EmptySlot(DummyLayer):
        """A replaced layer's cache slot: it holds nothing, and its length is the first real layer's.

        The cache is held weakly: the slot lives in the cache's own list.
        """

        def __init__(self, cache):
            super().__init__()
            self._cache = weakref.ref(cache)

        def get_seq_length(self) -> int:
            cache = self._cache()
            for layer in getattr(cache, "layers", ()):
                if not isinstance(layer, DummyLayer):
                    return layer.get_seq_length()
            return 0


# family (base config `model_type`) -> (config class, causal LM class in transformers, the attention branch's
# modules input to output). Families whose decoder layer under `model.layers` is `h + attention branch(h)`, then
# `+ mlp(LN2 h')`; the branch is `input_layernorm`, `self_attn` (and Gemma's `post_attention_layernorm`).
# The same entries as nbl/families.py, which this file may not import (a test holds the two equal).
ATTN = ("input_layernorm", "self_attn")
GEMMA_ATTN = ("input_layernorm", "self_attn", "post_attention_layernorm")
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", ATTN),
    "mistral": ("MistralConfig", "MistralForCausalLM", ATTN),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", ATTN),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", ATTN),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", ATTN),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", ATTN),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", ATTN),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", ATTN),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", ATTN),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", ATTN),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", GEMMA_ATTN),
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", GEMMA_ATTN),
}


def family_of(config) -> str:
    """A base or compressed model's family: its config's model_type, without our `nbl_` prefix."""
    return str(config.model_type).removeprefix("nbl_")


def attn_branch(config) -> tuple[str, ...]:
    """The modules of a layer's attention branch, input to output, that attention NBL replaces."""
    return FAMILIES[family_of(config)][2]


def branch_end(layer: nn.Module, config) -> nn.Module:
    """The last module of a layer's attention branch: its output is what the branch adds to the residual."""
    return getattr(layer, attn_branch(config)[-1])


MODES = ("attn", "block")
METHODS = ("nbl", "drop")
PLAN_KEYS = ("mode", "method", "layers", "bias")


def _release_cache_slot(cache, layer_idx: int) -> None:
    """Mark this layer's KV-cache slot as holding nothing.

    Called on every forward of a replaced layer, before any later step asks the cache for its length:
    a slot that never receives keys must not be the one `get_seq_length()` reads.
    """
    layers = getattr(cache, "layers", None)
    if layers is None or DummyLayer is None:
        return
    if layer_idx < len(layers):
        if not isinstance(layers[layer_idx], EmptySlot):
            layers[layer_idx] = EmptySlot(cache)
        return
    # A lazily grown cache: pad with the cache's own layer type, then mark ours.
    make = getattr(cache, "layer_class_to_replicate", None)
    while make is not None and len(layers) < layer_idx:
        layers.append(make())
    layers.append(EmptySlot(cache))


class NBLAttention(nn.Module):
    """Stands in for the attention branch (`input_layernorm` + `self_attn`, and Gemma's norm after it): returns
    W h + b (nbl) or 0 (drop).

    The decoder layer keeps its own residual add, so with the branch's norms set to identity this gives
    h' = h + W h + b on the raw residual stream h, which is the map fitted by calibration.
    """

    def __init__(self, hidden_size: int, layer_idx: int, linear: bool = True, bias: bool = True):
        super().__init__()
        self.layer_idx = layer_idx
        self.linear = nn.Linear(hidden_size, hidden_size, bias=bias) if linear else None

    def forward(self, hidden_states, *args, cache=None, past_key_values=None, **kwargs):
        _release_cache_slot(cache if cache is not None else past_key_values, self.layer_idx)
        if self.linear is None:
            return torch.zeros_like(hidden_states), None
        return self.linear(hidden_states), None  # (B, T, d)


class NBLBlock(nn.Module):
    """Stands in for a whole decoder layer: h'' = h + W h + b (nbl) or h (drop)."""

    def __init__(self, hidden_size: int, layer_idx: int, linear: bool = True, bias: bool = True):
        super().__init__()
        self.layer_idx = layer_idx
        self.linear = nn.Linear(hidden_size, hidden_size, bias=bias) if linear else None

    def forward(self, hidden_states, *args, cache=None, past_key_values=None, **kwargs):
        _release_cache_slot(cache if cache is not None else past_key_values, self.layer_idx)
        if self.linear is None:
            return hidden_states
        out = self.linear(hidden_states)  # (B, T, d)
        # under device_map a hook may run the map on another device than the residual came from
        return hidden_states.to(out.device) + out


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_plan(plan, num_layers: int) -> None:
    """Raise ValueError unless `plan` (config.json's `nbl`) names a known mode and method, distinct
    in-range layer indices and a boolean bias, and nothing else. Both loaders run this function, word for
    word (transformers: modeling_nbl.py; vLLM: nbl_vllm/plan_rules.py): a checkpoint loads in both or neither."""
    if not isinstance(plan, dict):
        raise ValueError(f"config.nbl must be an object {{mode, method, layers}}, got {_shown(plan)}")
    unknown = sorted(str(key) for key in plan if key not in PLAN_KEYS)
    if unknown:
        raise ValueError(f"config.nbl has unknown keys {unknown}; the known ones are {PLAN_KEYS}")
    if plan.get("mode") not in MODES:
        raise ValueError(f"nbl.mode must be one of {MODES}, got {_shown(plan.get('mode'))}")
    if plan.get("method") not in METHODS:
        raise ValueError(f"nbl.method must be one of {METHODS}, got {_shown(plan.get('method'))}")
    layers = plan.get("layers")
    if (
        not isinstance(layers, list)
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers)
        or len(set(layers)) != len(layers)
        or not all(0 <= i < num_layers for i in layers)
    ):
        raise ValueError(
            f"nbl.layers must be a list of distinct layer indices in [0, {num_layers}), got {_shown(layers)}"
        )
    if not isinstance(plan.get("bias", True), bool):
        raise ValueError(f"nbl.bias must be true or false, got {_shown(plan['bias'])}")


def apply_nbl(model: nn.Module, plan: dict) -> nn.Module:
    """Rewire the decoder layers named in `plan` in place; new maps get the model's dtype/device.

    The maps are left uninitialised here: their weights come from the state dict (when loading) or
    from the LMMSE fit (when compressing).
    """
    decoder = model.model
    validate_plan(plan, len(decoder.layers))
    d = model.config.hidden_size
    linear = plan["method"] == "nbl"
    bias = plan.get("bias", True)
    ref = decoder.embed_tokens.weight
    for i in plan["layers"]:
        layer = decoder.layers[i]
        if plan["mode"] == "attn":
            for name in attn_branch(model.config):  # the norms of the branch go, the map takes attention's place
                setattr(
                    layer,
                    name,
                    nn.Identity()
                    if name != "self_attn"
                    else NBLAttention(d, i, linear, bias).to(device=ref.device, dtype=ref.dtype),
                )
        else:
            decoder.layers[i] = NBLBlock(d, i, linear, bias).to(device=ref.device, dtype=ref.dtype)
    return model


def _family_classes(family: str):
    config_name, model_name, _ = FAMILIES[family]
    base_config = getattr(transformers, config_name, None)
    base_model = getattr(transformers, model_name, None)
    if base_config is None or base_model is None:
        return None
    nbl_type = f"nbl_{family}"
    _share_weight_conversion(family, nbl_type)

    class Config(base_config):
        model_type = nbl_type

        def __init__(self, *args, **kwargs):
            kwargs.pop("model_type", None)  # the class attribute is the truth
            super().__init__(*args, **kwargs)

    class ForCausalLM(base_model):
        config_class = Config

        def __init__(self, config):
            super().__init__(config)
            apply_nbl(self, getattr(config, "nbl", None))  # none: refused by validate_plan

    camel = model_name.replace("ForCausalLM", "")
    Config.__name__ = Config.__qualname__ = f"NBL{camel}Config"
    ForCausalLM.__name__ = ForCausalLM.__qualname__ = f"NBL{camel}ForCausalLM"
    Config.__module__ = ForCausalLM.__module__ = __name__
    return Config, ForCausalLM


def _share_weight_conversion(family: str, nbl_type: str) -> None:
    """Load and save `nbl_<family>` checkpoints as the family's: transformers >= 5 stacks a MoE layer's experts
    into one parameter and converts from (and back to) the per-expert checkpoint by a table keyed by
    model_type, which it skips for remote code unless the type is registered. Without this, a Mixtral or
    Qwen3-MoE output would load with its experts left at their random initial values."""
    try:
        from transformers import conversion_mapping as cm
    except ImportError:  # pragma: no cover - transformers < 5 has no conversion and stores experts as modules
        return
    mapping = cm.get_checkpoint_conversion_mapping(family)
    if mapping is not None and cm.get_checkpoint_conversion_mapping(nbl_type) is None:
        cm.register_checkpoint_conversion_mapping(nbl_type, mapping)


# One (config, model) class pair per family that the installed transformers has, named e.g.
# NBLLlamaConfig / NBLLlamaForCausalLM; config.json's auto_map points at them.
for _family in FAMILIES:
    _classes = _family_classes(_family)
    if _classes is not None:
        globals()[_classes[0].__name__] = _classes[0]
        globals()[_classes[1].__name__] = _classes[1]


def class_names(family: str) -> tuple[str, str]:
    """(config class, model class) names in this module for a base family, for auto_map."""
    camel = FAMILIES[family][1].replace("ForCausalLM", "")
    return f"NBL{camel}Config", f"NBL{camel}ForCausalLM"
