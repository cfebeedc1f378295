"""The load check of an output larger than one device: the fresh process loads it with device_map="auto"
within max_memory (accelerate), offloading the rest to disk, and still reproduces the reference logits,
which come layer by layer from the base checkpoint and the maps (no whole model in the parent)."""

from dataclasses import replace

import pytest
import torch
from testkit.models import save_tiny_checkpoint, tiny_tokenizer

from worker.engine.calibration.layer_source import CheckpointLayers
from worker.engine.forms.layerwise_logits import LayerwiseModel
from worker.engine.forms.saving import write_compressed
from worker.engine.forms.surgery import Plan
from worker.engine.scoring.scores import LinearMap
from worker.publish import loadcheck


@pytest.fixture
def output(tmp_path):
    base = save_tiny_checkpoint(tmp_path / "base", "llama")
    plan = Plan("attn", "nbl", (0, 2))
    g = torch.Generator().manual_seed(3)
    maps = {
        i: LinearMap(
            torch.randn(64, 64, generator=g, dtype=torch.float64) / 64,
            torch.randn(64, generator=g, dtype=torch.float64),
            0.0,
        )
        for i in plan.layers
    }
    out = write_compressed(
        base,
        plan.as_config(),
        maps,
        torch.float32,
        tiny_tokenizer(),
        tmp_path / "out",
        "llama",
        {"layers": []},
        max_shard_size=30_000,
    )  # several shards, read through the index
    return out, loadcheck.reference(LayerwiseModel(CheckpointLayers(base, torch.float32), plan, maps))


def test_an_output_over_the_memory_given_loads_offloaded_and_reproduces_the_reference(output):
    out, ref = output
    assert len(list(out.glob("*.safetensors"))) > 1
    assert loadcheck.max_memory_for(out, ref) is None  # on the CPU, one device: loaded whole, as before
    whole = loadcheck.check(out, ref)
    assert whole["placed"] == ["cpu"] and whole["max_abs_diff"] <= whole["tolerance"]
    res = loadcheck.check(out, ref, max_memory={"cpu": 200_000})  # the embeddings and one layer
    assert "disk" in res["placed"] and "cpu" in res["placed"]
    assert res["max_abs_diff"] <= res["tolerance"] and res["class"] == "NBLLlamaForCausalLM"


def test_an_offloaded_output_that_does_not_reproduce_the_reference_fails(output):
    out, ref = output
    with pytest.raises(loadcheck.LoadCheckError, match="does not reproduce the compressed model"):
        loadcheck.check(out, replace(ref, logits=ref.logits + 1.0), max_memory={"cpu": 20_000})  # all of it on disk
