"""Issue 37 §2, sizing a mixture of experts (nbl/sizing): the Shape counts every family's parameters as transformers
builds them, memory counts every expert, time counts the active ones (top-k of n, and any shared expert), each new
number of a config.json is bounded, and the dense families are sized as before; `nbl estimate` and
POST /v1/estimates give the same figures for the large MoE shapes of docs/sizing.md."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from testkit.model_configs import LLAMA_8B, LLAMA_70B, MIXTRAL_8X22B, QWEN3_235B_A22B, TINY, write_config

from nbl.families import FAMILIES
from nbl.sizing import model as sizing_model
from nbl.sizing.bounds import BOUNDS, MAX_DENSE_LAYERS
from nbl.sizing.classes import DEFAULT, parse_classes, place
from nbl.sizing.model import estimate
from nbl.sizing.options import Options
from nbl.sizing.shapes import (
    ParamCounts,
    ShapeError,
    is_moe_layer,
    layer_param_counts,
    out_of_bounds,
    param_counts,
    shape_of,
)
from nbl.sizing.spread import Spread

REPO = Path(__file__).resolve().parents[3]
GiB = 2**30

# A tiny config of each family, in transformers' config class: every number that sizes it, and ids inside the vocab
BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 256,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
TINY_FAMILIES = {
    "llama": ("LlamaConfig", {"intermediate_size": 96}),
    "llama-biases": (
        "LlamaConfig",
        {"intermediate_size": 96, "attention_bias": True, "mlp_bias": True, "head_dim": 24},
    ),
    "llama-tied": ("LlamaConfig", {"intermediate_size": 96, "tie_word_embeddings": True}),
    "mistral": ("MistralConfig", {"intermediate_size": 96, "head_dim": 32}),
    "qwen2": ("Qwen2Config", {"intermediate_size": 96}),
    "qwen3": ("Qwen3Config", {"intermediate_size": 96, "head_dim": 16}),
    "mixtral": ("MixtralConfig", {"intermediate_size": 32, "num_local_experts": 4, "num_experts_per_tok": 2}),
    # every other layer sparse, less layer 3 (and 0, dense anyway): layers 1 MoE, 0 2 3 4 dense
    "qwen2_moe": (
        "Qwen2MoeConfig",
        {
            "num_hidden_layers": 5,
            "intermediate_size": 96,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 48,
            "decoder_sparse_step": 2,
            "mlp_only_layers": [3, 0],
        },
    ),
    "qwen2_moe-no-bias": (
        "Qwen2MoeConfig",
        {
            "intermediate_size": 96,
            "num_experts": 4,
            "num_experts_per_tok": 1,
            "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 16,
            "qkv_bias": False,
        },
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        {
            "intermediate_size": 96,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 32,
            "head_dim": 16,
            "mlp_only_layers": [1],
        },
    ),
    "olmoe": ("OlmoeConfig", {"intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2}),
    "gpt_oss": (
        "GptOssConfig",
        {"intermediate_size": 32, "num_local_experts": 4, "num_experts_per_tok": 2, "head_dim": 16},
    ),
    "phi3": ("Phi3Config", {"intermediate_size": 96, "pad_token_id": 0}),
    # Gemma: four norms a layer, two of them in the attention branch; Gemma 3 adds q/k norms
    "gemma2": ("Gemma2Config", {"intermediate_size": 96, "head_dim": 16}),
    "gemma3_text": ("Gemma3TextConfig", {"intermediate_size": 96, "head_dim": 16}),
}


def tiny_model(name: str, **build):
    """(config.json as transformers writes it, the random model)."""
    import transformers

    cls, numbers = TINY_FAMILIES[name]
    config = getattr(transformers, cls)(**{**BASE, **numbers})
    return config.to_dict(), transformers.AutoModelForCausalLM.from_config(config, **build)


@pytest.mark.parametrize("name", list(TINY_FAMILIES))
def test_shape_counts_every_familys_parameters_as_transformers_builds_them(name):
    config, model = tiny_model(name)
    shape = shape_of(config)
    assert shape.params == sum(p.numel() for p in model.parameters())
    active = shape.params
    for i, layer in enumerate(model.model.layers):
        held = sum(p.numel() for p in layer.parameters())
        experts = getattr(layer.mlp, "experts", None)
        assert is_moe_layer(shape, i) == (experts is not None), i
        if experts is not None:  # a token goes through k of the n experts: the others are not active
            n, k = shape.experts, shape.experts_per_token
            active -= sum(p.numel() for p in experts.parameters()) * (n - k) // n
        # what NBL replaces in the layer: all of it (block), or its input norm and attention (attn)
        assert layer_param_counts(shape, i).total == held, i
        modules = [getattr(layer, name) for name in FAMILIES[config["model_type"]].attn]  # the family's branch
        branch = sum(p.numel() for m in modules for p in m.parameters())
        assert layer_param_counts(shape, i, "attn") == ParamCounts(branch, branch), i
    assert max(sum(p.numel() for p in layer.parameters()) for layer in model.model.layers) == shape.layer_params
    assert param_counts(shape) == ParamCounts(shape.params, active)
    assert shape_of({"model_type": config["model_type"], **BASE, **TINY_FAMILIES[name][1]}) == shape  # as hand-written


@pytest.mark.parametrize("name", ["llama", "qwen2", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "gpt_oss"])
def test_a_forwards_products_are_the_active_parameters(name):
    """The time's forward flops, 2 x active parameters per token: transformers' own forward, its matrix products
    counted (the experts run one by one, eager, so that each is seen), is 2 x T x every weight matrix a token goes
    through (its top-k experts, the router, a shared expert) and the LM head; the rest of the active parameters
    are norms, biases and sinks, added, not multiplied."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    config, model = tiny_model(name, experts_implementation="eager", attn_implementation="eager")
    shape = shape_of(config)
    T = 16
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model.eval()(torch.randint(3, shape.vocab, (1, T)))
    counts = counter.get_flop_counts()["Global"]
    products = counts.get(torch.ops.aten.mm, 0) + counts.get(torch.ops.aten.addmm, 0)  # addmm: a biased linear
    vectors = shape.layers * (2 * shape.hidden + shape.attn_extra)  # norms, attention biases, q/k norms, sinks
    if shape.expert_bias:  # each routed expert's gate_up and down biases, the router's
        vectors += shape.moe_layers * (
            shape.experts_per_token * (2 * shape.expert_intermediate + shape.hidden) + shape.experts
        )
    assert products == 2 * T * (shape.active_layers_params - vectors) + 2 * T * shape.embed_params
    assert shape.active_layer_params * shape.layers == shape.active_layers_params


