"""`NBL<Family>ForCausalLM` for vLLM: the family's model, with the planned layers built by layers.py.

Each family's model builds its decoder layers through a constructor, but how we get ours in differs by
family in vLLM:

    llama, mistral, phi3, olmoe   ForCausalLM(layer_type=...) (vLLM's Phi-3 is its Llama, q/k/v and gate/up fused)
    qwen2, qwen3_moe              Model(decoder_layer_type=...), their ForCausalLM builds the Model by its
                                  module-level name, which points at our Model while it is built
    qwen3                         Model.decoder_layer_type, the same way
    gpt_oss                       Model.block_cls, the same way
    mixtral, qwen2_moe, gemma2,   the Model builds the layer by its module-level name, which points at our
    gemma3_text                   constructor while the Model is built (Mixtral's ForCausalLM then checks
                                  each layer's type by that name)

`layer_factory` gives one constructor for all: the family's own layer for a kept index, ours for a
replaced one (the index is the last part of the layer's prefix, `model.layers.{i}`).
"""

from __future__ import annotations

from contextlib import contextmanager

from vllm.config import get_current_vllm_config
from vllm.model_executor.models import (
    gemma2,
    gemma3,
    gpt_oss,
    llama,
    mistral,
    mixtral,
    olmoe,
    phi3,
    qwen2,
    qwen2_moe,
    qwen3,
    qwen3_moe,
)

from .layers import NBLMap, block_layer_type, replace_branch
from .loading import check_loaded
from .plan_rules import checked_plan

ATTN = ("input_layernorm", "self_attn")  # a layer's attention branch in vLLM's module names, input to output
GEMMA_ATTN = (*ATTN, "post_attention_layernorm")  # Gemma's norm after attention is in the branch (nbl/families.py)


def layer_factory(family_layer, branch: tuple[str, ...] = ATTN, hidden_first: bool = False):
    """A decoder-layer constructor taking the family's own arguments (`hidden_first`: the family calls its
    layers with hidden_states before positions)."""

    def build(*args, **kw):
        prefix = kw["prefix"]
        config = kw.get("config") or get_current_vllm_config().model_config.hf_config
        plan = checked_plan(config)  # the transformers loader's rules: a bad plan is refused, not guessed
        if int(prefix.rsplit(".", 1)[-1]) not in plan["layers"]:
            return family_layer(*args, **kw)
        d, linear, bias = config.hidden_size, plan["method"] == "nbl", plan.get("bias", True)
        if plan["mode"] == "block":
            return block_layer_type(family_layer, hidden_first)(d, linear, bias)
        layer = family_layer(*args, **kw)
        replace_branch(layer, branch, NBLMap(d, linear, bias), prefix, get_current_vllm_config())
        return layer

    return build


@contextmanager
def _module_name(module, name: str, value):
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


class _Checked:
    """Loads like the family, then checks that every checkpoint tensor found a parameter and every
    parameter was loaded (vLLM's loader skips unexpected `.bias` tensors silently)."""

    renames = False  # the family's loader renames checkpoint tensors by its hf_to_vllm_mapper beyond stacking

    def load_weights(self, weights):
        seen: list[str] = []
        loaded = super().load_weights((seen.append(name) or (name, w)) for name, w in weights)
        if self.renames:
            seen = [self.hf_to_vllm_mapper.map_name(name) or name for name in seen]
        check_loaded(self, seen, loaded)
        return loaded


class NBLLlamaForCausalLM(_Checked, llama.LlamaForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layer_type = layer_factory(llama.LlamaDecoderLayer)
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=layer_type)


class NBLMistralForCausalLM(_Checked, mistral.MistralForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layer_type = layer_factory(mistral.MistralDecoderLayer)
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=layer_type)


class NBLPhi3ForCausalLM(_Checked, phi3.Phi3ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layer_type = layer_factory(llama.LlamaDecoderLayer)
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=layer_type)


class NBLOlmoeForCausalLM(_Checked, olmoe.OlmoeForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layer_type = layer_factory(olmoe.OlmoeDecoderLayer)
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=layer_type)


class NBLQwen2Model(qwen2.Qwen2Model):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layers = layer_factory(qwen2.Qwen2DecoderLayer)
        super().__init__(vllm_config=vllm_config, prefix=prefix, decoder_layer_type=layers)


class NBLQwen2ForCausalLM(_Checked, qwen2.Qwen2ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        with _module_name(qwen2, "Qwen2Model", NBLQwen2Model):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLQwen3Model(qwen3.Qwen3Model):
    decoder_layer_type = staticmethod(layer_factory(qwen3.Qwen3DecoderLayer))


class NBLQwen3ForCausalLM(_Checked, qwen3.Qwen3ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        with _module_name(qwen3, "Qwen3Model", NBLQwen3Model):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLQwen3MoeModel(qwen3_moe.Qwen3MoeModel):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layers = layer_factory(qwen3_moe.Qwen3MoeDecoderLayer)
        super().__init__(vllm_config=vllm_config, prefix=prefix, decoder_layer_type=layers)


class NBLQwen3MoeForCausalLM(_Checked, qwen3_moe.Qwen3MoeForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        with _module_name(qwen3_moe, "Qwen3MoeModel", NBLQwen3MoeModel):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLMixtralModel(mixtral.MixtralModel):
    def __init__(self, *, vllm_config, prefix: str = ""):
        with _module_name(mixtral, "MixtralDecoderLayer", layer_factory(mixtral.MixtralDecoderLayer)):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLMixtralForCausalLM(_Checked, mixtral.MixtralForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        with _module_name(mixtral, "MixtralModel", NBLMixtralModel):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLGemma3ForCausalLM(_Checked, gemma3.Gemma3ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layers = layer_factory(gemma3.Gemma3DecoderLayer, GEMMA_ATTN)
        with _module_name(gemma3, "Gemma3DecoderLayer", layers):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLQwen2MoeForCausalLM(_Checked, qwen2_moe.Qwen2MoeForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layers = layer_factory(qwen2_moe.Qwen2MoeDecoderLayer)
        with _module_name(qwen2_moe, "Qwen2MoeDecoderLayer", layers):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLGemma2ForCausalLM(_Checked, gemma2.Gemma2ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layers = layer_factory(gemma2.Gemma2DecoderLayer, GEMMA_ATTN)
        with _module_name(gemma2, "Gemma2DecoderLayer", layers):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLGptOssModel(gpt_oss.GptOssModel):
    # gpt-oss names its attention `attn` and calls a layer (hidden_states, positions, residual)
    block_cls = staticmethod(layer_factory(gpt_oss.TransformerBlock, ("input_layernorm", "attn"), hidden_first=True))


class NBLGptOssForCausalLM(_Checked, gpt_oss.GptOssForCausalLM):
    renames = True  # self_attn -> attn, embed_tokens -> embedding, experts' gate_up_proj -> w13_weight, ...

    def __init__(self, *, vllm_config, prefix: str = ""):
        with _module_name(gpt_oss, "GptOssModel", NBLGptOssModel):
            super().__init__(vllm_config=vllm_config, prefix=prefix)
