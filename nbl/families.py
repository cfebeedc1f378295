"""The model families an input model may be: one entry each, read wherever a family matters.

The worker's loader (worker/engine/loading/model_rules.py), the API at submit and in POST /v1/estimates, and
`nbl estimate` refuse the same models with the same words (nbl/model/checks.py); the forms (nbl/outputs/forms.py) read
which outputs each family can be written as; the engine reads where a layer's attention branch begins and ends.

A family is a config's `model_type` whose decoder layer, under `model.layers`, is

    h' = h + attention branch(h)        the branch: `attn`, its modules in order (a norm, `self_attn`, and for
                                        Gemma the norm after attention, `post_attention_layernorm`)
    h'' = h' + MLP branch(h')           `ln2` the norm in front of the MLP; a dense MLP or a mixture of experts

Attention NBL replaces the whole attention branch by h -> W h + b; block NBL the whole layer. A mixture of experts
changes nothing of that: the maps see only the residual stream, never an expert. Its experts are stored one
matrix each in a checkpoint and stacked in the model (worker/engine/loading/checkpoint_names.py).

Adding a family: one entry here, the same (config, model, branch) in the modeling file shipped with every output
(worker/engine/modeling/modeling_nbl.py, which may import nothing of ours; a test holds the two equal), and its
tiny config in the tests (tests/conftest.py FAMILY_CONFIGS). docs/engine.md says how. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from nbl.layer_layout import Experts, Layout

ATTN = ("input_layernorm", "self_attn")  # the attention branch of a Llama-shaped layer
GEMMA_ATTN = ("input_layernorm", "self_attn", "post_attention_layernorm")
# The checkpoint tensors whose output is a layer's MLP branch (a pattern after `model.layers.{j}.`, and the dimension
# that indexes the hidden size): form fold multiplies each by (I + T) there. A mixture of experts sums its experts'
# outputs weighted by the router (and Qwen2-MoE's gated shared expert), so (I + T) applied to every expert's
# down projection is (I + T) applied to the sum: exact, and the router is untouched.
DOWN = ((r"mlp\.down_proj\.weight", 0), (r"mlp\.down_proj\.bias", 0))
EXPERTS_DOWN = ((r"mlp\.experts\.\d+\.down_proj\.weight", 0),)


@dataclass(frozen=True)
class Family:
    config: str  # the config class in transformers
    model: str  # its causal LM class
    attn: tuple[str, ...] = ATTN  # the attention branch's modules, input to output
    ln2: str = "post_attention_layernorm"  # the norm in front of the MLP branch
    decilm: str | None = None  # None: DeciLM (forms linear, fold attn) can express it; else why not
    fold: str | None = None  # None: form fold writes its blocks; else why not
    window: int | None = None  # the sliding window its config class fills in when config.json leaves it out
    plugin: bool = False  # the nbl_vllm plugin (integrations/vllm) builds its layers: the nbl form runs in vLLM
    # the runtimes besides transformers that run the family's own class (a fold block output), read from their code
    # and listed only where a test of ours or the runtime's model registry says so
    plain: tuple[str, ...] = ()
    down: tuple[tuple[str, int], ...] = DOWN  # the MLP branch's output projections in a checkpoint (form fold)
    # what its layer holds beyond Llama's (biases, q/k norms, sinks, Gemma's norms, experts): sizing counts it
    layout: Layout = Layout()

    @property
    def moe(self) -> bool:
        return self.layout.experts is not None


_RUNTIMES = ("vllm", "sglang", "tensorrt-llm", "llama.cpp")  # each runs Llama, Mistral, Qwen2 and Qwen3 as is
FAMILIES: dict[str, Family] = {
    "llama": Family(
        "LlamaConfig",
        "LlamaForCausalLM",
        plugin=True,
        plain=_RUNTIMES,
        layout=Layout(
            qkv_bias=("attention_bias", False), o_bias=("attention_bias", False), mlp_bias=("mlp_bias", False)
        ),
    ),
    "mistral": Family("MistralConfig", "MistralForCausalLM", window=4096, plugin=True, plain=_RUNTIMES),
    "qwen2": Family(
        "Qwen2Config",
        "Qwen2ForCausalLM",
        decilm="has no q/k/v biases",
        plugin=True,
        plain=_RUNTIMES,
        layout=Layout(qkv_bias=True),
    ),
    "qwen3": Family(
        "Qwen3Config",
        "Qwen3ForCausalLM",
        decilm="has no q/k norms",
        plugin=True,
        plain=_RUNTIMES,
        layout=Layout(qkv_bias=("attention_bias", False), o_bias=("attention_bias", False), qk_norm="head"),
    ),
    "qwen3_moe": Family(
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        plugin=True,
        decilm="has no q/k norms or experts",
        down=EXPERTS_DOWN,
        layout=Layout(
            qkv_bias=("attention_bias", False),
            o_bias=("attention_bias", False),
            qk_norm="head",
            experts=Experts(
                ("num_experts", "num_local_experts"), 128, 8, "moe_intermediate_size", 768, sparse_layers=True
            ),
        ),
    ),
    "mixtral": Family(
        "MixtralConfig",
        "MixtralForCausalLM",
        plugin=True,
        decilm="has no experts",
        down=((r"block_sparse_moe\.experts\.\d+\.w2\.weight", 0),),  # Mixtral's checkpoint names
        layout=Layout(experts=Experts(("num_local_experts", "num_experts"), 8, 2, "intermediate_size")),
    ),
    "qwen2_moe": Family(
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        plugin=True,
        decilm="has no q/k/v biases or experts",
        down=(*EXPERTS_DOWN, (r"mlp\.shared_expert\.down_proj\.weight", 0)),
        layout=Layout(
            qkv_bias=("qkv_bias", True),
            experts=Experts(
                ("num_experts",), 60, 4, "moe_intermediate_size", 1408, shared_default=5632, sparse_layers=True
            ),
        ),
    ),
    "olmoe": Family(
        "OlmoeConfig",
        "OlmoeForCausalLM",
        plugin=True,
        decilm="has no q/k norms or experts",
        down=EXPERTS_DOWN,
        layout=Layout(
            qkv_bias=("attention_bias", False),
            o_bias=("attention_bias", False),
            qk_norm="width",
            experts=Experts(("num_experts", "num_local_experts"), 64, 8, "intermediate_size"),
        ),
    ),
    "gpt_oss": Family(
        "GptOssConfig",
        "GptOssForCausalLM",
        plugin=True,
        decilm="has no attention sinks or experts",
        fold="is not written for gpt-oss: its checkpoints hold the experts in MXFP4 (down_proj_blocks, "
        "down_proj_scales), which a fold would have to quantize again",
        layout=Layout(
            qkv_bias=("attention_bias", True),
            o_bias=("attention_bias", True),
            sinks=True,
            head_dim_default=64,
            experts=Experts(("num_local_experts", "num_experts"), 128, 4, "intermediate_size", bias=True, fused=True),
        ),
    ),
    "phi3": Family(
        "Phi3Config",
        "Phi3ForCausalLM",
        decilm="fuses q, k, v (qkv_proj) and gate, up (gate_up_proj)",
        plugin=True,
    ),
    # Gemma: a norm after attention (in the branch) and after the MLP, between down_proj and the residual: a map
    # folded into down_proj would pass through post_feedforward_layernorm, so fold is not exact
    "gemma2": Family(
        "Gemma2Config",
        "Gemma2ForCausalLM",
        attn=GEMMA_ATTN,
        plugin=True,
        ln2="pre_feedforward_layernorm",
        decilm="has norms after attention and MLP, soft-capping and GeGLU",
        fold="is not exact: post_feedforward_layernorm sits between down_proj and the residual",
        layout=Layout(norms=4, branch_norms=2),
    ),
    "gemma3_text": Family(
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        attn=GEMMA_ATTN,
        plugin=True,
        ln2="pre_feedforward_layernorm",
        decilm="has norms after attention and MLP, q/k norms and GeGLU",
        fold="is not exact: post_feedforward_layernorm sits between down_proj and the residual",
        layout=Layout(qk_norm="head", norms=4, branch_norms=2),
    ),
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


def classes(family: str) -> tuple[str, str]:
    """(config class, causal LM class) of a family in transformers."""
    return FAMILIES[family].config, FAMILIES[family].model