@pytest.mark.parametrize(
    "config",
    [TINY, LLAMA_8B, LLAMA_70B, {**LLAMA_8B, "model_type": "mistral", "head_dim": 96}],
    ids=["tiny", "8b", "70b", "mistral"],
)
def test_a_dense_shape_is_what_it_was(config):
    """Llama and Mistral: no field beyond the old ones is set, and every count is the old formula's."""
    s = shape_of(config)
    d, attn = s.hidden, s.heads * s.head_dim
    old_layer = 2 * d * attn + 2 * d * s.kv_heads * s.head_dim + 3 * d * s.intermediate + 2 * d
    assert (s.attn_extra, s.mlp_bias, s.experts, s.moe_layers, s.dense_layers) == (0, False, 0, 0, ())
    assert s.layer_params == s.active_layer_params == old_layer
    assert s.params == s.active_params == s.layers * old_layer + s.vocab * d * (1 if s.tied else 2) + d
    assert s.largest_tensor == max(s.vocab * d, s.intermediate * d)
    assert s.mlp_act_bytes(2) == 3 * s.intermediate * 2


def test_the_published_sizes():
    """Qwen3-235B-A22B: 235B parameters, 22B active; Mixtral-8x22B: 141B, 39B active."""
    qwen, mixtral = param_counts(shape_of(QWEN3_235B_A22B)), param_counts(shape_of(MIXTRAL_8X22B))
    assert qwen == ParamCounts(235_093_634_560, 22_190_763_520)
    assert mixtral == ParamCounts(140_630_071_296, 39_161_468_928)
    for (total, active), (published, published_active) in ((qwen, (235e9, 22e9)), (mixtral, (141e9, 39e9))):
        assert abs(total / published - 1) < 0.01 and abs(active / published_active - 1) < 0.01
    # Qwen3-30B-A3B: 30.5B, 3.3B activated (Qwen counts the embedding as active, as param_counts does)
    small = shape_of(
        {
            **QWEN3_235B_A22B,
            "hidden_size": 2048,
            "num_hidden_layers": 48,
            "num_attention_heads": 32,
            "moe_intermediate_size": 768,
        }
    )
    assert param_counts(small) == ParamCounts(30_532_122_624, 3_353_032_704)


