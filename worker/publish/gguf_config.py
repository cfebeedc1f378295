"""config.json as llama.cpp's converter reads it, against transformers' reading: refused where they differ.

The converter takes a model's shape from the first key present of a list of aliases (ModelBase.find_hparam),
and some lists put another name before transformers' own: `n_layers` before num_hidden_layers, `n_heads`
before num_attention_heads. It also lifts a `text_config` over the top level. transformers keeps such keys as
unknown attributes and writes them back, so an input's config.json carries them into its outputs untouched.
Then the GGUF is not the checkpoint that was checked and evaluated (`n_heads` permutes q/k by another head
count), or the converter builds its tensor-name table for `n_layers` = 10^7 blocks and fills the host's memory
(tried: killed by the OOM killer after 5 minutes). Such a config is refused before the converter runs.

The lists are those of the pinned llama.cpp (integrations/gguf/sdist.txt: conversion/base.py, llama.py and the
classes of the other architectures exported: Phi3MiniModel, Qwen2MoeModel, Qwen3MoeModel, OlmoeModel);
tests/llama_cpp/test_gguf_config.py checks them against its source.
"""

from __future__ import annotations

from nbl.families import FAMILIES

# transformers' key -> each order in which the converter looks for it (one per find_hparam call)
CONVERTER_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    "num_hidden_layers": (("n_layers", "num_hidden_layers", "n_layer", "num_layers"),),
    "num_attention_heads": (
        ("num_attention_heads", "n_head", "n_heads"),
        ("n_heads", "num_attention_heads"),
        ("num_attention_heads", "n_head"),  # Phi3MiniModel, as the ones below marked so
    ),
    "num_key_value_heads": (
        ("num_key_value_heads", "n_kv_heads"),
        ("n_kv_heads", "num_key_value_heads"),
        ("num_key_value_heads", "n_head_kv"),  # Phi3MiniModel
    ),
    "hidden_size": (("hidden_size", "n_embd", "dim"), ("hidden_size", "n_embd")),  # Phi3MiniModel
    "intermediate_size": (
        ("prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size", "n_inner", "hidden_dim"),
        ("intermediate_size",),  # Phi3MiniModel
    ),
    "max_position_embeddings": (
        ("max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"),
        ("n_positions", "max_position_embeddings"),  # Phi3MiniModel
    ),
    "rope_theta": (("global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"),),
    "partial_rotary_factor": (("partial_rotary_factor", "rope_pct", "rope_percent"),),
    "rms_norm_eps": (("rms_norm_eps", "norm_eps"), ("rms_norm_eps",)),  # Phi3MiniModel
    "vocab_size": (("vocab_size_per_layer_input", "vocab_size"),),
}
# the expert count, read as the first key present: TextModel.set_gguf_parameters writes it, the MoE classes merge
# that many experts per layer; transformers reads the first of the family's own (nbl/families.py, Experts.count)
EXPERT_COUNT = (("num_local_experts", "num_experts", "n_routed_experts"), ("num_local_experts", "num_experts"))
LIFTED = ("text_config", "llm_config")  # the converter reads a nested config's keys over the model's own


def check_converter_keys(config: dict, where: str) -> None:
    """ValueError (one line) when the converter would read a key of `config` other than transformers' own with
    another value, or a nested config over it."""
    for key in LIFTED:
        if key in config:
            raise ValueError(
                f"{where}: config.json has {key!r}, whose keys llama.cpp's converter reads over the "
                "model's own; a plain checkpoint of the families exported has none"
            )
    entry = FAMILIES.get(config.get("model_type")) if isinstance(config.get("model_type"), str) else None
    experts = entry.layout.experts if entry else None
    if experts is not None:
        own = next((k for k in experts.count if k in config), experts.count[0])
        _check({own: EXPERT_COUNT}, config, where)
    _check(CONVERTER_KEYS, config, where)


def _check(table: dict, config: dict, where: str) -> None:
    for own, orders in table.items():
        for order in orders:
            read = next((k for k in order if k in config), None)
            if read is not None and read != own and config[read] != config.get(own):
                theirs = f"{config[own]!r} for transformers" if own in config else "not set: transformers' default"
                raise ValueError(
                    f"{where}: config.json's {read!r} ({config[read]!r}) is what llama.cpp's converter "
                    f"reads as {own} ({theirs}): remove {read!r}"
                )
