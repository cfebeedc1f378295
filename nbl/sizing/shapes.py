"""A decoder's shape, read from its config.json alone: the numbers every estimate term is made of.

Pure (no torch, no transformers): the API reads a `local:NAME` config, the CLI a directory or a Hub
config, and both get the same Shape. Multimodal configs keep the language model under `text_config`.
A family's layer is Llama's plus what its entry's layout (nbl/families.py, nbl/layer_layout.py) adds (biases, q/k norms, sinks, experts);
every number is bounded (bounds.BOUNDS).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from nbl.families import TEXT_PARTS, text_model_config

from .bounds import BOUNDS, MOE_KEYS, ShapeError, read_int, read_layers
from .layouts import attn_extra, expert_fields, flag, layout_of, moe_keys

__all__ = [
    "BOUNDS",
    "DTYPE_BYTES",
    "ParamCounts",
    "Shape",
    "ShapeError",
    "is_moe_layer",
    "layer_param_counts",
    "out_of_bounds",
    "param_counts",
    "shape_of",
]

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float64": 8}


@dataclass(frozen=True)
class Shape:
    hidden: int  # d
    layers: int  # L
    intermediate: int  # I, the dense MLP's inner width (intermediate_size; a dense layer of an MoE model)
    heads: int  # H
    kv_heads: int  # grouped-query attention: K and V have kv_heads x head_dim columns
    head_dim: int
    vocab: int  # V
    tied: bool  # the LM head shares the embedding matrix
    checkpoint_bytes_per_param: int  # as stored on the Hub (config torch_dtype), for the download
    context: int = 2048  # max_position_embeddings: the evaluation's perplexity windows are min(this, 2048)
    attn_extra: int = 0  # a layer's attention parameters beyond q/k/v/o's weights: biases, q/k norms, sinks
    norms: int = 2  # d-wide norms per layer (Gemma's 4)
    branch_norms: int = 1  # of them in the attention branch (Gemma's 2)
    mlp_bias: bool = False  # the dense MLP's gate/up/down have biases
    # a mixture of experts (experts 0: every layer dense)
    experts: int = 0  # n, the routed experts of an MoE layer
    experts_per_token: int = 0  # top-k: the experts each token goes through
    expert_intermediate: int = 0  # one expert's inner width
    expert_bias: bool = False  # each expert's gate_up and down, and the router, have biases (gpt_oss)
    shared_intermediate: int = 0  # a shared expert every token goes through, gated by a d x 1 linear (qwen2_moe)
    sparse_step: int = 1  # layer i has experts when (i + 1) % sparse_step == 0 (decoder_sparse_step) ...
    dense_layers: tuple[int, ...] = ()  # ... and it is not one of these (mlp_only_layers, those below L)
    fused_experts: bool = False  # the checkpoint keeps a layer's experts in one tensor
    mxfp4_experts: bool = False  # ... their weights in MXFP4 (gpt-oss: quantization_config quant_method mxfp4)

    @property
    def attn_params(self) -> int:
        """One layer's attention: q and o (d x H·hd), k and v (d x KV·hd), and their extras."""
        d, attn = self.hidden, self.heads * self.head_dim
        return 2 * d * attn + 2 * d * self.kv_heads * self.head_dim + self.attn_extra

    @property
    def dense_mlp_params(self) -> int:
        """gate/up/down (3 d I), with their biases where the family has them."""
        return 3 * self.hidden * self.intermediate + (2 * self.intermediate + self.hidden if self.mlp_bias else 0)

    @property
    def expert_params(self) -> int:
        """One expert: gate/up/down (3 d I_e), with their biases where the family has them."""
        i_e = self.expert_intermediate
        return 3 * self.hidden * i_e + (2 * i_e + self.hidden if self.expert_bias else 0)

    @property
    def router_params(self) -> int:
        """What every token of an MoE layer goes through besides its experts: the router (n x d, its bias), the
        shared expert and its d x 1 gate."""
        d, n = self.hidden, self.experts
        shared = 3 * d * self.shared_intermediate + d if self.shared_intermediate else 0
        return n * d + (n if self.expert_bias else 0) + shared

    @property
    def moe_layers(self) -> int:
        """Layers with experts: every sparse_step-th, less the dense ones among them (closed form)."""
        if not self.experts:
            return 0
        step = self.sparse_step
        return self.layers // step - sum(1 for i in self.dense_layers if (i + 1) % step == 0)

    @property
    def dense_layer_params(self) -> int:
        """One dense layer: attention, MLP, two norms."""
        return self.attn_params + self.dense_mlp_params + self.norms * self.hidden

    @property
    def moe_layer_params(self) -> int:
        """One MoE layer, every expert counted: what it holds."""
        return self.attn_params + self.experts * self.expert_params + self.router_params + self.norms * self.hidden

    @property
    def moe_layer_active(self) -> int:
        """One MoE layer as one token uses it: its top-k experts, not the others."""
        return (
            self.attn_params
            + self.experts_per_token * self.expert_params
            + self.router_params
            + self.norms * self.hidden
        )

    @property
    def layer_params(self) -> int:
        """The largest decoder layer, every expert counted: what layer-by-layer calibration holds at once."""
        m = self.moe_layers
        return max(([self.moe_layer_params] if m else []) + ([self.dense_layer_params] if m < self.layers else []))

    @property
    def layers_params(self) -> int:
        """Every decoder layer, every expert."""
        m = self.moe_layers
        return (self.layers - m) * self.dense_layer_params + m * self.moe_layer_params

    @property
    def active_layers_params(self) -> int:
        """Every decoder layer as one token goes through it: the top-k experts of each MoE layer."""
        m = self.moe_layers
        return (self.layers - m) * self.dense_layer_params + m * self.moe_layer_active

    @property
    def active_layer_params(self) -> int | float:
        """A token's forward through one layer, on average: the layer's parameters when it is dense."""
        total, L = self.active_layers_params, self.layers
        return total // L if total % L == 0 else total / L

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """The whole model: layers (every expert), embeddings, the LM head unless tied, the final norm."""
        return self.layers_params + self.embed_params * (1 if self.tied else 2) + self.hidden

    @property
    def active_params(self) -> int:
        """What one token's forward pass uses: params less the experts it is not routed to (embeddings and LM
        head included, as the published "A22B" and "39B active" count them)."""
        return self.active_layers_params + self.embed_params * (1 if self.tied else 2) + self.hidden

    @property
    def download_bytes(self) -> int:
        """The checkpoint: every parameter in its stored dtype, but MXFP4 experts' weights at 4 bits and a shared
        8-bit exponent per 32 (17/32 bytes a weight; loaded, they are dequantized to the model's dtype)."""
        if not self.mxfp4_experts:
            return self.params * self.checkpoint_bytes_per_param
        weights = self.moe_layers * self.experts * 3 * self.hidden * self.expert_intermediate
        return (self.params - weights) * self.checkpoint_bytes_per_param + -(-weights * 17 // 32)

    @property
    def largest_tensor(self) -> int:
        """The checkpoint's largest tensor, in parameters: the embedding (or LM head), a dense MLP's weight,
        one expert's (or, fused, a layer's gate_up over all its experts: n x d x 2 I_e)."""
        m, d = self.moe_layers, self.hidden
        sizes = [self.embed_params] + ([self.intermediate * d] if m < self.layers else [])
        if m:
            sizes.append(
                self.experts * d * 2 * self.expert_intermediate if self.fused_experts else self.expert_intermediate * d
            )
        return max(sizes)

    def mlp_act_bytes(self, dt: int) -> int:
        """Bytes per token of the MLP's transients in a forward (`dt`: the dtype's bytes): a dense layer's gate, up
        and act*up (3 I); an MoE layer's as transformers runs its experts (integrations/moe.py, grouped_mm, the
        default): per routed (token, expert) pair its gathered input, gate_up (2 I_e), act*up (I_e), the down,
        weighted and reordered outputs (4 d), the gathered bias rows where experts have biases (2 I_e + d), three
        int64 indices; the router's logits and their float32 softmax (n each); a shared expert's 3 I_s. The larger
        kind when a model has both."""
        dense = 3 * self.intermediate * dt
        if not self.moe_layers:
            return dense
        d, i_e = self.hidden, self.expert_intermediate
        pair = (3 * i_e + 4 * d + (2 * i_e + d if self.expert_bias else 0)) * dt + 3 * 8
        moe = self.experts_per_token * pair + self.experts * (dt + 4) + 3 * self.shared_intermediate * dt
        return moe if self.moe_layers == self.layers else max(moe, dense)


class ParamCounts(NamedTuple):
    total: int  # every parameter, every expert
    active: int  # those one token's forward pass uses: the top-k experts of each MoE layer


def param_counts(shape: Shape) -> ParamCounts:
    """The model's total and active parameters (equal for a dense model)."""
    return ParamCounts(shape.params, shape.active_params)


def layer_param_counts(shape: Shape, index: int, mode: str = "block") -> ParamCounts:
    """What layer `index` holds (total, and active: its top-k experts), whole (mode "block") or its attention
    branch alone (mode "attn": the input norm and the attention), the parameters NBL replaces there."""
    if not 0 <= index < shape.layers:
        raise ValueError(f"layer {index} is not one of the model's {shape.layers}")
    if mode == "attn":
        branch = shape.attn_params + shape.branch_norms * shape.hidden
        return ParamCounts(branch, branch)
    if mode != "block":
        raise ValueError(f"mode must be attn or block, got {mode!r}")
    if is_moe_layer(shape, index):
        return ParamCounts(shape.moe_layer_params, shape.moe_layer_active)
    return ParamCounts(shape.dense_layer_params, shape.dense_layer_params)


def is_moe_layer(shape: Shape, index: int) -> bool:
    """As transformers' Qwen2Moe/Qwen3Moe decoder layer chooses (every layer of the other MoE families)."""
    return bool(shape.experts) and (index + 1) % shape.sparse_step == 0 and index not in shape.dense_layers


def out_of_bounds(config: dict) -> list[ShapeError]:
    """Each number the config gives that is not a positive integer within BOUNDS (absent ones are not
    checked: the estimate says what it lacks), at the top level and under text_config both: the estimate
    reads text_config when there is one, while transformers builds a text-only family (LlamaConfig) from
    the top level, so a bound on one level alone let 10**12 layers by on the other. A mixture of experts'
    numbers (MOE_KEYS, mlp_only_layers) are checked where the level's family reads them (its entry's layout, nbl/families.py)."""
    levels = [("", config)] + (
        [("text_config.", config["text_config"])] if isinstance(config.get("text_config"), dict) else []
    )
    errors = []
    for where, cfg in levels:
        experts = layout_of(cfg, config, _numbers(config)).experts
        read = moe_keys(experts) if experts else ()
        for key in BOUNDS:
            if cfg.get(key) is not None and (key not in MOE_KEYS or key in read):
                try:
                    read_int(cfg, key, where=where)
                except ShapeError as e:
                    errors.append(e)
        if experts and experts.sparse_layers:
            try:
                read_layers(cfg, "mlp_only_layers", where)
            except ShapeError as e:
                errors.append(e)
    return errors


def _numbers(config: dict) -> dict:
    """Multimodal configs keep the language model under text_config; a multimodal family's of nbl/families.TEXT_PARTS
    only what differs from its text config's defaults, which its entry fills in."""
    if config.get("model_type") in TEXT_PARTS:
        return text_model_config(config)
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def shape_of(config: dict) -> Shape:
    bad = out_of_bounds(config)  # both levels, though the shape is read from one
    if bad:
        raise bad[0]
    cfg = _numbers(config)
    layout = layout_of(cfg, config, cfg)
    d = read_int(cfg, "hidden_size")
    heads = read_int(cfg, "num_attention_heads")
    kv_heads = read_int(cfg, "num_key_value_heads", heads)
    if kv_heads > heads:
        raise ShapeError(
            f"config.json: num_key_value_heads ({kv_heads}) must be at most num_attention_heads ({heads})",
            "num_key_value_heads",
        )
    if cfg.get("head_dim") is None and layout.head_dim_default is None and heads > d:
        raise ShapeError(
            f"config.json: num_attention_heads ({heads}) must be at most hidden_size ({d}) when head_dim is not given",
            "num_attention_heads",
        )
    head_dim = read_int(cfg, "head_dim") if cfg.get("head_dim") is not None else layout.head_dim_default or d // heads
    layers = read_int(cfg, "num_hidden_layers")
    intermediate = read_int(cfg, "intermediate_size", 4 * d)
    stored = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "bfloat16"
    return Shape(
        hidden=d,
        layers=layers,
        intermediate=intermediate,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=read_int(cfg, "vocab_size"),
        tied=bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        checkpoint_bytes_per_param=DTYPE_BYTES.get(stored, 2) if isinstance(stored, str) else 2,
        context=read_int(cfg, "max_position_embeddings", 2048),
        attn_extra=attn_extra(layout, cfg, d, heads, kv_heads, head_dim),
        mlp_bias=flag(cfg, layout.mlp_bias),
        norms=layout.norms,
        branch_norms=layout.branch_norms,
        **(expert_fields(layout.experts, cfg, layers, intermediate, config) if layout.experts else {}),
    )
