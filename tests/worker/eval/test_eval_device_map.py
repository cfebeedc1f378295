"""Evaluation of a model larger than one device (issue 12 §3): the base and each compressed output load with
device_map="auto" within max_memory (accelerate), the rest offloaded to disk, and score as on one device.
On this CPU-only machine a small max_memory forces the offload, as the load check's device_map test does."""

import json

import pytest
import torch
from testkit.models import save_tiny_checkpoint, tiny_tokenizer

from worker.engine.forms.saving import write_compressed
from worker.engine.forms.surgery import Plan
from worker.engine.loading.load import load_model, load_weights
from worker.engine.placement import input_device, plan
from worker.engine.scoring.scores import LinearMap
from worker.eval.compressed import load_compressed
from worker.eval.loglikelihood import loglikelihoods
from worker.eval.perplexity import perplexity
from worker.eval.speed import measure_speed

SPREAD = {"cpu": 450_000}  # the embeddings and a layer or two in memory, the rest on disk
TEXT = ("The quick brown fox jumps over the lazy dog. " * 6 + "Pack my box with five dozen liquor jugs. ") * 3
PAIRS = [
    ("The quick brown", " fox"),
    ("Pack my box with", " five dozen"),
    ("lazy", " dog."),
    ("x" * 300, " y"),
    ("x" * 300, " z"),
]  # a shared prefix: its KV cache is computed once, then copied


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return save_tiny_checkpoint(tmp_path_factory.mktemp("evalmap") / "base", "llama", layers=6)


def compressed(base, tmp_path, mode: str, layers=(1, 4)):
    plan_ = Plan(mode, "nbl", layers)
    g = torch.Generator().manual_seed(5)
    maps = {
        i: LinearMap(
            torch.randn(64, 64, generator=g, dtype=torch.float64) / 64,
            torch.randn(64, generator=g, dtype=torch.float64),
            0.0,
        )
        for i in plan_.layers
    }
    return write_compressed(
        base, plan_.as_config(), maps, torch.float32, tiny_tokenizer(), tmp_path / mode, "llama", {"layers": []}
    )


def scores(model, tokenizer) -> tuple[dict, list[tuple[float, bool]]]:
    ppl = perplexity(model, tokenizer, TEXT, window=64, progress=False)
    return ppl, loglikelihoods(model, tokenizer, PAIRS, batch_tokens=256)


def assert_same(spread, whole):
    (ppl, lls), (ppl0, lls0) = spread, whole
    assert ppl["tokens"] == ppl0["tokens"]
    assert ppl["ppl"] == pytest.approx(ppl0["ppl"], rel=1e-5)
    assert [g for _, g in lls] == [g for _, g in lls0]
    assert [ll for ll, _ in lls] == pytest.approx([ll for ll, _ in lls0], rel=1e-5)


def placed(model) -> set[str]:
    return {str(d) for d in model.hf_device_map.values()}


def test_the_base_spread_over_memory_and_disk_scores_as_on_one_device(base):
    whole = load_model(str(base), dtype="float32", device="cpu")
    spread = load_weights(load_model(str(base), dtype="float32", device="cpu", weights=False), SPREAD)
    assert not hasattr(whole.model, "hf_device_map")
    assert placed(spread.model) == {"cpu", "disk"}
    assert input_device(spread.model) == torch.device("cpu")
    assert_same(scores(spread.model, spread.tokenizer), scores(whole.model, whole.tokenizer))


@pytest.mark.parametrize("mode", ["attn", "block"])
def test_a_compressed_output_spread_over_memory_and_disk_scores_as_on_one_device(base, tmp_path, mode):
    out = compressed(base, tmp_path, mode)
    whole = load_compressed(out, torch.float32, "cpu")
    spread = load_compressed(out, torch.float32, "cpu", max_memory=SPREAD)
    assert type(spread.model).__name__ == "NBLLlamaForCausalLM" and placed(spread.model) == {"cpu", "disk"}
    dmap = spread.model.hf_device_map
    for i in (1, 4):  # each linear map goes where its layer goes: no entry finer than the layer
        assert not [name for name in dmap if name.startswith(f"model.layers.{i}.")], dmap
    assert_same(scores(spread.model, spread.tokenizer), scores(whole.model, whole.tokenizer))
    speed = measure_speed(spread.model, lengths=(16,), new_tokens=3, decode_context=8, repeats=1, warmup=0)
    assert speed["kv_cache_layers"] == 4  # two of six layers have no attention left
    assert speed["device"] == "cpu" and speed["decode_tokens_per_s"] > 0


def test_an_output_all_on_disk_still_scores_as_on_one_device(base, tmp_path):
    """Nothing in memory at all: the embeddings too are offloaded (their weights on the meta device)."""
    out = compressed(base, tmp_path, "attn")
    whole = load_compressed(out, torch.float32, "cpu")
    spread = load_compressed(out, torch.float32, "cpu", max_memory={"cpu": 1_000})
    assert placed(spread.model) == {"disk"}
    assert spread.model.get_input_embeddings().weight.device.type == "meta"
    assert input_device(spread.model) == torch.device("cpu")
    assert_same(scores(spread.model, spread.tokenizer), scores(whole.model, whole.tokenizer))


def test_the_plan_spreads_only_what_does_not_fit_the_first_device():
    gb = 10**9
    assert plan(100 * gb, ["cpu"], {}, 64 * gb) is None  # the CPU: host memory is the one device
    assert plan(10 * gb, ["cuda:1", "cuda:3"], {1: 20 * gb, 3: 20 * gb}, 64 * gb) is None  # fits the first
    assert plan(30 * gb, ["cuda:1", "cuda:3"], {1: 20 * gb, 3: 40 * gb}, 64 * gb) == {
        1: 16 * gb,
        3: 32 * gb,
        "cpu": 32 * gb,
    }
    assert plan(17 * gb, ["cuda"], {0: 20 * gb}, 8 * gb) == {0: 16 * gb, "cpu": 4 * gb}  # x1.25 headroom


def test_compress_hands_its_devices_to_the_load_check_and_evaluates_over_them(base, tmp_path, text_file, capsys):
    """`nbl compress` runs worker/pipeline.run: the load check of each output is told the run's --devices."""
    from cli.main import main

    (tmp_path / "t.txt").write_text(TEXT)
    code = main(
        [
            "compress",
            "--model",
            str(base),
            "--dataset",
            str(text_file),
            "--num-samples",
            "11",
            "--seq-len",
            "32",
            "--batch-size",
            "2",
            "--k",
            "1",
            "--json",
            "--no-cache",
            "--devices",
            "cpu,cpu",
            "--out",
            str(tmp_path / "out"),
            "--eval",
            "--perplexity",
            str(tmp_path / "t.txt"),
        ]
    )
    got = capsys.readouterr()
    assert code == 0, got.err
    view = json.loads(got.out)
    assert view["load_check"]["k1"]["devices"] == ["cpu", "cpu"]
    assert view["load_check"]["k1"]["placed"] == ["cpu"]
    assert view["evaluation"]["k1"]
