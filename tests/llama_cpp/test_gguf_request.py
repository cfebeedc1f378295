"""publish.formats and publish.dtype in the request schema, the Recipe, and what exports (nbl/outputs/gguf_formats.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

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
