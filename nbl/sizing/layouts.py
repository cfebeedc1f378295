"""What each family's decoder layer holds beyond Llama's (q/k/v/o, gate/up/down, two norms), read from its
config.json: biases, q/k norms, attention sinks, and for a mixture of experts the experts, their router and a
shared expert. Each entry is transformers' modeling_<family>.py, its defaults its configuration_<family>.py's
(tests/nbl/sizing/test_moe_sizing.py builds every family's tiny model and compares the counts). A family not
here is counted as Llama's, as every family was before. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bounds import ShapeError, read_int, read_layers

Flag = tuple[str, bool] | bool  # (config key, transformers' default when the config lacks it), or always/never


@dataclass(frozen=True)
class Experts:
    """Where a family's config keeps its mixture of experts, and transformers' defaults for what it lacks."""

    count: tuple[
        str, ...
    ]  # the expert count's keys, the first the config has wins (transformers' attribute_map aliases)
    count_default: int
    active_default: int  # num_experts_per_tok
    width: str  # one expert's inner width: intermediate_size (then as a dense layer's, 4 d by default) or moe_intermediate_size
    width_default: int | None = None
    shared_default: int | None = None  # qwen2_moe: a shared expert of shared_expert_intermediate_size, gated by d x 1
    sparse_layers: bool = False  # decoder_sparse_step and mlp_only_layers choose the MoE layers, the others dense
    bias: bool = False  # gpt_oss: each expert's gate_up and down biases, and the router's
    fused: bool = False  # the checkpoint keeps a layer's experts in one tensor (gpt_oss: gate_up n x d x 2 I)


@dataclass(frozen=True)
class Layout:
    qkv_bias: Flag = False  # q, k and v biases
    o_bias: Flag = False
    qk_norm: str = ""  # "head": q_norm and k_norm over head_dim (Qwen3); "width": over d and (d // H) x KV (OLMoE)
    sinks: bool = False  # one learned logit per head (gpt_oss)
    mlp_bias: Flag = False  # the dense MLP's gate/up/down biases (Llama's mlp_bias)
    head_dim_default: int | None = None  # None: d // H
    experts: Experts | None = None
    norms: int = 2  # the d-wide norms of a layer (Gemma: 4, after attention and around the MLP too)
    branch_norms: int = 1  # those in the attention branch (Gemma: 2, the input's and the one after attention)


GEMMA = {"norms": 4, "branch_norms": 2}
LAYOUTS: dict[str, Layout] = {
    "gemma2": Layout(**GEMMA),
    "gemma3_text": Layout(qk_norm="head", **GEMMA),
    "llama": Layout(qkv_bias=("attention_bias", False), o_bias=("attention_bias", False), mlp_bias=("mlp_bias", False)),
    "mistral": Layout(),
    "qwen2": Layout(qkv_bias=True),
    "qwen3": Layout(qkv_bias=("attention_bias", False), o_bias=("attention_bias", False), qk_norm="head"),
    "mixtral": Layout(experts=Experts(("num_local_experts", "num_experts"), 8, 2, "intermediate_size")),
    "qwen2_moe": Layout(
        qkv_bias=("qkv_bias", True),
        experts=Experts(
            ("num_experts",), 60, 4, "moe_intermediate_size", 1408, shared_default=5632, sparse_layers=True
        ),
    ),
    "qwen3_moe": Layout(
        qkv_bias=("attention_bias", False),
        o_bias=("attention_bias", False),
        qk_norm="head",
        experts=Experts(("num_experts", "num_local_experts"), 128, 8, "moe_intermediate_size", 768, sparse_layers=True),
    ),
    "olmoe": Layout(
        qkv_bias=("attention_bias", False),
        o_bias=("attention_bias", False),
        qk_norm="width",
        experts=Experts(("num_experts", "num_local_experts"), 64, 8, "intermediate_size"),
    ),
    "gpt_oss": Layout(
        qkv_bias=("attention_bias", True),
        o_bias=("attention_bias", True),
        sinks=True,
        head_dim_default=64,
        experts=Experts(("num_local_experts", "num_experts"), 128, 4, "intermediate_size", bias=True, fused=True),
    ),
}


def layout_of(cfg: dict, config: dict, numbers: dict) -> Layout:
    """The family of one level `cfg` of `config`: its own model_type, else the language model's (`numbers`,
    text_config's or the top level's), else the top level's; Llama's layer for a family not in LAYOUTS."""
    for level in (cfg, numbers, config):
        family = level.get("model_type")
        if isinstance(family, str) and family in LAYOUTS:
            return LAYOUTS[family]
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
