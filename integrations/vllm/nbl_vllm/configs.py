"""The NBL config classes, one per family, for transformers' AutoConfig.

The same shape as the `NBL<Family>Config` classes of the output's modeling_nbl.py: the base family's
config with `model_type = nbl_<family>`; the `nbl` plan rides along as an extra attribute. Defined
here, not imported from the output directory, so that loading needs no trust_remote_code.
"""

from __future__ import annotations

import transformers

# family (base `model_type`) -> transformers config class: the families whose entry in nbl/families.py says
# plugin=True (tests/worker/engine/modeling/test_family_layers.py holds the two equal).
FAMILIES: dict[str, str] = {
    "llama": "LlamaConfig",
    "mistral": "MistralConfig",
    "qwen2": "Qwen2Config",
    "qwen3": "Qwen3Config",
    "qwen3_moe": "Qwen3MoeConfig",
    "mixtral": "MixtralConfig",
    "gemma3_text": "Gemma3TextConfig",
    "phi3": "Phi3Config",
    "gemma2": "Gemma2Config",
    "olmoe": "OlmoeConfig",
    "qwen2_moe": "Qwen2MoeConfig",
    "gpt_oss": "GptOssConfig",
}
# family -> the architecture name in the output's config.json (modeling_nbl.class_names).
ARCHITECTURES: dict[str, str] = {
    "llama": "NBLLlamaForCausalLM",
    "mistral": "NBLMistralForCausalLM",
    "qwen2": "NBLQwen2ForCausalLM",
    "qwen3": "NBLQwen3ForCausalLM",
    "qwen3_moe": "NBLQwen3MoeForCausalLM",
    "mixtral": "NBLMixtralForCausalLM",
    "gemma3_text": "NBLGemma3ForCausalLM",
    "phi3": "NBLPhi3ForCausalLM",
    "gemma2": "NBLGemma2ForCausalLM",
    "olmoe": "NBLOlmoeForCausalLM",
    "qwen2_moe": "NBLQwen2MoeForCausalLM",
    "gpt_oss": "NBLGptOssForCausalLM",
}


def config_class(family: str) -> type:
    base = getattr(transformers, FAMILIES[family])

    class Config(base):
        model_type = f"nbl_{family}"

        def __init__(self, *args, **kwargs):
            kwargs.pop("model_type", None)  # the class attribute is the truth
            super().__init__(*args, **kwargs)

    Config.__name__ = Config.__qualname__ = "NBL" + FAMILIES[family]
    Config.__module__ = __name__
    return Config


# Module attributes (NBLLlamaConfig, ...), so that configs pickle: vLLM sends the config to its
# engine process.
CONFIGS = {family: config_class(family) for family in FAMILIES}
globals().update({cls.__name__: cls for cls in CONFIGS.values()})


def register_configs() -> None:
    for family, cls in CONFIGS.items():
        if cls.model_type not in transformers.CONFIG_MAPPING:
            transformers.AutoConfig.register(cls.model_type, cls, exist_ok=True)
