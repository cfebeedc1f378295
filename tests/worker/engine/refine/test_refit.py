"""Sequential refit (worker/engine/refine/refit.py) on tiny random models: each replaced layer's map is the least-squares
solution on the compressed model's own activations, against the base layer run on those activations; the first
replaced layer's is the one-shot map; reading the checkpoint layer by layer and spilling to disk change nothing."""

import copy

import pytest
import torch
from testkit.models import save_tiny_checkpoint, tiny_model

from worker.engine.calibration.calibrate import calibrate
from worker.engine.calibration.layer_source import CheckpointLayers
from worker.engine.forms.fold_runs import fit_form_maps
from worker.engine.forms.form_layers import apply_form
from worker.engine.forms.surgery import Plan, apply
from worker.engine.refine.refit import sequential_refit
from worker.engine.scoring.stage import fit_maps

HOLDOUT, BS = 1, 3


def _blocks(n=10, t=24):
    return torch.randint(0, 128, (n, t), generator=torch.Generator().manual_seed(0))


def _one_shot(model, mode, layers, form="nbl"):
    cal = calibrate(model, _blocks(), batch_size=BS, holdout=HOLDOUT, progress=False, modes=(mode,), form=form)
    if form == "nbl":
        return fit_maps(cal.stats, mode, layers)
    return fit_form_maps(cal.stats.__getitem__, form, mode, layers)


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _captured(model, plan_before, maps, j, mode, form):
    """X and Y of layer j in the model compressed by `plan_before` (layers below j): by hooks on a full forward."""
    net = copy.deepcopy(model)
    if plan_before.layers:
        (apply if form == "nbl" else apply_form)(net, plan_before, maps)
    layer, got = net.model.layers[j], {}
    hooks = [
        layer.register_forward_pre_hook(
            lambda m, a, kw: got.setdefault("h", []).append(kw.get("hidden_states", a[0] if a else None)),
            with_kwargs=True,
        ),
        layer.register_forward_hook(
            lambda m, a, o: got.setdefault("out", []).append(o[0] if isinstance(o, tuple) else o)
        ),
        layer.self_attn.register_forward_hook(lambda m, a, o: got.setdefault("attn", []).append(o[0])),
    ]
    with torch.no_grad():
        net(_blocks(), use_cache=False)
    for hk in hooks:
        hk.remove()
    h = got["h"][0]
    y = got["attn"][0] if mode == "attn" else got["out"][0] - h
    x = h if form == "nbl" else (layer.input_layernorm if mode == "attn" else layer.post_attention_layernorm)(h)
    return x.reshape(-1, x.shape[-1]).double(), y.reshape(-1, y.shape[-1]).double()


@pytest.mark.parametrize("mode", ["attn", "block"])
def test_each_map_is_the_least_squares_fit_on_the_compressed_activations(mode):
    model, layers = tiny_model(layers=4), (1, 2, 3)
    plan = Plan(mode, "nbl", layers)
    maps = _one_shot(model, mode, layers)
    refit = sequential_refit(model, _blocks(), plan, maps, batch_size=BS, holdout=HOLDOUT, ridge=0.0)
    for j in (2, 3):  # layers with a replacement below them
        x, y = _captured(model, Plan(mode, "nbl", tuple(i for i in layers if i < j)), refit.maps, j, mode, "nbl")
        ones = torch.ones(x.shape[0], 1, dtype=x.dtype)
        sol = torch.linalg.lstsq(torch.cat([x, ones], 1), y).solution  # (d + 1, d): [Wᵀ; b]
        assert _rel(refit.maps[j].weight, sol[:-1].T) < 1e-4
        assert _rel(refit.maps[j].bias, sol[-1]) < 1e-4
        assert _rel(refit.maps[j].weight, maps[j].weight) > 1e-3  # not the one-shot map: the stream moved
        # on the compressed stream the refit's error is the least: never above the one-shot map's
        assert refit.nmse[j]["refit"] <= refit.nmse[j]["one_shot"] * (1 + 1e-9)


