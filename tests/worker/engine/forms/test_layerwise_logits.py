"""The load check's reference logits, one decoder layer at a time (layerwise_logits.py), equal those of the
compressed model in memory, read from the checkpoint or from a model already loaded."""

import pytest
import torch
from testkit.models import save_tiny_checkpoint
from transformers import AutoModelForCausalLM

from worker.engine.calibration.layer_source import CheckpointLayers, ModelLayers
from worker.engine.forms import surgery
from worker.engine.forms.layerwise_logits import LayerwiseModel
from worker.engine.scoring.scores import LinearMap
from worker.publish import loadcheck

CASES = [
    (f, mode, method)
    for f in ("llama", "mistral", "qwen2", "qwen3")
    for mode in ("attn", "block")
    for method in ("nbl", "drop")
]


def _maps(layers, d=64):
    g = torch.Generator().manual_seed(1)
    return {
        i: LinearMap(
            torch.randn(d, d, generator=g, dtype=torch.float64) / d,
            torch.randn(d, generator=g, dtype=torch.float64),
            0.0,
        )
        for i in layers
    }


@pytest.mark.parametrize("family,mode,method", CASES)
def test_layer_by_layer_logits_equal_the_compressed_model_in_memory(family, mode, method, tmp_path):
    base = save_tiny_checkpoint(tmp_path / "base", family)
    plan = surgery.Plan(mode, method, (0, 2))
    maps = _maps(plan.layers) if method == "nbl" else {}
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    with surgery.replaced(model, plan, maps):
        want = loadcheck.reference(model)
    streamed = LayerwiseModel(CheckpointLayers(base, torch.float32), plan, maps)
    got = loadcheck.reference(streamed)
    assert torch.equal(got.ids, want.ids) and (got.dtype, got.device) == (want.dtype, want.device)
    assert got.logits.shape == want.logits.shape
    torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=1e-5)
    assert (got.logits - want.logits).abs().max() < loadcheck.tolerance(want) / 10
    # a model already in memory serves too, and is left unmodified
    in_memory = loadcheck.reference(LayerwiseModel(ModelLayers(model), plan, maps))
    torch.testing.assert_close(in_memory.logits, want.logits, rtol=0, atol=1e-5)
    assert type(model.model.layers[0]).__name__.endswith("DecoderLayer")
    assert not torch.allclose(got.logits, loadcheck.reference(model).logits)  # the plan changes the logits
