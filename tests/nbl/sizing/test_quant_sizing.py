"""The quantization stage in the estimate (issue 39): plan() prices each quantization per scheme (GPTQ per its
bounded calibration tokens, FP8 per layer), the evaluation counts the quantized outputs and bases, the kind names
the schemes, and the job's memory peak takes the quantization process' in, as measured on SmolLM2-135M."""

from __future__ import annotations

from dataclasses import replace

import pytest
from testkit.model_configs import LLAMA_70B

from nbl.recipe import from_request
from nbl.request import JobCreate
from nbl.sizing import quant
from nbl.sizing.job import job_options
from nbl.sizing.kinds import quantize_kind, stage_kinds
from nbl.sizing.model import estimate
from nbl.sizing.shapes import shape_of
from nbl.sizing.stage_plan import plan

L = 30
SMOLLM2 = {  # the converted SmolLM2-135M-Instruct the constants were measured on (float32, 538 MB)
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "dtype": "float32",
    "head_dim": 64,
    "hidden_size": 576,
    "intermediate_size": 1536,
    "max_position_embeddings": 8192,
    "num_attention_heads": 9,
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "tie_word_embeddings": True,
    "vocab_size": 49152,
}


def recipe(schemes=(), ks=(2, 4), samples=64, seq_len=256, evaluation=None):
    body = {
        "model": {"id": "local:m"},
        "calibration": {"num_samples": samples, "seq_len": seq_len},
        "compression": {"k": list(ks), "form": "fold", "mode": "block"},
        "publish": {"local_dir": "out", "quantize": list(schemes)},
    }
    if evaluation is not None:
        body["evaluation"] = evaluation
    return from_request(JobCreate.model_validate(body))


def test_no_scheme_no_quantization():
    cost = plan(recipe(), L)["quantize"]
    assert (cost.units, cost.weight, cost.unit) == (0, 0, "quantizations")


def test_each_output_and_the_base_once_per_scheme_gptq_by_its_tokens_fp8_by_its_layers():
    r = recipe(["w8a8"])
    assert not r.evaluation.empty()  # the default evaluation: the base is quantized for its comparison
    gptq = plan(r, L)["quantize"]
    models = (L - 2) + (L - 4) + L  # each fold block output of k has k layers fewer
    tokens = 64 * 256
    assert gptq.units == 3 and gptq.weight == pytest.approx(
        models * (quant.GPTQ_PER_LAYER + tokens * quant.GPTQ_PER_TOKEN_LAYER)
    )
    fp8 = plan(recipe(["fp8-dynamic"]), L)["quantize"]
    assert fp8.units == 3 and fp8.weight == pytest.approx(models * quant.RTN_PER_LAYER)
    both = plan(recipe(["w8a8", "fp8-dynamic"]), L)["quantize"]
    assert both.units == 6 and both.weight == pytest.approx(gptq.weight + fp8.weight)
    # more calibration: GPTQ's work grows with its tokens, FP8's does not
    assert plan(recipe(["w8a8"], samples=128), L)["quantize"].weight > gptq.weight
    assert plan(recipe(["fp8-dynamic"], samples=128), L)["quantize"].weight == fp8.weight


def test_gptq_calibrates_on_at_most_512_blocks_of_2048_tokens():
    big = recipe(["w4a16"], samples=512, seq_len=2048)
    bigger = replace(big, calibration=replace(big.calibration, num_samples=2048, seq_len=4096))
    assert quant.gptq_tokens(2048, 4096) == 512 * 2048
    assert plan(bigger, L)["quantize"].weight == plan(big, L)["quantize"].weight


def test_without_an_evaluation_the_base_is_not_quantized():
    ev = {"perplexity": []}
    r = recipe(["w8a8"], evaluation=ev)
    assert r.evaluation.empty()
    assert plan(r, L)["quantize"].units == 2  # the two outputs alone
    assert plan(r, L)["evaluate"].weight == 0


def test_the_evaluation_counts_the_quantized_outputs_and_bases():
    plain, q = plan(recipe(), L)["evaluate"], plan(recipe(["w8a8", "w4a16"]), L)["evaluate"]
    # outputs + base + outputs x schemes + schemes: 2 + 1 + 4 + 2 = 9 models against 3
    assert q.weight == pytest.approx(3 * plain.weight) and q.units == 3 * plain.units
    cached = plan(recipe(["w8a8", "w4a16"]), L, base_cached=True)["evaluate"]  # the quantized bases never are
    assert cached.weight == pytest.approx(q.weight * 8 / 9)


