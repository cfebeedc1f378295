"""The maths of forms linear and fold: the fits are the least-squares optimum of the form's own regression, a
run of blocks folds as one map, the fold into down_proj equals the map applied at run time, layer 0 is refused."""

import pytest
import torch
from testkit.models import tiny_model

from worker.engine.calibration.calibrate import calibrate
from worker.engine.forms.fold_runs import fit_form_maps, folded, runs
from worker.engine.forms.form_layers import apply_form
from worker.engine.forms.surgery import Plan
from worker.engine.scoring.stage import score_stage
from worker.engine.selection.criteria import choose


@pytest.fixture(scope="module")
def blocks():
    return torch.randint(3, 100, (6, 40), generator=torch.Generator().manual_seed(1))


def _model():
    return tiny_model("llama", layers=5, intermediate_size=256).double()


@torch.no_grad()
def _activations(model, blocks):
    """Per layer: input h, attention output a, MLP output f, in float64 (N, d); and each layer's input."""
    acts = {}
    hooks = []
    for i, layer in enumerate(model.model.layers):
        acts[i] = {}
        hooks.append(layer.self_attn.register_forward_hook(lambda m, a, o, i=i: acts[i].__setitem__("a", o[0])))
        hooks.append(layer.mlp.register_forward_hook(lambda m, a, o, i=i: acts[i].__setitem__("f", o)))
    out = model(blocks, output_hidden_states=True)
    for h in hooks:
        h.remove()
    hs = out.hidden_states  # embeddings = layer 0's input, then each layer's output (the last one normed)
    d = model.config.hidden_size
    for i in acts:
        acts[i]["h"] = hs[i]
    flat = {i: {k: v.reshape(-1, d) for k, v in a.items()} for i, a in acts.items()}
    return flat, [hs[i].reshape(-1, d) for i in range(len(hs) - 1)]


def _lstsq(x, y):
    return torch.linalg.lstsq(x, y).solution.T  # y ≈ x Wᵀ, no intercept


@pytest.mark.parametrize(
    "form,mode,layers",
    [("linear", "attn", (2,)), ("linear", "block", (3,)), ("fold", "attn", (2,)), ("fold", "block", (2, 3))],
)
def test_fit_is_the_least_squares_optimum(form, mode, layers, blocks):
    model = _model()
    acts, hs = _activations(model, blocks)
    cal = calibrate(
        model, blocks, batch_size=3, progress=False, modes=(mode,), form=form, max_run=2, product_dtype=torch.float64
    )
    maps = fit_form_maps(cal.stats.__getitem__, form, mode, layers, ridge=0.0)
    assert list(maps) == [layers[0]]  # a fold run of two blocks is one map
    s, e = layers[0], layers[-1]
    layer = model.model.layers[s]
    with torch.no_grad():
        if form == "linear":
            x = (layer.input_layernorm if mode == "attn" else layer.post_attention_layernorm)(acts[s]["h"])
        else:
            x = acts[s - 1]["f"]
        if mode == "attn":
            y = acts[s]["a"]
        else:  # the run's total change: the input of layer e + 1 less the input of layer s
            y = hs[e + 1] - hs[s]
    want = _lstsq(x, y)
    got = maps[s].weight
    assert torch.allclose(got, want, atol=1e-6 * want.abs().max()), (got - want).abs().max()
    assert torch.count_nonzero(maps[s].bias) == 0


@torch.no_grad()
def test_folded_down_proj_equals_the_map_at_run_time(blocks):
    model = tiny_model("llama", layers=5, intermediate_size=256)
    cal = calibrate(model, blocks, batch_size=3, progress=False, modes=("block",), form="fold", max_run=2)
    plan = Plan("block", "nbl", (2, 3), "fold")
    maps = fit_form_maps(cal.stats.__getitem__, "fold", "block", plan.layers)
    down = model.model.layers[1].mlp.down_proj
    w = down.weight.clone()
    apply_form(model, plan, maps)  # layer 1's MLP returns f + T f
    unfolded = model(blocks).logits
    model.model.layers[1].mlp = model.model.layers[1].mlp.inner  # the MLP alone, with (I + T) W_down
    down.weight.copy_(folded(w, maps[2].weight))
    assert (model(blocks).logits - unfolded).abs().max() < 1e-4


def test_runs_group_consecutive_layers():
    assert runs([5, 1, 2, 8, 9, 10]) == [(1, 2), (5,), (8, 9, 10)]


def test_layer_zero_is_not_eligible_for_fold(blocks):
    model = tiny_model("llama", layers=4, intermediate_size=256)
    cal = calibrate(model, blocks, batch_size=3, progress=False, modes=("block",), form="fold", max_run=3)
    scores = score_stage(cal.stats, form="fold")
    assert scores[0]["block"]["eligible"] is False and "layer 0" in scores[0]["block"]["reason"]
    assert all(s["block"].get("eligible", True) for s in scores[1:])
    assert 0 not in choose(scores, "block", "cca", 3) and len(choose(scores, "block", "cca", 3)) == 3
    # forcing layer 0 into a fold: a clear error, not a map folded into nothing
    with pytest.raises(ValueError, match="layer 0 cannot be folded"):
        fit_form_maps(cal.stats.__getitem__, "fold", "block", (0, 1))
    # and the nbl form still ranks layer 0
    nbl = score_stage(calibrate(model, blocks, batch_size=3, progress=False, modes=("block",)).stats)
    assert "eligible" not in nbl[0]["block"]


def test_a_16bit_base_is_folded_in_float32_and_rounded_once_by_the_writer(tmp_path, text_file):
    """A bfloat16 base (what `nbl import-gguf` writes from a quantized GGUF): the fold's (I + T)·W_down comes back in
    float32, not rounded to the base's 16 bits, so a float32 output reproduces the maps the model computed with and
    passes the fresh-process load check (it failed on SmolLM2: 0.011 block, 0.027 attn > 0.003)."""
    import json

    import torch
    from testkit.models import tiny_model, tiny_tokenizer

    from cli.main import main

    w = torch.randn(16, 8).to(torch.bfloat16)
    t = torch.randn(16, 16) * 0.1
    got = folded(w, t)
    exact = w.double() + t.double() @ w.double()
    assert got.dtype == torch.float32 and (got.double() - exact).abs().max() < 1e-5
    assert folded(w.float(), t).dtype == torch.float32 and folded(w.double(), t).dtype == torch.float64
    base = tmp_path / "bf16"
    tiny_model("llama", layers=4, hidden_size=128, intermediate_size=256).to(torch.bfloat16).save_pretrained(base)
    tiny_tokenizer().save_pretrained(base)
    assert json.loads((base / "config.json").read_text())["dtype"] == "bfloat16"
    for mode, k in (("block", "1"), ("attn", "2")):
        argv = ["compress", "--model", str(base), "--dataset", str(text_file), "--mode", mode, "--form", "fold"]
        out = tmp_path / f"out-{mode}"
        assert main([*argv, "--num-samples", "8", "--seq-len", "32", "--k", k, "--out", str(out), "--json"]) == 0
        assert (out / "config.json").is_file()  # the load check (on by default) passed
