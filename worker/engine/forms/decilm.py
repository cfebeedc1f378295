"""The DeciLM (Nemotron-NAS) config.json of a linear or fold-attn output, from the base's config.

    model_type     "nemotron-nas"            architectures  ["DeciLMForCausalLM"]
    block_configs  one per layer:
      kept layer          attention {n_heads_in_group: heads / kv_heads, no_op: false, replace_with_linear: false}
                          ffn       {ffn_mult: 1.5 · intermediate / hidden, no_op: false, replace_with_linear: false}
      linear, attn        attention {n_heads_in_group: null, no_op: false, replace_with_linear: true}
      linear, block       attention {null, no_op: true, false}   ffn {ffn_mult: null, no_op: false, replace_with_linear: true}
      fold, attn          attention {null, no_op: true, false}
    auto_map       modeling_decilm.DeciLMConfig / DeciLMForCausalLM (transformers has no DeciLM class)

and the base's other keys (hidden size, heads, rope, norms, vocabulary, tied embeddings) unchanged. A layer
without attention has n_heads_in_group null: llama.cpp's `deci` converter reads that as no KV heads.
"""

from __future__ import annotations

from nbl.outputs.forms import FFN_ROUND
from worker.engine.modeling.modeling_decilm import ffn_width

DROPPED_KEYS = (
    "model_type",
    "architectures",
    "auto_map",
    "layer_types",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "nbl",
    "_name_or_path",
    "transformers_version",
)


def block_configs(config: dict, form: str, mode: str, layers) -> list[dict]:
    heads, kv = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    if heads % kv:
        raise ValueError(f"DeciLM needs heads ({heads}) divisible by KV heads ({kv})")
    mult = 1.5 * inter / hidden
    if inter % FFN_ROUND or ffn_width(mult, hidden) != inter:
        raise ValueError(f"DeciLM cannot express intermediate_size {inter} as an ffn_mult of hidden size {hidden}")
    chosen = set(layers)
    out = []
    for i in range(config["num_hidden_layers"]):
        attn = {"n_heads_in_group": heads // kv, "no_op": False, "replace_with_linear": False}
        ffn = {"ffn_mult": mult, "no_op": False, "replace_with_linear": False}
        if i in chosen:
            linear_attn = form == "linear" and mode == "attn"
            attn = {"n_heads_in_group": None, "no_op": not linear_attn, "replace_with_linear": linear_attn}
            if form == "linear" and mode == "block":
                ffn = {"ffn_mult": None, "no_op": False, "replace_with_linear": True}
        out.append({"attention": attn, "ffn": ffn})
    return out


def decilm_config(base: dict, form: str, mode: str, layers, dtype: str) -> dict:
    """config.json of the output, from the base's config.json as a dict."""
    cfg = {k: v for k, v in base.items() if k not in DROPPED_KEYS}
    cfg.update(
        model_type="nemotron-nas",
        architectures=["DeciLMForCausalLM"],
        auto_map={
            "AutoConfig": "modeling_decilm.DeciLMConfig",
            "AutoModelForCausalLM": "modeling_decilm.DeciLMForCausalLM",
        },
        block_configs=block_configs(base, form, mode, layers),
        dtype=dtype,
    )
    return cfg
