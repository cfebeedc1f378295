"""`NBL<Family>ForCausalLM` for vLLM: the family's model, with the planned layers built by layers.py.

Each family's model builds its decoder layers through a constructor it is given, but the hook
differs by family in vLLM:

    llama, mistral   ForCausalLM(layer_type=...), called as layer_type(vllm_config=, prefix=)
    qwen2, qwen3     Model(decoder_layer_type=...), called with (config=, cache_config=,
                     quant_config=, prefix=); their ForCausalLM builds the Model by its module-level
                     name and has no hook, so that name points at our Model while it is built

`layer_factory` gives one constructor for all: the family's own layer for a kept index, ours for a
replaced one (the index is the last part of the layer's prefix, `model.layers.{i}`).
"""

from __future__ import annotations

from contextlib import contextmanager

from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.models import llama, mistral, qwen2, qwen3

from .layers import NBLAttnLayer, NBLBlockLayer, NBLMap
from .loading import check_loaded
from .plan_rules import checked_plan


def _llama_mlp(config, quant_config, prefix):
    return llama.LlamaMLP(
        config.hidden_size,
        config.intermediate_size,
        config.hidden_act,
        quant_config=quant_config,
        bias=getattr(config, "mlp_bias", False),
        prefix=prefix,
    )


def _mistral_mlp(config, quant_config, prefix):
    return mistral.MistralMLP(
        config.hidden_size,
        config.intermediate_size,
        config.hidden_act,
        quant_config=quant_config,
        bias=getattr(config, "mlp_bias", False),
        prefix=prefix,
    )


def _qwen_mlp(config, quant_config, prefix):
    return qwen2.Qwen2MLP(
        config.hidden_size, config.intermediate_size, config.hidden_act, quant_config=quant_config, prefix=prefix
    )


def layer_factory(family_layer, make_mlp):
    """A decoder-layer constructor taking either family's keyword arguments."""

    def build(**kw):
        vllm_config = kw.get("vllm_config")
        config = kw.get("config") or vllm_config.model_config.hf_config
        quant_config = kw["quant_config"] if "quant_config" in kw else vllm_config.quant_config
        prefix = kw["prefix"]
        plan = checked_plan(config)  # the transformers loader's rules: a bad plan is refused, not guessed
        if int(prefix.rsplit(".", 1)[-1]) not in plan["layers"]:
            return family_layer(**kw)
        d, linear, bias = config.hidden_size, plan["method"] == "nbl", plan.get("bias", True)
        if plan["mode"] == "block":
            return NBLBlockLayer(d, linear, bias)
        ln2 = RMSNorm(d, eps=config.rms_norm_eps)
        return NBLAttnLayer(NBLMap(d, linear, bias), ln2, make_mlp(config, quant_config, f"{prefix}.mlp"))

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

    def load_weights(self, weights):
        seen: list[str] = []
        loaded = super().load_weights((seen.append(name) or (name, w)) for name, w in weights)
        check_loaded(self, seen, loaded)
        return loaded


class NBLLlamaForCausalLM(_Checked, llama.LlamaForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layer_type = layer_factory(llama.LlamaDecoderLayer, _llama_mlp)
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=layer_type)


class NBLMistralForCausalLM(_Checked, mistral.MistralForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layer_type = layer_factory(mistral.MistralDecoderLayer, _mistral_mlp)
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=layer_type)


class NBLQwen2Model(qwen2.Qwen2Model):
    def __init__(self, *, vllm_config, prefix: str = ""):
        layers = layer_factory(qwen2.Qwen2DecoderLayer, _qwen_mlp)
        super().__init__(vllm_config=vllm_config, prefix=prefix, decoder_layer_type=layers)


class NBLQwen2ForCausalLM(_Checked, qwen2.Qwen2ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        with _module_name(qwen2, "Qwen2Model", NBLQwen2Model):
            super().__init__(vllm_config=vllm_config, prefix=prefix)


class NBLQwen3Model(qwen3.Qwen3Model):
    decoder_layer_type = staticmethod(layer_factory(qwen3.Qwen3DecoderLayer, _qwen_mlp))


class NBLQwen3ForCausalLM(_Checked, qwen3.Qwen3ForCausalLM):
    def __init__(self, *, vllm_config, prefix: str = ""):
        with _module_name(qwen3, "Qwen3Model", NBLQwen3Model):
            super().__init__(vllm_config=vllm_config, prefix=prefix)
