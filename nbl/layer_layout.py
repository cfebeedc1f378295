"""What a family's decoder layer holds beyond Llama's (q/k/v/o, gate/up/down, two norms), as data: biases, q/k
norms, attention sinks, Gemma's extra norms, and for a mixture of experts the experts, their router and a shared
expert. Each family's entry (nbl/families.py) carries one; nbl/sizing reads it from there. Each is transformers'
modeling_<family>.py, its defaults its configuration_<family>.py's (tests/nbl/sizing/test_moe_sizing.py builds
every family's tiny model and compares the counts). Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass

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
