"""Compressed outputs run in vLLM (nbl_vllm plugin) exactly as in transformers: 3 prompts, 16 greedy
tokens in fp32, identical tokens, log-probabilities within 1e-3, and a KV cache whose capacity is
what the layers that keep attention need (replaced layers build no attention module, so no cache)."""

import pytest
from plan import LOGPROB_TOL, OUTPUTS, kv_cache_tokens

pytestmark = pytest.mark.slow


def _result(served, name):
    got = served[name]
    if "error" in got:
        pytest.fail(f"vLLM could not run {name}:\n{got['error']}")
    return got


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_tokens_and_logprobs_match_transformers(name, reference, served):
    ref, got = reference[name], _result(served, name)
    assert len(ref["nbl"]["layers"]) == OUTPUTS[name][3]
    assert got["tokens"] == ref["tokens"], name
    worst = max(abs(a - b) for la, lb in zip(got["logprobs"], ref["logprobs"]) for a, b in zip(la, lb))
    assert worst <= LOGPROB_TOL, (name, worst)


@pytest.mark.parametrize("name", list(OUTPUTS))
def test_kv_cache_holds_only_the_kept_attention_layers(name, reference, served):
    ref, got = reference[name], _result(served, name)
    kept, full = ref["attention_layers"], ref["num_layers"]
    per, block = ref["kv_bytes_per_token_layer"], got["block_size"]
    assert got["kv_cache_tokens"] == kv_cache_tokens(kept, per, block)
    # against the base with every layer attending: the ratio full/kept, up to one block of rounding
    base = kv_cache_tokens(full, per, block)
    assert abs(got["kv_cache_tokens"] * kept - base * full) <= block * full


def test_smollm2_outputs_replace_layer_0_and_the_last_layers(reference):
    """The outputs cover both places: layer 0 (the first layer gets no residual in vLLM) and the
    last layer (its output feeds the final norm), in attn mode, and the last layers in block mode."""
    assert reference["smollm2-attn-nbl-layer0"]["nbl"]["layers"] == [0]
    assert 29 in reference["smollm2-attn-nbl-k4"]["nbl"]["layers"]
    assert reference["smollm2-block-nbl-k2"]["nbl"]["layers"] == [28, 29]
    assert {r["nbl"]["mode"] for r in reference.values() if r["nbl"].get("mode")} == {"attn", "block"}
    assert {r["nbl"]["method"] for r in reference.values() if r["nbl"].get("method")} == {"nbl", "drop"}


def test_smollm2_kv_cache_measured_against_the_base(reference, served):
    base = _result(served, "smollm2-base")["kv_cache_tokens"]
    for name in OUTPUTS:
        if name.startswith("smollm2-") and name != "smollm2-base":
            r, got = reference[name], _result(served, name)["kv_cache_tokens"]
            block = served[name]["block_size"]
            assert abs(got * r["attention_layers"] - base * r["num_layers"]) <= block * r["num_layers"], name
