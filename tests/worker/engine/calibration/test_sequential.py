"""Layer-by-layer calibration gives the sums of the former one-pass path (float64, relative 1e-10),
for every family, from a model in memory or from its safetensors checkpoint (weights read one
layer at a time), with or without the hidden states spilt to disk."""

import pytest
import torch
from one_pass_reference import one_pass_sums
from testkit.models import FAMILY_CONFIGS, family_param, load_smollm2, save_tiny_checkpoint, tiny_model

from worker.engine.calibration.calibrate import calibrate, holdout_count
from worker.engine.calibration.layer_source import CheckpointLayers

FIELDS = ("y", "yx", "cos")


def assert_same_sums(stats, ref, modes=("attn", "block"), rel=1e-10):
    assert len(stats) == len(ref)
    for st, r in zip(stats, ref):
        pairs = [(st.shift_x, r["shift_x"])] + [(st.shift_y[b], r[f"shift_{b}"]) for b in modes]
        # Σyyᵀ is kept once over all blocks, each split keeping only its trace
        pairs += [(st.yy[b], r["fit"][f"{b}.yy"] + r["held"][f"{b}.yy"]) for b in modes]
        for split in ("fit", "held"):
            s, rs = st.splits[split], r[split]
            pairs += [(s.n, rs["n"]), (s.x, rs["x"]), (s.xx, rs["xx"])]
            pairs += [(getattr(s.branches[b], f), rs[f"{b}.{f}"]) for b in modes for f in FIELDS]
            pairs += [(s.branches[b].yy_tr, torch.trace(rs[f"{b}.yy"])) for b in modes]
        for got, want in pairs:
            assert got.dtype == torch.float64
            scale = want.abs().max().clamp_min(1e-300)
            assert float((got - want).abs().max() / scale) <= rel


def _blocks():
    return torch.randint(0, 128, (10, 24), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("family", [family_param(f) for f in sorted(FAMILY_CONFIGS)])
def test_in_memory_model_matches_the_one_pass_sums(family):
    model = tiny_model(family, layers=3)
    blocks = _blocks()
    ref = one_pass_sums(model, blocks, batch_size=3, holdout=holdout_count(10))
    cal = calibrate(model, blocks, batch_size=3, holdout=holdout_count(10), progress=False)
    assert_same_sums(cal.stats, ref)


def _materialized_layers(model) -> list[int]:
    return [i for i, layer in enumerate(model.model.layers) if any(not p.is_meta for p in layer.parameters())]


@pytest.mark.parametrize("family", [family_param(f) for f in sorted(FAMILY_CONFIGS)])
def test_checkpoint_read_layer_by_layer_matches_the_one_pass_sums(family, tmp_path):
    """From the safetensors checkpoint: one decoder layer's weights at a time, never the LM head."""
    path = save_tiny_checkpoint(tmp_path / family, family, layers=3)
    ref = one_pass_sums(tiny_model(family, layers=3), _blocks(), batch_size=3, holdout=holdout_count(10))
    source = CheckpointLayers(path, torch.float32)
    seen = []
    cal = calibrate(
        source,
        _blocks(),
        batch_size=3,
        holdout=holdout_count(10),
        progress=False,
        on_batch=lambda done, total: seen.append(_materialized_layers(source.model)),
    )
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
    cal = calibrate(
        model,
        _blocks(),
        batch_size=3,
        holdout=1,
        progress=False,
        host_bytes=one_batch,
        spill_dir=spill,
        on_batch=lambda *_: spilt.append(len(list(spill.rglob("*.safetensors")))),
    )
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
        assert both.stats_bytes - cal.stats_bytes == 8 * (2 * (d + 1 + d * d + 1) + d * d + d)  # one branch less


@pytest.mark.slow
def test_smollm2_checkpoint_layer_by_layer_matches_the_one_pass_sums(smollm2_home):
    """The real SmolLM2-135M (30 layers, d=576): its checkpoint read layer by layer gives the sums of
    the one-pass reference on the whole model in memory."""
    lm = load_smollm2(smollm2_home)  # the GGUF is converted once per session
    blocks = torch.randint(0, lm.model.config.vocab_size, (4, 32), generator=torch.Generator().manual_seed(0))
    ref = one_pass_sums(lm.model, blocks, batch_size=2, holdout=1)
    cal = calibrate(CheckpointLayers(lm.path, torch.float32), blocks, batch_size=2, holdout=1, progress=False)
    assert len(cal.stats) == 30
    assert_same_sums(cal.stats, ref)


def test_a_layer_keeps_five_matrices_per_mode_not_six():
    """Per mode: Σxxᵀ and Σyxᵀ for each split, Σyyᵀ once over all blocks. The held-out NMSE needs only
    tr Σyyᵀ of its split: it equals the NMSE computed with the held-out split's full C_yy."""
    import dataclasses

    from worker.engine.scoring import scores

    model = tiny_model("llama", layers=2)
    d = model.config.hidden_size
    cal = calibrate(model, _blocks(), batch_size=3, holdout=3, progress=False, modes=("attn",))
    matrices = [t for t in cal.stats[1].to_flat("l").values() if t.dim() == 2]
    assert len(matrices) == 5 and all(t.shape == (d, d) for t in matrices)

    st, h = cal.stats[1], one_pass_sums(model, _blocks(), batch_size=3, holdout=3)[1]["held"]
    held = scores.layer_moments(st, "attn", "held")
    my = h["attn.y"] / h["n"]
    cyy = h["attn.yy"] / h["n"] - torch.outer(my, my)  # the held-out C_yy the one-pass path kept
    full = dataclasses.replace(held, cyy=cyy, tr_cyy=float(torch.trace(cyy)))
    fit = scores.lmmse(scores.layer_moments(st, "attn", "fit"))
    assert held.cyy is None and held.tr_cyy == pytest.approx(full.tr_cyy, rel=1e-10)
    assert scores.score_layer(st)["attn"].heldout_nmse == pytest.approx(scores.nmse(full, fit), rel=1e-10)