@pytest.mark.parametrize("mode,form", [("attn", "nbl"), ("block", "nbl"), ("attn", "linear"), ("block", "linear")])
def test_the_first_replaced_layer_is_the_one_shot_fit(mode, form):
    model, layers = tiny_model(layers=4), (1, 3)
    maps = _one_shot(model, mode, layers, form)
    refit = sequential_refit(model, _blocks(), Plan(mode, "nbl", layers, form), maps, batch_size=BS, holdout=HOLDOUT)
    assert _rel(refit.maps[1].weight, maps[1].weight) < 1e-10
    assert _rel(refit.maps[1].bias + 1, maps[1].bias + 1) < 1e-10  # linear: both zero
    assert _rel(refit.maps[3].weight, maps[3].weight) > 1e-3
    assert refit.layer_passes == (4 + 2) * 4  # layers 0..3 once, the two replaced twice; 4 batches


def test_linear_refit_is_the_bias_free_fit_on_the_compressed_norm_output():
    model, layers = tiny_model(layers=3), (0, 2)
    maps = _one_shot(model, "attn", layers, "linear")
    refit = sequential_refit(
        model, _blocks(), Plan("attn", "nbl", layers, "linear"), maps, batch_size=BS, holdout=HOLDOUT, ridge=0.0
    )
    x, y = _captured(model, Plan("attn", "nbl", (0,), "linear"), refit.maps, 2, "attn", "linear")
    assert _rel(refit.maps[2].weight, torch.linalg.lstsq(x, y).solution.T) < 1e-4
    assert float(refit.maps[2].bias.abs().max()) == 0.0


def test_from_the_checkpoint_with_spilling_equals_in_memory(tmp_path):
    path = save_tiny_checkpoint(tmp_path / "m", layers=4)
    model, plan = tiny_model(layers=4), Plan("attn", "nbl", (1, 2))
    maps = _one_shot(model, "attn", plan.layers)
    mem = sequential_refit(model, _blocks(), plan, maps, batch_size=BS, holdout=HOLDOUT)
    seen = []
    disk = sequential_refit(
        CheckpointLayers(path, torch.float32),
        _blocks(),
        plan,
        maps,
        batch_size=BS,
        holdout=HOLDOUT,
        host_bytes=0,
        spill_dir=tmp_path / "spill",
        on_batch=lambda done, total: seen.append((done, total)),
    )
    for i in plan.layers:
        assert _rel(disk.maps[i].weight, mem.maps[i].weight) < 1e-12
    assert seen[-1] == (disk.layer_passes, disk.layer_passes) and len(seen) == disk.layer_passes


@pytest.mark.parametrize("plan", [Plan("block", "nbl", (1, 2), "fold"), Plan("attn", "drop", (1,))])
def test_fold_and_drop_are_refused(plan):
    with pytest.raises(ValueError, match="nbl or linear maps"):
        sequential_refit(tiny_model(layers=3), _blocks(), plan, {})


def test_teacher_target_regresses_the_base_branch_on_its_own_stream():
    model, layers, mode = tiny_model(layers=4), (1, 2), "attn"
    maps = _one_shot(model, mode, layers)
    refit = sequential_refit(
        model, _blocks(), Plan(mode, "nbl", layers), maps, batch_size=BS, holdout=HOLDOUT, ridge=0.0, target="teacher"
    )
    assert _rel(refit.maps[1].weight, maps[1].weight) < 1e-4  # both streams are the base's (float32 noise: a copy)
    x, _ = _captured(model, Plan(mode, "nbl", (1,)), refit.maps, 2, mode, "nbl")  # the compressed stream
    _, y = _captured(model, Plan(mode, "nbl", ()), refit.maps, 2, mode, "nbl")  # the base's own branch
    ones = torch.ones(x.shape[0], 1, dtype=x.dtype)
    sol = torch.linalg.lstsq(torch.cat([x, ones], 1), y).solution
    assert _rel(refit.maps[2].weight, sol[:-1].T) < 1e-4 and _rel(refit.maps[2].bias, sol[-1]) < 1e-4
    student = sequential_refit(
        model, _blocks(), Plan(mode, "nbl", layers), maps, batch_size=BS, holdout=HOLDOUT, ridge=0.0
    )
    assert _rel(refit.maps[2].weight, student.maps[2].weight) > 1e-3
    with pytest.raises(ValueError, match="target"):
        sequential_refit(model, _blocks(), Plan(mode, "nbl", layers), maps, target="drift")