def test_the_kind_names_the_schemes_sorted():
    assert quantize_kind(recipe(["w8a8", "w4a16"])) == "quant:w4a16+quant:w8a8"
    assert stage_kinds(recipe(["fp8-dynamic"]), False)["quantize"] == "quant:fp8-dynamic"
    assert stage_kinds(recipe(["w8a8"]), False)["quantize"] != stage_kinds(recipe(["fp8-dynamic"]), False)["quantize"]
    assert "quantize" not in stage_kinds(recipe(), False)


def test_memory_of_one_quantization_against_smollm2s_measured_peak():
    shape = shape_of(SMOLLM2)
    d, i = 576, 1536
    assert quant.hessian_bytes(shape) == 4 * (6 * d * d + i * i)  # q k v o gate up: 576 inputs; down: 1536
    fwd = 4 * (8 * d + 3 * i)  # model.py's forward transients per token, float32
    # the largest peak RSS of each on 16 x 256 tokens (bench/quant_cost.py; quant.py)
    measured = {"fp8-dynamic": 1_497_620_480, "w8a8": 1_346_727_936, "w4a16": 1_575_165_952}
    for scheme, rss in measured.items():
        host = quant.quantize_memory(shape, (scheme,), 16, 256, False, fwd)["host"]
        assert rss <= host <= 1.3 * rss, scheme
    cpu = quant.quantize_memory(shape, ("w8a8",), 16, 256, False, fwd)
    gpu = quant.quantize_memory(shape, ("w8a8",), 16, 256, True, fwd)
    assert cpu["device"] == 0 and gpu["device"] > quant.hessian_bytes(shape)  # the layer and its Hessians
    assert gpu["host"] < cpu["host"]


def test_the_jobs_host_peak_takes_the_quantization_in():
    shape = shape_of(LLAMA_70B)  # on a GPU the job holds one layer on the host; llm-compressor the whole model
    r = recipe(["w8a8"], ks=(8,))
    plain = estimate(shape, job_options(replace(r, publishing=None), None), ["cuda:0"])
    est = estimate(shape, job_options(r, None), ["cuda:0"])
    assert "quantize" not in plain.phases
    assert est.phases["quantize"]["host"] > shape.params * 2  # bf16 weights, and more
    assert est.host_bytes == est.phases["quantize"]["host"] > plain.host_bytes
    assert est.seconds[0] > plain.seconds[0] and est.seconds[1] > plain.seconds[1]


def test_a_copy_on_disk_against_smollm2s_measured_sizes():
    """SmolLM2 fold block k=2 (28 layers) in bfloat16, quantized: w8a8 156.1 MB and w4a16 109.4 MB on disk
    (`nbl compress --form fold --mode block --k 2 --quantize w8a8,w4a16 --save-dtype auto`); the base's (30 layers) 163.2 and
    113.2 MB (worker/quant/quantize.quantize on the base)."""
    shape = shape_of(SMOLLM2)
    measured = {("w8a8", 28): 156_119_856, ("w4a16", 28): 109_405_328, ("w8a8", 30): 163_226_688}
    measured[("w4a16", 30)] = 113_175_416
    for (scheme, layers), size in measured.items():
        assert quant.copy_bytes(shape, scheme, layers, 2) == pytest.approx(size, rel=0.02), (scheme, layers)
    assert quant.copy_bytes(shape, "fp8-dynamic", 30, 2) == quant.copy_bytes(shape, "w8a8", 30, 2)


def test_the_estimates_disk_counts_each_outputs_copies_and_the_bases_while_evaluating():
    shape = shape_of(SMOLLM2)
    none, evaluation = {"perplexity": []}, {"perplexity": ["wikitext2"]}
    plain = estimate(shape, job_options(recipe(ks=(2, 4), evaluation=evaluation), None), ["cpu"])
    est = estimate(shape, job_options(recipe(["w8a8", "w4a16"], ks=(2, 4), evaluation=none), None), ["cpu"])
    ev = estimate(shape, job_options(recipe(["w8a8", "w4a16"], ks=(2, 4), evaluation=evaluation), None), ["cpu"])
    copy = lambda s, n: quant.copy_bytes(shape, s, n, 4)  # noqa: E731  # the base's stored float32 (publish.dtype auto)
    assert plain.disk["quantized"] == 0
    assert est.disk["quantized"] == sum(copy(s, n) for s in ("w8a8", "w4a16") for n in (28, 26))
    assert ev.disk["quantized"] == est.disk["quantized"] + copy("w8a8", 30) + copy("w4a16", 30)
    assert ev.disk_bytes - plain.disk_bytes == ev.disk["quantized"]
