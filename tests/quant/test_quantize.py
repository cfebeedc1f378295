"""Each scheme on a tiny Llama through llm-compressor in the quantization venv (worker/publish/quantize.py): the
checkpoint's quantization_config is compressed-tensors with the scheme asked for, it reloads in transformers
(the venv's), and its logits stay within the scheme's error of the unquantized model's; the head stays as it was.
Refusals come before anything runs: an nbl-form or DeciLM output, GPTQ without data."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from testkit.models import save_tiny_checkpoint

from worker.quant.quantize import quantize

# relative L2 error of the logits on 4 x 16 tokens, measured on this tiny random model with a margin (its weights
# are N(0, 0.02), the hardest case for a per-group scale): fp8 0.059, w8a8 0.015, w4a16 0.18; deterministic
WITHIN = {"fp8-dynamic": 0.15, "w8a8": 0.05, "w4a16": 0.35}
METHOD = {"fp8-dynamic": "round-to-nearest", "w8a8": "smoothquant+gptq", "w4a16": "gptq"}
FORMAT = {
    "fp8-dynamic": ("float-quantized", 8, "float"),
    "w8a8": ("int-quantized", 8, "int"),
    "w4a16": ("pack-quantized", 4, "int"),
}
LOGITS = """
import json, sys, torch
from transformers import AutoModelForCausalLM
torch.manual_seed(0)
ids = torch.randint(3, 100, (4, 16))
out = [AutoModelForCausalLM.from_pretrained(p, dtype=torch.float32).eval()(ids).logits for p in sys.argv[1:3]]
print(json.dumps({"error": ((out[1] - out[0]).norm() / out[0].norm()).item()}))
"""


def norms(path: Path) -> dict:
    """The checkpoint's RMSNorm weights by name: SmoothQuant divides them by its scales, nothing else touches them."""
    from safetensors.torch import load_file

    return {k: v.float() for f in path.glob("*.safetensors") for k, v in load_file(f).items() if "layernorm" in k}


def smoothed(base: Path, quantized: Path) -> set[str]:
    """The norms that SmoothQuant changed."""
    import torch

    before, after = norms(base), norms(quantized)
    return {k for k in before if not torch.equal(before[k], after[k])}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return save_tiny_checkpoint(tmp_path_factory.mktemp("q") / "base", hidden_size=128, intermediate_size=256, layers=2)


def blocks() -> list[list[int]]:
    return [[(7 * i + j) % 90 + 3 for j in range(32)] for i in range(8)]


