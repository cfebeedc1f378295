"""publish.formats and publish.dtype in the request schema, the Recipe, and what exports (nbl/outputs/gguf_formats.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from nbl.families import FAMILIES
from nbl.outputs.gguf_assumed import resolved, swa_layers
from nbl.outputs.gguf_formats import gguf_arch, gguf_types
from nbl.recipe import from_request
from nbl.request import JobCreate

BASE = {"model": {"id": "HuggingFaceTB/SmolLM2-135M-Instruct"}, "compression": {"k": 2}}


def job(**publish) -> JobCreate:
    return JobCreate.model_validate({**BASE, "publish": {"local_dir": "out", **publish}})


def test_defaults_dump_as_before_and_reach_the_recipe():
    spec = job()
    assert "formats" not in spec.model_dump()["publish"] and "dtype" not in spec.model_dump()["publish"]
    pub = from_request(spec).publishing
    assert pub.formats == ("safetensors",) and pub.dtype == "auto"
    pub = from_request(job(formats=["safetensors"], dtype="bfloat16")).publishing
    assert pub.formats == ("safetensors",) and pub.dtype == "bfloat16"


@pytest.mark.parametrize(
    "formats, needle",
    [
        (["gguf:q4_k_m"], 'must include "safetensors"'),
        (["safetensors", "gguf:q5_k"], "unknown GGUF type 'q5_k'"),
        (["safetensors", "onnx"], "unknown format 'onnx'"),
        (["safetensors", "gguf"], "unknown format 'gguf'"),
        (["safetensors", "safetensors"], "distinct"),
        ([], "at least 1"),
        ("safetensors", "valid list"),
    ],
)
def test_bad_formats_are_refused(formats, needle):
    with pytest.raises(ValidationError, match=needle):
        job(formats=formats)


@pytest.mark.parametrize("dtype", ["fp16", "int8", "", 16, "BF16"])
def test_bad_dtype_is_refused(dtype):
    with pytest.raises(ValidationError, match="dtype"):
        job(dtype=dtype)


def test_gguf_of_an_nbl_form_output_is_refused():
    # compression.form defaults to nbl, which has no GGUF architecture: a gguf format asks for one that exports
    with pytest.raises(ValidationError, match="needs compression.form linear or fold"):
        job(formats=["safetensors", "gguf:q4_k_m"])


def test_gguf_types_and_archs():
    assert gguf_types(["safetensors", "gguf:f16", "gguf:q4_k_m"]) == ["f16", "q4_k_m"]
    assert gguf_arch({"architectures": ["LlamaForCausalLM"]}) == "llama"
    assert gguf_arch({"architectures": ["Qwen3ForCausalLM"]}) == "qwen3"
    assert gguf_arch({"architectures": ["DeciLMForCausalLM"], "block_configs": []}) == "deci"
    with pytest.raises(ValueError, match="nbl-form output .* what exports: a `fold` output"):
        gguf_arch({"architectures": ["NblLlamaForCausalLM"], "model_type": "nbl_llama", "nbl": {}})
    with pytest.raises(ValueError, match="DeciLM without block_configs"):
        gguf_arch({"architectures": ["DeciLMForCausalLM"]})
    with pytest.raises(ValueError, match="GGUF export takes LlamaForCausalLM"):
        gguf_arch({"architectures": ["GPT2LMHeadModel"]})


def test_what_llama_cpp_deci_cannot_run_is_refused():
    cfg = {
        "architectures": ["DeciLMForCausalLM"],
        "block_configs": [
            {
                "attention": {"no_op": True, "replace_with_linear": False, "n_heads_in_group": None},
                "ffn": {"no_op": False, "replace_with_linear": True, "ffn_mult": None},
            }
        ],
    }
    with pytest.raises(ValueError, match="ffn replace_with_linear .* fold form"):
        gguf_arch(cfg)
    from nbl.outputs.gguf_formats import refuse_form

    refuse_form("fold", "block")
    refuse_form("linear", "attn")
    with pytest.raises(ValueError, match="form linear needs mode attn"):
        refuse_form("linear", "block")


def test_each_family_exports_as_its_entrys_llama_cpp_arch():
    for family, entry in FAMILIES.items():
        if entry.gguf:
            cfg = {"architectures": [entry.model], "model_type": family, "num_hidden_layers": 4, "sliding_window": None}
            fixed = {k: resolved(v, cfg) for k, v, _, _ in entry.gguf_fixed}
            if entry.gguf_swa:  # Gemma: the layer types llama.cpp derives, the scale it takes below the 27B
                fixed.update(layer_types=swa_layers(4, entry.gguf_swa), hidden_size=64, num_attention_heads=4)
                fixed.update(head_dim=16, query_pre_attn_scalar=16)
            assert gguf_arch({**cfg, **fixed}) == entry.gguf, family
    assert gguf_arch({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral"}) == "llama"
    with pytest.raises(ValueError, match="GptOssForCausalLM, which GGUF export does not take: .*MXFP4"):
        gguf_arch({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"})


@pytest.mark.parametrize(
    "family, cls, extra, needle",
    [
        ("qwen3_moe", "Qwen3MoeForCausalLM", {}, "norm_topk_prob = False, and llama.cpp's qwen3moe assumes True"),
        ("qwen2_moe", "Qwen2MoeForCausalLM", {"norm_topk_prob": True}, "qwen2moe.cpp build_moe_ffn(norm_w=false)"),
        ("qwen2_moe", "Qwen2MoeForCausalLM", {"mlp_only_layers": [1]}, "mlp_only_layers = [1], and llama.cpp's"),
        ("qwen2_moe", "Qwen2MoeForCausalLM", {"decoder_sparse_step": 2}, "every layer a router"),
        (
            "olmoe",
            "OlmoeForCausalLM",
            {"num_attention_heads": 4, "num_key_value_heads": 2},
            "num_key_value_heads = 2, and llama.cpp's olmoe assumes 4 (src/models/olmoe.cpp",
        ),
        ("olmoe", "OlmoeForCausalLM", {"rms_norm_eps": 1e-6}, "OlmoeModel.set_gguf_parameters writes 1e-5"),
        ("gemma2", "Gemma2ForCausalLM", {"tie_word_embeddings": False}, "Gemma2Model.filter_tensors drops lm_head"),
    ],
)
def test_what_llama_cpp_assumes_otherwise_is_refused(family, cls, extra, needle):
    cfg = {"architectures": [cls], "model_type": family, "num_hidden_layers": 4, **extra}
    with pytest.raises(ValueError, match="its GGUF would compute another model") as e:
        gguf_arch(cfg)
    assert needle in str(e.value) and "\n" not in str(e.value)


GEMMA3 = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "head_dim": 16,
    "query_pre_attn_scalar": 16,
}


def test_gemma_layer_types_must_be_llama_cpps_positional_pattern():
    # 12 layers: global at 5 and 11, as llama.cpp's set_swa_pattern(6) derives; absent, transformers derives the same
    types = swa_layers(12, 6)
    assert [i for i, t in enumerate(types) if t == "full_attention"] == [5, 11]
    assert gguf_arch({**GEMMA3, "num_hidden_layers": 12, "layer_types": types}) == "gemma3"
    assert gguf_arch({**GEMMA3, "num_hidden_layers": 12}) == "gemma3"
    # layer 3 removed: the kept layers' types put the global layers at 4 and 10
    kept = [t for i, t in enumerate(types) if i != 3]
    with pytest.raises(ValueError, match=r"global attention at layers \[4, 10\] .*: \[5\] .*set_swa_pattern\(6\)"):
        gguf_arch({**GEMMA3, "num_hidden_layers": 11, "layer_types": kept})
    with pytest.raises(ValueError, match="global attention at layers"):
        gguf_arch({**GEMMA3, "num_hidden_layers": 12, "sliding_window_pattern": 4})
    gemma2 = {**GEMMA3, "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "num_hidden_layers": 4}
    assert gguf_arch({**gemma2, "layer_types": ["sliding_attention", "full_attention"] * 2}) == "gemma2"
    with pytest.raises(ValueError, match=r"global attention at layers \[0, 2\] .*: \[1, 3\] .*set_swa_pattern\(2\)"):
        gguf_arch({**gemma2, "layer_types": ["full_attention", "sliding_attention"] * 2})


def test_gemma_attention_scale_is_llama_cpps_for_the_layer_count():
    # llama.cpp reads 62 Gemma 3 layers as the 27B, scaled by 1/sqrt(hidden / heads), any other count 1/sqrt(head_dim)
    big = {**GEMMA3, "hidden_size": 5376, "num_attention_heads": 32, "head_dim": 128, "query_pre_attn_scalar": 168}
    assert gguf_arch({**big, "num_hidden_layers": 62}) == "gemma3"
    with pytest.raises(ValueError, match="query_pre_attn_scalar 168, and llama.cpp's gemma3 by 128"):
        gguf_arch({**big, "num_hidden_layers": 60, "layer_types": swa_layers(60, 6)})
    with pytest.raises(ValueError, match="query_pre_attn_scalar 256"):  # transformers' default, head_dim 16
        gguf_arch({**{k: v for k, v in GEMMA3.items() if k != "query_pre_attn_scalar"}, "num_hidden_layers": 6})


def test_llama_cpp_is_claimed_only_where_a_test_decodes_it():
    """runs_in names llama.cpp for a fold block output where the entry's `plain` has it: each such family names its
    architecture, and test_gguf_forms.py decodes its output token-exact unless the entry says it is untested."""
    from test_gguf_forms import FOLD_GGUF

    from nbl.families import FAMILIES
    from nbl.outputs.forms import runs_in

    claimed = [f for f, entry in FAMILIES.items() if "llama.cpp" in runs_in("fold", "block", "nbl", f)]
    assert {"phi3", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe"} <= set(claimed)
    for family in claimed:
        assert FAMILIES[family].gguf and (family in FOLD_GGUF or "llama.cpp" in FAMILIES[family].untested), family


@pytest.mark.parametrize(
    "family, cls, extra, refused",
    [
        ("mistral", "MistralForCausalLM", {"sliding_window": 4096, "max_position_embeddings": 32768}, True),
        ("mistral", "MistralForCausalLM", {"max_position_embeddings": 32768}, True),  # MistralConfig's 4096
        ("mistral", "MistralForCausalLM", {"sliding_window": None, "max_position_embeddings": 32768}, False),
        ("phi3", "Phi3ForCausalLM", {"sliding_window": 2047, "max_position_embeddings": 4096}, True),  # mini-4k
        ("phi3", "Phi3ForCausalLM", {"sliding_window": 262144, "max_position_embeddings": 131072}, False),
        ("qwen2", "Qwen2ForCausalLM", {"sliding_window": 4096, "use_sliding_window": False}, False),
    ],
)
def test_a_window_llama_cpp_does_not_apply_is_refused(family, cls, extra, refused):
    cfg = {"architectures": [cls], "model_type": family, "num_hidden_layers": 4, **extra}
    if not refused:
        assert gguf_arch(cfg)
        return
    with pytest.raises(ValueError, match=r"sliding window of \d+ tokens, which transformers applies") as e:
        gguf_arch(cfg)
    assert f"src/models/{FAMILIES[family].gguf}.cpp has no sliding window" in str(e.value)
