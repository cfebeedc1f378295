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

from nbl.family_entry import Family, Key
from nbl.layer_layout import Experts, Layout

GEMMA_ATTN = ("input_layernorm", "self_attn", "post_attention_layernorm")
EXPERTS_DOWN = ((r"mlp\.experts\.\d+\.down_proj\.weight", 0),)


_RUNTIMES = ("vllm", "sglang", "tensorrt-llm", "llama.cpp")  # each runs Llama, Mistral, Qwen2 and Qwen3 as is
# vLLM: a fold block output of the family token-exact in vLLM CPU (tests/serving/test_vllm_forms.py); SGLang and
# TensorRT-LLM: the class in their model registries (sglang/srt/models/{llama (Phi3ForCausalLM), mixtral, qwen2_moe,
# qwen3_moe, olmoe}.py; tensorrt_llm/_torch/models/modeling_{phi3, mixtral, qwen_moe, qwen3_moe}.py, no OLMoE)
_SERVERS = ("vllm", "sglang", "tensorrt-llm")
# llama.cpp's Qwen MoE graphs (src/models/qwen2moe.cpp, qwen3moe.cpp) give every layer a router (ffn_gate_inp is
# required by load_arch_tensors), so a config with dense layers among the sparse ones has no GGUF
_QWEN_SPARSE = (
    ("decoder_sparse_step", 1, 1, "load_arch_tensors: every layer a router"),
    ("mlp_only_layers", [], [], "load_arch_tensors: every layer a router"),
)
FAMILIES: dict[str, Family] = {
    "llama": Family(
        "LlamaConfig",
        "LlamaForCausalLM",
        plugin=True,
        gguf="llama",
        plain=_RUNTIMES,
        layout=Layout(
            qkv_bias=("attention_bias", False), o_bias=("attention_bias", False), mlp_bias=("mlp_bias", False)
        ),
    ),
    "mistral": Family("MistralConfig", "MistralForCausalLM", window=4096, plugin=True, plain=_RUNTIMES, gguf="llama"),
    "qwen2": Family(
        "Qwen2Config",
        "Qwen2ForCausalLM",
        decilm="has no q/k/v biases",
        plugin=True,
        gguf="qwen2",
        # llama.cpp's converter knows a Qwen2 vocabulary by its hash only, and transformers loads any tokenizer
        # beside a qwen2 config as Qwen2Tokenizer: without a real Qwen vocabulary offline, not tested there
        untested=("llama.cpp",),
        plain=_RUNTIMES,
        layout=Layout(qkv_bias=True),
    ),
    "qwen3": Family(
        "Qwen3Config",
        "Qwen3ForCausalLM",
        decilm="has no q/k norms",
        plugin=True,
        gguf="qwen3",
        plain=_RUNTIMES,
        layout=Layout(qkv_bias=("attention_bias", False), o_bias=("attention_bias", False), qk_norm="head"),
    ),
    "qwen3_moe": Family(
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        plain=(*_SERVERS, "llama.cpp"),
        plugin=True,
        decilm="has no q/k norms or experts",
        gguf="qwen3moe",
        gguf_fixed=(
            ("norm_topk_prob", True, False, "src/models/qwen3moe.cpp build_moe_ffn(norm_w=true)"),
            *_QWEN_SPARSE,
        ),
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
        plain=(*_SERVERS, "llama.cpp"),
        plugin=True,
        decilm="has no experts",
        gguf="llama",  # llama.cpp's llama with experts (ffn_*_exps)
        down=((r"block_sparse_moe\.experts\.\d+\.w2\.weight", 0),),  # Mixtral's checkpoint names
        layout=Layout(experts=Experts(("num_local_experts", "num_experts"), 8, 2, "intermediate_size")),
    ),
    "qwen2_moe": Family(
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        plain=(*_SERVERS, "llama.cpp"),
        plugin=True,
        decilm="has no q/k/v biases or experts",
        gguf="qwen2moe",
        gguf_fixed=(
            ("norm_topk_prob", False, False, "src/models/qwen2moe.cpp build_moe_ffn(norm_w=false)"),
            *_QWEN_SPARSE,
        ),
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
        plain=("vllm", "sglang", "llama.cpp"),
        plugin=True,
        decilm="has no q/k norms or experts",
        gguf="olmoe",
        gguf_fixed=(
            ("norm_topk_prob", False, False, "src/models/olmoe.cpp build_moe_ffn(norm_w=false)"),
            ("rms_norm_eps", 1e-5, 1e-5, "the converter's OlmoeModel.set_gguf_parameters writes 1e-5"),
            # its q/k norms span all heads, and llama.cpp sizes attn_k_norm n_embd: as many k/v heads as queries
            (
                "num_key_value_heads",
                Key("num_attention_heads"),
                Key("num_attention_heads"),
                "src/models/olmoe.cpp load_arch_tensors: attn_k_norm {n_embd}",
            ),
        ),
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
        no_gguf="llama.cpp has gpt-oss (conversion/gpt_oss.py), but no output of ours is a plain gpt-oss with "
        "layers removed (form fold is refused: MXFP4 experts), and the converter's MXFP4 path is not tested here",
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
        plain=(*_SERVERS, "llama.cpp"),
        decilm="fuses q, k, v (qkv_proj) and gate, up (gate_up_proj)",
        gguf="phi3",
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
        gguf="gemma2",
        gguf_fixed=(
            ("tie_word_embeddings", True, True, "conversion/gemma.py Gemma2Model.filter_tensors drops lm_head"),
        ),
        gguf_swa=2,
        gguf_scale=(46, 256),
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
        gguf="gemma3",
        gguf_swa=6,
        gguf_scale=(62, 256),
        layout=Layout(qk_norm="head", norms=4, branch_norms=2),
    ),
}