GPT_OSS_120B = {
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_hidden_layers": 36,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "intermediate_size": 2880,
    "head_dim": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 201088,
    "tie_word_embeddings": False,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    },
}


def test_gpt_oss_downloads_its_experts_in_mxfp4():
    """gpt-oss-120b: 116.8B parameters, 5.1B active per token by OpenAI's count, which leaves out the embedding
    (0.58B; param_counts keeps it, as Qwen's does); its experts' weights are stored in MXFP4, 17/32 bytes each
    (the checkpoint is ~65 GB), and held in bf16 once loaded."""
    shape = shape_of(GPT_OSS_120B)
    assert param_counts(shape) == ParamCounts(116_829_156_672, 5_711_982_912)
    assert round((shape.active_params - shape.embed_params) / 1e9, 2) == 5.13
    weights = 36 * 128 * 3 * 2880 * 2880
    assert shape.download_bytes == (shape.params - weights) * 2 + weights * 17 // 32 == 65_248_815_744
    est = estimate(shape, Options(num_samples=64, seq_len=2048, ks=(4,), perplexity=("wikitext2",)), ["cuda:0"])
    assert est.disk["download"] == shape.download_bytes and est.disk["outputs"] == shape.params * 2
    plain = {k: v for k, v in GPT_OSS_120B.items() if k != "quantization_config"}
    assert shape_of(plain).download_bytes == shape.params * 2


def without_download(shape, opts, devices) -> tuple[float, float]:
    """The time range less the download's share: the compute alone."""
    return sizing_model._seconds(shape, opts, devices[0].startswith("cuda"), len(devices), 0, Spread(0, 0, 0))


def test_memory_counts_every_expert_and_time_the_active_ones():
    opts = Options(num_samples=256, seq_len=2048, ks=(8,), outputs=False, whole_model=False)
    base = shape_of(QWEN3_235B_A22B)
    more = shape_of({**QWEN3_235B_A22B, "num_experts": 256})  # twice the experts, the same 8 a token
    busier = shape_of({**QWEN3_235B_A22B, "num_experts_per_tok": 16})  # the same experts, 16 a token
    dt, tokens_b = 2, 8 * 2048  # bf16, a GPU's batch of 8 blocks
    one, two = estimate(base, opts, ["cuda:0"]), estimate(more, opts, ["cuda:0"])
    # calibration holds one layer with all its experts, and the router's logits over all of them
    assert one.phases["calibrate"]["device"] > base.layer_params * dt > 128 * base.expert_params * dt
    assert two.phases["calibrate"]["device"] - one.phases["calibrate"][
        "device"
    ] == 128 * base.expert_params * dt + 128 * base.hidden * dt + tokens_b * 128 * (dt + 4)
    assert two.disk["download"] - one.disk["download"] == 94 * 128 * (base.expert_params + base.hidden) * dt
    # time: the experts a token goes through, not those the layer holds
    fast, slow = without_download(base, opts, ["cuda:0"])
    assert without_download(more, opts, ["cuda:0"]) == pytest.approx((fast, slow), rel=0.01)  # the router's share
    busy_fast, _ = without_download(busier, opts, ["cuda:0"])
    every_fast, _ = without_download(shape_of({**QWEN3_235B_A22B, "num_experts_per_tok": 128}), opts, ["cuda:0"])
    assert 1.3 < busy_fast / fast < 2 and every_fast / fast > 5  # were every expert counted: over 5x the time
    # a forward's transients are the routed experts' (grouped_mm), not n of them
    assert base.mlp_act_bytes(dt) == 8 * ((3 * 1536 + 4 * 4096) * dt + 24) + 128 * (dt + 4)
    assert busier.layer_params == base.layer_params and busier.active_params > base.active_params


