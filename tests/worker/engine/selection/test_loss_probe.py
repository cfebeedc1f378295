"""The layer-by-layer loss probe gives, for every layer, the loss rise of the former probe: the whole
model in memory, run once per layer with that layer alone replaced."""

import pytest
import torch
from testkit.models import save_tiny_checkpoint, tiny_model

from worker.engine.calibration.calibrate import calibrate
from worker.engine.calibration.layer_source import CheckpointLayers
from worker.engine.forms import surgery
from worker.engine.scoring.likelihood import nll_sum
from worker.engine.scoring.stage import fit_maps
from worker.engine.selection.loss_probe import loss_rise


def _mean_loss(model, blocks, batch_size):
    total, count = 0.0, 0
    for s in range(0, len(blocks), batch_size):
        t, c = nll_sum(model, blocks[s : s + batch_size])
        total, count = total + t, count + c
    return total / count


def whole_model_rises(model, blocks, mode, method, maps, batch_size):
    base = _mean_loss(model, blocks, batch_size)
    rises = []
    for i in range(len(model.model.layers)):
        with surgery.replaced(model, surgery.Plan(mode, method, (i,)), maps):
            rises.append(_mean_loss(model, blocks, batch_size) - base)
    return rises


@pytest.mark.parametrize(
    "family,mode,method,from_checkpoint,tied",
    [
        ("llama", "attn", "nbl", True, False),
        ("mistral", "attn", "drop", False, False),
        ("qwen2", "block", "drop", True, False),
        ("qwen3", "block", "nbl", True, True),
    ],
)
def test_layer_by_layer_probe_equals_the_whole_model_probe(family, mode, method, from_checkpoint, tied, tmp_path):
    kw = dict(layers=4, tie_word_embeddings=tied)
    model = tiny_model(family, **kw)
    g = torch.Generator().manual_seed(0)
    blocks, held = torch.randint(2, 120, (8, 16), generator=g), torch.randint(2, 120, (5, 16), generator=g)
    maps = (
        fit_maps(calibrate(model, blocks, batch_size=4, progress=False).stats, mode, range(4))
        if method == "nbl"
        else {}
    )
    want = whole_model_rises(model, held, mode, method, maps, batch_size=2)
    source = (
        CheckpointLayers(save_tiny_checkpoint(tmp_path / "m", family, **kw), torch.float32)
        if from_checkpoint
        else model
    )
    got = loss_rise(
        source, held, mode, method, maps, batch_size=2, progress=False, host_bytes=0, spill_dir=tmp_path / "spill"
    )  # every stream spilt to disk
    assert len(got) == 4 and len(set(got)) == 4
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    if from_checkpoint:
        assert all(p.is_meta for p in source.model.parameters())  # nothing left loaded
