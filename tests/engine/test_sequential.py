"""Layer-by-layer calibration gives the sums of the former one-pass path (float64, relative 1e-10),
for every family, from a model in memory or from its safetensors checkpoint (weights read one
layer at a time), with or without the hidden states spilt to disk."""

import pytest
import torch

from conftest import FAMILY_CONFIGS, save_tiny_checkpoint, smollm2_gguf, tiny_model
from one_pass_reference import one_pass_sums
from worker.engine.calibrate import calibrate, holdout_count
from worker.engine.layer_source import CheckpointLayers
from worker.engine.loading import load_model

FIELDS = ("y", "yy", "yx", "cos")


def assert_same_sums(stats, ref, modes=("attn", "block"), rel=1e-10):
    assert len(stats) == len(ref)
    for st, r in zip(stats, ref):
        pairs = [(st.shift_x, r["shift_x"])] + [(st.shift_y[b], r[f"shift_{b}"]) for b in modes]
        for split in ("fit", "held"):
            s, rs = st.splits[split], r[split]
            pairs += [(s.n, rs["n"]), (s.x, rs["x"]), (s.xx, rs["xx"])]
            pairs += [(getattr(s.branches[b], f), rs[f"{b}.{f}"]) for b in modes for f in FIELDS]
        for got, want in pairs:
            assert got.dtype == torch.float64
            scale = want.abs().max().clamp_min(1e-300)
            assert float((got - want).abs().max() / scale) <= rel


def _blocks():
    return torch.randint(0, 128, (10, 24), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_in_memory_model_matches_the_one_pass_sums(family):
    model = tiny_model(family, layers=3)
    blocks = _blocks()
    ref = one_pass_sums(model, blocks, batch_size=3, holdout=holdout_count(10))
    cal = calibrate(model, blocks, batch_size=3, holdout=holdout_count(10), progress=False)
    assert_same_sums(cal.stats, ref)


def _materialized_layers(model) -> list[int]:
    return [i for i, layer in enumerate(model.model.layers) if any(not p.is_meta for p in layer.parameters())]


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_checkpoint_read_layer_by_layer_matches_the_one_pass_sums(family, tmp_path):
    """From the safetensors checkpoint: one decoder layer's weights at a time, never the LM head."""
    path = save_tiny_checkpoint(tmp_path / family, family, layers=3)
    ref = one_pass_sums(tiny_model(family, layers=3), _blocks(), batch_size=3, holdout=holdout_count(10))
    source = CheckpointLayers(path, torch.float32)
    seen = []
    cal = calibrate(source, _blocks(), batch_size=3, holdout=holdout_count(10), progress=False,
                    on_batch=lambda done, total: seen.append(_materialized_layers(source.model)))
    assert_same_sums(cal.stats, ref)
    assert len(seen) == 3 * 4 and {len(s) for s in seen} == {1}  # 3 layers x 4 batches, one layer held
    assert _materialized_layers(source.model) == [] and source.model.lm_head.weight.is_meta
    assert source.model.model.embed_tokens.weight.is_meta  # read for the first pass only


def test_hidden_states_spilt_to_disk_give_the_same_sums(tmp_path):
    model = tiny_model("llama", layers=3)
    ref = one_pass_sums(model, _blocks(), batch_size=3, holdout=1)
    spill = tmp_path / "spill"
    spilt = []
    # a budget of one batch: the other three batches' hidden states live on disk
    one_batch = 3 * 24 * model.config.hidden_size * 4
    cal = calibrate(model, _blocks(), batch_size=3, holdout=1, progress=False, host_bytes=one_batch,
                    spill_dir=spill, on_batch=lambda *_: spilt.append(len(list(spill.rglob("*.safetensors")))))
    assert_same_sums(cal.stats, ref)
    assert max(spilt) == 3 and not list(spill.rglob("*"))  # spilt during the run, removed after


def test_sums_only_for_the_modes_asked_for():
    model = tiny_model("qwen2", layers=3)
    ref = one_pass_sums(model, _blocks(), batch_size=3, holdout=1)
    both = calibrate(model, _blocks(), batch_size=3, holdout=1, progress=False)
    for mode in ("attn", "block"):
        cal = calibrate(model, _blocks(), batch_size=3, holdout=1, progress=False, modes=(mode,))
        assert all(st.branches == (mode,) for st in cal.stats)
        assert_same_sums(cal.stats, ref, modes=(mode,))
        d = model.config.hidden_size
        assert both.stats_bytes - cal.stats_bytes == 8 * (2 * (d + 2 * d * d + 1) + d)  # one branch less


@pytest.mark.slow
def test_smollm2_checkpoint_layer_by_layer_matches_the_one_pass_sums(smollm2_home, monkeypatch):
    """The real SmolLM2-135M (30 layers, d=576): its checkpoint read layer by layer gives the sums of
    the one-pass reference on the whole model in memory."""
    monkeypatch.setenv("NBL_HOME", str(smollm2_home))  # the GGUF is converted once per session
    lm = load_model(str(smollm2_gguf()))
    blocks = torch.randint(0, lm.model.config.vocab_size, (4, 32), generator=torch.Generator().manual_seed(0))
    ref = one_pass_sums(lm.model, blocks, batch_size=2, holdout=1)
    cal = calibrate(CheckpointLayers(lm.path, torch.float32), blocks, batch_size=2, holdout=1,
                    progress=False)
    assert len(cal.stats) == 30
    assert_same_sums(cal.stats, ref)