def test_a_model_with_dense_and_moe_layers_sizes_each_kind():
    """Qwen2-MoE's mlp_only_layers and decoder_sparse_step: the dense layers count intermediate_size, the others
    their experts; calibration holds the larger kind."""
    qwen2_moe = {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "vocab_size": 151936,
        "tie_word_embeddings": False,
    }
    every = shape_of(qwen2_moe)  # Qwen1.5-MoE-A2.7B: 14.3B parameters, 2.7B active
    assert (every.moe_layers, round(every.params / 1e9, 1), round(every.active_params / 1e9, 1)) == (24, 14.3, 2.7)
    mixed = shape_of({**qwen2_moe, "decoder_sparse_step": 3, "mlp_only_layers": [2, 5, 5, 4000]})
    assert mixed.moe_layers == 24 // 3 - 2 and mixed.dense_layers == (2, 5)  # layers 8, 11, ..., 23 less 2 and 5
    assert mixed.params == 18 * mixed.dense_layer_params + 6 * mixed.moe_layer_params + 2 * 151936 * 2048 + 2048
    assert mixed.layer_params == mixed.moe_layer_params > mixed.dense_layer_params
    assert mixed.mlp_act_bytes(2) == max(3 * 5632 * 2, every.mlp_act_bytes(2))


# -- bounds: a config is user input ---------------------------------------------------------------------------------

HOSTILE = [
    ("qwen3_moe", "num_experts", 16385),
    ("qwen3_moe", "num_experts", 0),
    ("qwen3_moe", "num_experts", 10**300),
    ("mixtral", "num_local_experts", 16385),
    ("olmoe", "num_experts", True),
    ("gpt_oss", "num_local_experts", "8"),
    ("qwen3_moe", "num_experts_per_tok", 16385),
    ("mixtral", "num_experts_per_tok", -2),
    ("qwen3_moe", "moe_intermediate_size", 2**20 + 1),
    ("qwen2_moe", "shared_expert_intermediate_size", 2**20 + 1),
    ("qwen3_moe", "decoder_sparse_step", 0),
    ("qwen2_moe", "decoder_sparse_step", 4097),
    ("qwen3_moe", "mlp_only_layers", "all"),
    ("qwen3_moe", "mlp_only_layers", [True]),
    ("qwen2_moe", "mlp_only_layers", [-1]),
    ("qwen2_moe", "mlp_only_layers", [4096]),
    ("qwen3_moe", "mlp_only_layers", [0] * (MAX_DENSE_LAYERS + 1)),
    ("qwen3_moe", "mlp_only_layers", [[0]]),
]


@pytest.mark.parametrize("family,field,value", HOSTILE, ids=[f"{f}.{k}={str(v)[:12]}" for f, k, v in HOSTILE])
def test_each_moe_number_is_bounded(family, field, value):
    config = {**TINY, "model_type": family, field: value}
    errors = out_of_bounds(config)
    assert [e.field for e in errors] == [field], errors
    assert f"config.json: {field} must " in str(errors[0])
    with pytest.raises(ShapeError) as e:
        shape_of(config)
    assert e.value.field == field
    # under text_config too, named with its prefix
    inner = out_of_bounds({"model_type": "wrapper", "text_config": config})
    assert [e.field for e in inner] == [field] and f"text_config.{field} must" in str(inner[0])


def test_more_active_experts_than_experts_is_refused():
    with pytest.raises(ShapeError, match=r"num_experts_per_tok \(9\) must be at most num_experts \(8\)") as e:
        shape_of({**QWEN3_235B_A22B, "num_experts": 8, "num_experts_per_tok": 9})
    assert e.value.field == "num_experts_per_tok"


def test_a_number_no_family_reads_is_not_judged():
    """A Llama config with an expert count: transformers' LlamaConfig keeps it and builds nothing of it."""
    config = {**LLAMA_8B, "num_experts": 10**12, "mlp_only_layers": "none", "moe_intermediate_size": 0}
    assert out_of_bounds(config) == [] and shape_of(config) == shape_of(LLAMA_8B)
    # a mixtral reads num_local_experts and num_experts (aliases), not moe_intermediate_size
    assert out_of_bounds({**MIXTRAL_8X22B, "moe_intermediate_size": 10**12}) == []


