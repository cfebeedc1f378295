"""What can be quantized, decided before llm-compressor runs (nbl/outputs/quant_schemes.py): the fold form (block:
the base's class; attn: a DeciLM with attention no_op), each other form refused with its reason; w4a16's group the largest of 128/64/32 dividing every input width
(SmolLM2's 576 takes 64), a width no group divides refused naming it."""

import pytest

from nbl.outputs.quant_schemes import SCHEMES, form_error, group_size, quantized_widths, shape_error

SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9, "head_dim": 64}


def test_only_fold_is_quantized_and_every_other_form_says_why():
    assert form_error("fold", "block") is None and form_error("fold", "attn") is None
    assert "plugin" in form_error("nbl", "attn") and "plugin" in form_error("nbl", "block")
    assert "replace_with_linear" in form_error("linear", "attn")


def test_the_group_is_the_largest_that_divides_every_width():
    assert group_size(quantized_widths(SMOLLM2).values()) == 64  # 576 = 9 x 64, not a multiple of 128
    assert group_size([4096, 14336, 4096]) == 128
    assert group_size([96, 160]) == 32
    assert group_size([100]) is None


def test_a_width_no_group_divides_is_refused_naming_it():
    why = shape_error("w4a16", {**SMOLLM2, "intermediate_size": 1000})
    assert why is not None and "intermediate_size 1,000" in why and "hidden_size" not in why
    assert shape_error("w8a8", {**SMOLLM2, "intermediate_size": 1000}) is None  # per channel: any width
    assert shape_error("w4a16", SMOLLM2) is None


def test_an_unknown_scheme_names_the_known_ones():
    assert shape_error("int3", SMOLLM2) == f"quantize 'int3': one of {', '.join(SCHEMES)}"


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_each_scheme_says_where_it_runs(scheme):
    assert any("vllm (GPU)" == r for r in SCHEMES[scheme].runs_in)
    assert ("vllm (x86 CPU" in " ".join(SCHEMES[scheme].runs_in)) == (scheme != "fp8-dynamic")  # no FP8 on CPU
