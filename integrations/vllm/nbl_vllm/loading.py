"""The load check: every checkpoint tensor went into a parameter, and no parameter was left as built.

vLLM's loader returns the names of the parameters it filled; checkpoint names differ from them only
where vLLM stacks projections (q/k/v -> qkv_proj, gate/up -> gate_up_proj) and a layer's experts (one tensor
per expert and projection in the checkpoint, `experts.routed_experts.w13_weight` and `.w2_weight` in vLLM's fused MoE). Tied parameters (the
LM head of a model with tied embeddings) are one tensor under two names: loading either fills both.
"""

from __future__ import annotations

import re

from torch import nn

_STACKED = re.compile(r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.")
_STACK_OF = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
}
# an expert's projection (Qwen-MoE and OLMoE: gate/up/down_proj; Mixtral: w1/w3/w2) -> the stacked parameter
_EXPERT = re.compile(r"\.experts\.\d+\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight$")
_EXPERT_STACK = {"gate_proj": "w13", "up_proj": "w13", "w1": "w13", "w3": "w13", "down_proj": "w2", "w2": "w2"}


# gpt-oss stores them stacked already (its mapper names them experts.w13_weight, w2_bias, ...)
_STACKED_EXPERTS = re.compile(r"\.experts\.(w13|w2)_(weight|bias)$")


def vllm_name(checkpoint_name: str) -> str:
    name = _EXPERT.sub(lambda m: f".experts.routed_experts.{_EXPERT_STACK[m.group(1)]}_weight", checkpoint_name)
    name = _STACKED_EXPERTS.sub(r".experts.routed_experts.\1_\2", name)
    return _STACKED.sub(lambda m: f".{_STACK_OF[m.group(1)]}.", name)


def load_problems(model: nn.Module, checkpoint_names: list[str], loaded: set[str]) -> list[str]:
    """Names of checkpoint tensors with no parameter, and of parameters nothing was loaded into."""
    params = dict(model.named_parameters(remove_duplicate=False))
    filled = {id(params[n]) for n in loaded if n in params}
    unused = sorted(n for n in checkpoint_names if vllm_name(n) not in params)
    unloaded = sorted(n for n, p in params.items() if id(p) not in filled)
    return [f"checkpoint tensor without a parameter: {n}" for n in unused] + [
        f"parameter not loaded from the checkpoint: {n}" for n in unloaded
    ]


def check_loaded(model: nn.Module, checkpoint_names: list[str], loaded: set[str]) -> None:
    problems = load_problems(model, checkpoint_names, loaded)
    if problems:
        raise RuntimeError("NBL checkpoint does not match the model:\n  " + "\n  ".join(problems))