@dataclass(frozen=True)
class TextPart:
    """A multimodal family whose language model is a family of the table: a job compresses that text part, and
    its output is the text model alone (worker/engine/loading/text_part.py writes it before anything reads it)."""

    family: str  # the text model's family (its text_config's model_type)
    prefixes: tuple[tuple[str, str], ...]  # the checkpoint's text-model tensor prefixes -> the text model's own
    # the text config class's defaults for the shape's keys: a Hub config.json's text_config holds only what differs
    # from them (google/gemma-3-4b-it's: hidden_size, intermediate_size, num_hidden_layers...), and the API sizes it
    # without transformers (a test holds these equal to transformers' own)
    defaults: tuple[tuple[str, object], ...] = ()


GEMMA3_TEXT_DEFAULTS = (
    ("vocab_size", 262208),
    ("hidden_size", 2304),
    ("intermediate_size", 9216),
    ("num_hidden_layers", 26),
    ("num_attention_heads", 8),
    ("num_key_value_heads", 4),
    ("head_dim", 256),
    ("max_position_embeddings", 131072),
    ("sliding_window", 4096),
)
TEXT_PARTS = {
    "gemma3": TextPart(
        "gemma3_text",
        (("language_model.model.", "model."), ("language_model.lm_head.", "lm_head.")),
        GEMMA3_TEXT_DEFAULTS,
    ),
}


def text_model_config(config: dict) -> dict:
    """The config of the model a job compresses: a multimodal config's text_config (as its text family, with the
    head's tying), else the config itself."""
    part = TEXT_PARTS.get(config.get("model_type"))
    inner = config.get("text_config")
    if part is None or not isinstance(inner, dict) or inner.get("model_type", part.family) != part.family:
        return config
    tied = config.get("tie_word_embeddings", inner.get("tie_word_embeddings", True))
    dtypes = {k: config[k] for k in ("torch_dtype", "dtype") if k in config and k not in inner}
    head = {"model_type": part.family, "architectures": [FAMILIES[part.family].model], "tie_word_embeddings": tied}
    return {**dict(part.defaults), **dtypes, **inner, **head}


def family_error(config: dict, families=tuple(FAMILIES)) -> str | None:
    """Why a config's family cannot be compressed (None: it can). `families`: those this process can load
    (the worker: the table's that its transformers has). A multimodal family of TEXT_PARTS is its text part's."""
    family = text_model_config(config).get("model_type")
    if family in families:
        return None
    short = family is None or isinstance(family, str) and len(family) <= 64  # a config is user input: no megabyte repr
    shown = repr(family) if short else f"a {type(family).__name__}"
    parts = [f"{m} (its text part)" for m, part in TEXT_PARTS.items() if part.family in families]
    return f"architecture {shown} is not supported; supported: {', '.join([*families, *parts])}"


def classes(family: str) -> tuple[str, str]:
    """(config class, causal LM class) of a family in transformers."""
    return FAMILIES[family].config, FAMILIES[family].model
