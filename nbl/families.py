"""The model families an input model may be: one table, read wherever a config.json is judged, so the worker's
loader (worker/engine/loading/model_rules.py), the API at submit and in POST /v1/estimates, and `nbl estimate` refuse
the same models with the same words (nbl/model_checks.py).

A family is a config's `model_type` whose decoder layer is `h + attn(LN1 h)` then `+ mlp(LN2 h')`, with modules
named `self_attn`, `input_layernorm`, `post_attention_layernorm`, `mlp` under `model.layers`; the value is its
(config class, causal LM class) in transformers. Adding a family is one entry here and the same entry in the
modeling file shipped with every output (worker/engine/modeling/modeling_nbl.FAMILIES, which may import nothing of ours;
tests/estimates/test_family_rule.py holds the two equal). Torch-free.
"""

from __future__ import annotations

FAMILIES: dict[str, tuple[str, str]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
}


def family_error(config: dict, families=tuple(FAMILIES)) -> str | None:
    """Why a config's family cannot be compressed (None: it can). `families`: those this process can load
    (the worker: the table's that its transformers has)."""
    family = config.get("model_type")
    if family in families:
        return None
    short = family is None or isinstance(family, str) and len(family) <= 64  # a config is user input: no megabyte repr
    shown = repr(family) if short else f"a {type(family).__name__}"
    return f"architecture {shown} is not supported; supported: {', '.join(families)}"
