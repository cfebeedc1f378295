"""The plugin's load check (nbl_vllm.loading): vLLM's own loader skips an unexpected `.bias` silently,
so a checkpoint tensor without a parameter, or a parameter never loaded, must be reported."""

import pytest
from torch import nn


@pytest.fixture
def loading():
    from nbl_vllm import loading  # the serving venv's plugin (imported here: collection works anywhere)

    return loading


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(8, 4)
        self.lm_head = nn.Linear(4, 8, bias=False)
        self.lm_head.weight = self.embed.weight  # tied: one tensor, two names
        self.map = nn.Linear(4, 4)


def test_stacked_names_map_to_vllm_parameters(loading):
    vllm_name = loading.vllm_name
    assert vllm_name("model.layers.3.self_attn.k_proj.weight") == "model.layers.3.self_attn.qkv_proj.weight"
    assert vllm_name("model.layers.3.mlp.up_proj.weight") == "model.layers.3.mlp.gate_up_proj.weight"
    assert vllm_name("model.layers.3.self_attn.linear.bias") == "model.layers.3.self_attn.linear.bias"


def test_expert_names_map_to_the_fused_moe_parameters(loading):
    """One checkpoint tensor per expert and projection; one stacked parameter per layer in vLLM's fused MoE."""
    vllm_name = loading.vllm_name
    fused = "model.layers.1.mlp.experts.routed_experts"
    assert vllm_name("model.layers.1.mlp.experts.7.gate_proj.weight") == f"{fused}.w13_weight"
    assert vllm_name("model.layers.1.mlp.experts.7.up_proj.weight") == f"{fused}.w13_weight"
    assert vllm_name("model.layers.1.mlp.experts.7.down_proj.weight") == f"{fused}.w2_weight"
    mixtral = "model.layers.1.block_sparse_moe.experts"
    assert (
        vllm_name(f"{mixtral}.0.w1.weight")
        == vllm_name(f"{mixtral}.0.w3.weight")
        == f"{mixtral}.routed_experts.w13_weight"
    )
    assert vllm_name(f"{mixtral}.0.w2.weight") == f"{mixtral}.routed_experts.w2_weight"
    assert vllm_name("model.layers.1.mlp.experts.w13_bias") == f"{fused}.w13_bias"  # gpt-oss, after its own mapper
    assert (
        vllm_name("model.layers.1.mlp.shared_expert.up_proj.weight")
        == "model.layers.1.mlp.shared_expert.gate_up_proj.weight"
    )


def test_complete_load_has_no_problems(loading):
    names = ["embed.weight", "map.weight", "map.bias"]
    assert loading.load_problems(_Tiny(), names, set(names)) == []


def test_an_unused_tensor_and_an_unloaded_parameter_are_reported(loading):
    problems = loading.load_problems(
        _Tiny(), ["embed.weight", "map.weight", "maps.bias"], {"embed.weight", "map.weight"}
    )
    assert problems == [
        "checkpoint tensor without a parameter: maps.bias",
        "parameter not loaded from the checkpoint: map.bias",
    ]