def test_the_bounds_themselves_are_sized_at_once():
    edge = {
        **QWEN3_235B_A22B,
        "num_hidden_layers": BOUNDS["num_hidden_layers"],
        "hidden_size": BOUNDS["hidden_size"],
        "num_experts": BOUNDS["num_experts"],
        "num_experts_per_tok": BOUNDS["num_experts_per_tok"],
        "moe_intermediate_size": BOUNDS["moe_intermediate_size"],
        "head_dim": BOUNDS["head_dim"],
        "mlp_only_layers": list(range(0, BOUNDS["num_hidden_layers"], 2)),
    }
    shape = shape_of(edge)
    assert shape.moe_layers == BOUNDS["num_hidden_layers"] // 2
    est = estimate(shape, Options(k_auto=True, ks=(1,), criterion="greedy", perplexity=("wikitext2",)), ["cuda:0"])
    assert 0 < est.seconds[0] <= est.seconds[1] and est.device_bytes > shape.layer_params


# -- the large MoE shapes through nbl estimate and POST /v1/estimates ------------------------------------------------

JOB = {"calibration": {"num_samples": 256, "seq_len": 2048}, "compression": {"k": 8}}


@pytest.mark.parametrize("config", [QWEN3_235B_A22B, MIXTRAL_8X22B], ids=["qwen3-235b-a22b", "mixtral-8x22b"])
def test_the_large_moe_shapes_go_to_eight_gpus_and_one_calibrates_them(config):
    shape = shape_of(config)
    opts = Options(num_samples=256, seq_len=2048, ks=(8,), perplexity=("wikitext2",))
    job = place(shape, opts, parse_classes(DEFAULT), 86400)
    # every expert's bf16 weights: more than one 80 GB GPU and half its 256 GB host hold without disk
    assert job.cls.name == "gpu-8x80g" and job.estimate.disk["offload"] == 0
    assert job.estimate.disk["download"] == shape.params * 2 and job.estimate.device_bytes <= 80 * GiB
    alone = estimate(
        shape, Options(num_samples=256, seq_len=2048, ks=(8,), outputs=False, whole_model=False), ["cuda:0"]
    )
    assert shape.layer_params * 2 < alone.device_bytes <= 24 * GiB  # a layer and all its experts, on one GPU


def test_nbl_estimate_and_post_estimates_size_them_alike(settings, client, auth, tmp_path, capsys, monkeypatch):
    from cli.main import main

    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    for name, config in (("qwen3-235b-a22b", QWEN3_235B_A22B), ("mixtral-8x22b", MIXTRAL_8X22B)):
        write_config(settings.models_dir / name, config)
        api = client.post("/v1/estimates", json={**JOB, "model": {"id": f"local:{name}"}}, headers=auth)
        assert api.status_code == 200, api.text
        code = main(
            [
                "estimate",
                "--model",
                str(write_config(tmp_path / name, config)),
                "--num-samples",
                "256",
                "--seq-len",
                "2048",
                "--k",
                "8",
                "--job",
                "--json",
            ]
        )
        cli = json.loads(capsys.readouterr().out)
        assert code == 0 and cli["worker_class"] == api.json()["worker_class"] == "nbl-gpu-8x80g"
        for key in ("device_bytes", "host_bytes", "disk", "phases"):
            assert cli[key] == api.json()[key], key
        assert api.json()["shape"]["params"] == shape_of(config).params


def test_docs_sizing_shows_what_the_command_prints(tmp_path, capsys, monkeypatch):
    """docs/sizing.md's MoE figures are bench/estimate_moe.py's output, as it prints it now."""
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import estimate_moe

    assert estimate_moe.main_([]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    doc = (REPO / "docs" / "sizing.md").read_text()
    block = re.search(r"\$ \.venv/bin/python bench/estimate_moe\.py\n(.*?)\n```", doc, re.DOTALL)
    assert block, "docs/sizing.md has no block of bench/estimate_moe.py's output"
    assert block.group(1).splitlines() == printed
    sys.modules.pop("estimate_moe", None)
