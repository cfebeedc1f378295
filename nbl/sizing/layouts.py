"""A family's layer layout (nbl/layer_layout.py, carried by its entry in nbl/families.py) read against a
config.json: the numbers it adds to a layer's parameters. A family not in the table is counted as Llama's. Pure.
"""

from __future__ import annotations

from nbl.families import FAMILIES
from nbl.layer_layout import Experts, Flag, Layout

from .bounds import ShapeError, read_int, read_layers


def layout_of(cfg: dict, config: dict, numbers: dict) -> Layout:
    """The family of one level `cfg` of `config`: its own model_type, else the language model's (`numbers`,
    text_config's or the top level's), else the top level's; Llama's layer for a family not in the table."""
    for level in (cfg, numbers, config):
        family = level.get("model_type")
        if isinstance(family, str) and family in FAMILIES:
            return FAMILIES[family].layout
    return Layout()


def moe_keys(experts: Experts) -> tuple[str, ...]:
    """The bounds.MOE_KEYS this family's config is read for."""
    return (
        *experts.count,
        "num_experts_per_tok",
        experts.width,
        *(("shared_expert_intermediate_size",) if experts.shared_default is not None else ()),
        *(("decoder_sparse_step",) if experts.sparse_layers else ()),
    )


def flag(cfg: dict, value: Flag) -> bool:
    if isinstance(value, bool):
        return value
    key, default = value
    given = cfg.get(key)
    return default if given is None else bool(given)


def attn_extra(layout: Layout, cfg: dict, d: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """A layer's attention parameters beyond q/k/v/o's weights."""
    extra = (heads + 2 * kv_heads) * head_dim if flag(cfg, layout.qkv_bias) else 0
    extra += d if flag(cfg, layout.o_bias) else 0
    if layout.qk_norm == "head":  # Qwen3: q_norm and k_norm over one head
        extra += 2 * head_dim
    elif layout.qk_norm == "width":  # OLMoE: q_norm over d, k_norm over the keys' width as d // H heads
        extra += d + d // heads * kv_heads
    return extra + (heads if layout.sinks else 0)


def expert_fields(experts: Experts, cfg: dict, layers: int, intermediate: int, config: dict) -> dict:
    """The Shape's mixture-of-experts fields (`config`: the whole config.json, for its quantization_config)."""
    key, n = experts.count[0], experts.count_default
    for alias in experts.count:
        if cfg.get(alias) is not None:
            key, n = alias, read_int(cfg, alias)
            break
    k = read_int(cfg, "num_experts_per_tok", experts.active_default)
    if k > n:
        raise ShapeError(f"config.json: num_experts_per_tok ({k}) must be at most {key} ({n})", "num_experts_per_tok")
    width = (
        intermediate if experts.width == "intermediate_size" else read_int(cfg, experts.width, experts.width_default)
    )
    shared = (
        read_int(cfg, "shared_expert_intermediate_size", experts.shared_default)
        if experts.shared_default is not None
        else 0
    )
    step = read_int(cfg, "decoder_sparse_step", 1) if experts.sparse_layers else 1
    dense = read_layers(cfg, "mlp_only_layers") if experts.sparse_layers else ()
    return {
        "experts": n,
        "experts_per_token": k,
        "expert_intermediate": width,
        "expert_bias": experts.bias,
        "shared_intermediate": shared,
        "sparse_step": step,
        "dense_layers": tuple(sorted({i for i in dense if i < layers})),
        "fused_experts": experts.fused,
        "mxfp4_experts": _quantized(cfg, "mxfp4") or _quantized(config, "mxfp4"),
    }


def _quantized(cfg: dict, method: str) -> bool:
    """The checkpoint's experts are quantized by `method` (transformers' quantization_config; gpt-oss's mxfp4
    leaves attention, router, embeddings and LM head in the model's dtype: modules_to_not_convert)."""
    quant = cfg.get("quantization_config")
    return isinstance(quant, dict) and quant.get("quant_method") == method
