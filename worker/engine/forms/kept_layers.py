"""What a config says per layer, kept right when form fold removes layers and renumbers the rest.

    layer_types             (gpt-oss, Mistral-style sliding windows, Qwen3): one entry per layer, kept for the
                            layers that remain
    decoder_sparse_step,    (Qwen2-MoE, Qwen3-MoE): which layers are a mixture of experts, by a step over the
    mlp_only_layers         layer index and a list of dense ones. A removed layer shifts the step's pattern, so
                            the kept layers' kinds are written out: step 1 and the dense ones listed by their
                            new indices

Any other config key is the same for every layer. Pure: a config dict in, a config dict out.
"""

from __future__ import annotations


def sparse_layers(config: dict, n: int) -> list[bool]:
    """Which of n layers are a mixture of experts, as transformers' Qwen2-MoE and Qwen3-MoE decide it."""
    # transformers >= 5 writes Qwen3-MoE's num_experts as num_local_experts (an attribute alias); Hub configs have either
    experts = config.get("num_experts") or config.get("num_local_experts") or 0
    step = config.get("decoder_sparse_step") or 1
    dense = set(config.get("mlp_only_layers") or ())
    return [i not in dense and experts > 0 and (i + 1) % step == 0 for i in range(n)]


def kept_config(config: dict, kept: list[int]) -> dict:
    """`config` for a model of the `kept` layers (base indices, ascending), renumbered 0..len(kept)-1."""
    out = dict(config)
    n = config["num_hidden_layers"]
    if isinstance(config.get("layer_types"), list):
        out["layer_types"] = [config["layer_types"][i] for i in kept]
    if "decoder_sparse_step" in config or "mlp_only_layers" in config:
        sparse = sparse_layers(config, n)
        out["decoder_sparse_step"] = 1
        out["mlp_only_layers"] = [new for new, old in enumerate(kept) if not sparse[old]]
    out["num_hidden_layers"] = len(kept)
    return out