@pytest.mark.parametrize("scheme", sorted(WITHIN))
def test_each_scheme_writes_compressed_tensors_that_reload_close(scheme, base, quant_python, tmp_path):
    facts = quantize(base, tmp_path / scheme, scheme, blocks(), python=quant_python, timeout_s=600)
    config = json.loads((tmp_path / scheme / "config.json").read_text())
    q = config["quantization_config"]
    assert q["quant_method"] == "compressed-tensors" and q["format"] == FORMAT[scheme][0]
    weights = q["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["type"], weights["symmetric"]) == (*FORMAT[scheme][1:], True)
    if scheme == "w4a16":
        assert weights["group_size"] == 128 and weights["strategy"] == "group"
    assert facts["unquantized"] == ["lm_head"] and facts["llmcompressor"] == "0.14.0.1"
    assert facts["calibration_tokens"] == (0 if scheme == "fp8-dynamic" else 8 * 32)
    assert json.loads((tmp_path / scheme / "quantization.json").read_text())["preset"] == facts["preset"]
    assert facts["method"] == METHOD[scheme]
    # w8a8's SmoothQuant (llm-compressor's INT8 recipe) moved every layer's activation outliers into its weights
    every = {f"model.layers.{i}.{n}.weight" for i in range(2) for n in ("input_layernorm", "post_attention_layernorm")}
    assert smoothed(base, tmp_path / scheme) == (every if scheme == "w8a8" else set())
    run = subprocess.run(
        [str(quant_python), "-c", LOGITS, str(base), str(tmp_path / scheme)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    error = json.loads(run.stdout.strip().splitlines()[-1])["error"]
    assert 0 < error < WITHIN[scheme], error  # changed (quantized), but within the scheme's error


def test_forms_other_than_fold_and_gptq_without_data_are_refused(base, tmp_path):
    nbl = tmp_path / "nbl"
    nbl.mkdir()
    (nbl / "config.json").write_text(json.dumps({"model_type": "nbl_llama", "nbl": {"layers": [1]}}))
    with pytest.raises(ValueError, match="only a fold output"):
        quantize(nbl, tmp_path / "out", "w8a8", blocks())
    deci = tmp_path / "deci"  # a DeciLM whose code is not ours: trust_remote_code would run it, so refused
    deci.mkdir()
    (deci / "config.json").write_text(json.dumps({"model_type": "nemotron-nas", "hidden_size": 128}))
    (deci / "modeling_decilm.py").write_text("import os  # anything\n")
    with pytest.raises(ValueError, match="DeciLM with our code"):
        quantize(deci, tmp_path / "out", "w8a8", blocks())
    with pytest.raises(ValueError, match="one of fp8-dynamic, w8a8, w4a16"):
        quantize(base, tmp_path / "out", "int3", blocks())
    odd = save_tiny_checkpoint(tmp_path / "odd", hidden_size=64, intermediate_size=200, layers=1)
    with pytest.raises(ValueError, match="intermediate_size 200 is not a multiple of 32"):
        quantize(odd, tmp_path / "out", "w4a16", blocks())


@pytest.mark.parametrize("scheme", ["w8a8", "w4a16"])
def test_a_fold_attn_output_a_decilm_is_quantized_through_our_code_and_reloads_close(
    scheme, base, quant_python, tmp_path, text_file
):
    """Form fold, mode attn: a DeciLM with attention no_op in the replaced layer (our modeling_decilm.py, byte for
    byte): llm-compressor loads it with trust_remote_code, the copy keeps our file, and the worker's own loader
    (worker/eval/compressed.py, as the evaluation loads it) gives logits within the scheme's error."""
    import torch

    from cli.main import main
    from worker.eval.compressed import load_compressed

    out = tmp_path / "o"
    flags = "--mode attn --form fold --num-samples 8 --seq-len 32 --k 1 --no-load-check".split()
    assert main(["compress", "--model", str(base), "--dataset", str(text_file), *flags, "--out", str(out)]) == 0
    facts = quantize(out, tmp_path / scheme, scheme, blocks(), python=quant_python, timeout_s=600)
    config = json.loads((tmp_path / scheme / "config.json").read_text())
    assert config["model_type"] == "nemotron-nas" and config["quantization_config"]["format"] == FORMAT[scheme][0]
    assert facts["unquantized"] == ["lm_head"]
    assert (tmp_path / scheme / "modeling_decilm.py").read_bytes() == (out / "modeling_decilm.py").read_bytes()
    # SmoothQuant's mappings resolve on the DeciLM too: only where a layer has the part (layer 1's attention is
    # no_op, its input_layernorm an identity with no weight)
    every = {
        "model.layers.0.input_layernorm.weight",
        *(f"model.layers.{i}.post_attention_layernorm.weight" for i in (0, 1)),
    }
    assert smoothed(out, tmp_path / scheme) == (every if scheme == "w8a8" else set())
    torch.manual_seed(0)
    ids = torch.randint(3, 100, (4, 16))
    ref = load_compressed(out, torch.float32, "cpu").model(ids).logits
    got = load_compressed(tmp_path / scheme, torch.float32, "cpu").model(ids).logits
    error = ((got - ref).norm() / ref.norm()).item()
    assert 0 < error < WITHIN[scheme], error


# w8a8's SmoothQuant on each family's layout (integrations/quant/quantize.layer_mappings): a norm is divided by its
# scales only where the projections that read it are balanced by them. Dense layers smooth both norms; a mixture's
# experts are left to GPTQ (attention alone is balanced, as llm-compressor does for Mixtral and Qwen-MoE); Gemma's
# norms scale by (1 + weight), which dividing the weight gets wrong, so Gemma gets GPTQ alone and says so.
FAMILY_LAYERS = 2
BOTH = ("input_layernorm", "post_attention_layernorm")
EXPECTED = {  # family -> the norms smoothed in every layer, and quantization.json's method
    "qwen3": (BOTH, "smoothquant+gptq"),
    "phi3": (BOTH, "smoothquant+gptq"),  # fused qkv_proj and gate_up_proj
    "qwen3_moe": (("input_layernorm",), "smoothquant+gptq"),
    "mixtral": (("input_layernorm",), "smoothquant+gptq"),
    "gemma3_text": ((), "gptq"),
}


@pytest.mark.slow  # 10 s each: make test runs them, make test-fast has the Llama and DeciLM cases above
@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_smoothquant_divides_only_the_norms_it_balances(family, quant_python, tmp_path):
    base = save_tiny_checkpoint(tmp_path / "base", family, layers=FAMILY_LAYERS)
    facts = quantize(base, tmp_path / "w8a8", "w8a8", blocks(), python=quant_python, timeout_s=600)
    norms, method = EXPECTED[family]
    assert facts["method"] == method
    assert smoothed(base, tmp_path / "w8a8") == {
        f"model.layers.{i}.{n}.weight" for i in range(FAMILY_LAYERS) for n in norms
    }
    config = json.loads((tmp_path / "w8a8" / "config.json").read_text())
    assert config["quantization_config"]["format"] == "int-quantized"
