"""One streaming pass over a real (tiny, random) model equals a float64 reference on stacked activations."""

import numpy as np
import pytest
import torch
from testkit.models import tiny_model

from worker.engine.calibration.calibrate import calibrate, holdout_count
from worker.engine.modeling.modeling_nbl import NBLAttention
from worker.engine.scoring import scores


def _stacked_activations(model, blocks):
    """Layer inputs, attention outputs and block outputs of every layer, all tokens, float64."""
    layers = model.model.layers
    rec = {i: {"h": [], "a": [], "o": []} for i in range(len(layers))}
    hs = []

    def on_layer(i):
        def hook(module, args, kwargs, out):  # returns None: observes, never replaces the output
            rec[i]["h"].append(args[0] if args else kwargs["hidden_states"])
            rec[i]["o"].append(out)

        return hook

    for i, layer in enumerate(layers):
        hs.append(layer.self_attn.register_forward_hook(lambda m, a, o, i=i: rec[i]["a"].append(o[0])))
        hs.append(layer.register_forward_hook(on_layer(i), with_kwargs=True))
    with torch.no_grad():
        model.model(input_ids=blocks, use_cache=False)
    for h in hs:
        h.remove()
    cat = lambda ts: torch.cat([t.reshape(-1, t.shape[-1]) for t in ts]).double().numpy()  # noqa: E731
    return {i: {k: cat(v) for k, v in r.items()} for i, r in rec.items()}


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_streaming_sums_equal_float64_reference(family):
    model = tiny_model(family, layers=3)
    blocks = torch.randint(0, 128, (10, 24), generator=torch.Generator().manual_seed(0))
    cal = calibrate(model, blocks, batch_size=3, holdout=holdout_count(10), progress=False)
    ref = _stacked_activations(model, blocks)
    assert cal.tokens == 240
    for i, st in enumerate(cal.stats):
        x = ref[i]["h"]
        for branch, y in (("attn", ref[i]["a"]), ("block", ref[i]["o"] - ref[i]["h"])):
            m = scores.layer_moments(st, branch)
            assert m.n == 240
            np.testing.assert_allclose(m.mu_x.numpy(), x.mean(0), atol=1e-6)
            np.testing.assert_allclose(m.mu_y.numpy(), y.mean(0), atol=1e-6)
            np.testing.assert_allclose(m.cxx.numpy(), np.cov(x.T, bias=True), atol=1e-5)
            np.testing.assert_allclose(m.cyy.numpy(), np.cov(y.T, bias=True), atol=1e-5)
            np.testing.assert_allclose(m.cyx.numpy(), (y - y.mean(0)).T @ (x - x.mean(0)) / 240, atol=1e-5)
            # torch's convention: norms clamped at eps, so a zero vector (the pad embedding) has cos 0
            nx, nz = (np.maximum(np.linalg.norm(v, axis=1), 1e-8) for v in (x, x + y))
            cos = np.sum(x * (x + y), 1) / nx / nz
            assert scores.mean_cosine(st.total(), branch) == pytest.approx(cos.mean(), abs=1e-5)
            # the held split is exactly the last block (1/10 of 10 blocks)
            assert float(st.splits["held"].n) == 24


def test_layer_with_exactly_linear_attention_is_recovered():
    """Make layer 1's attention branch exactly W0 h + b0: calibration recovers W0, b0 and scores it ~0."""
    model = tiny_model("llama", layers=3).double()
    d = model.config.hidden_size
    g = torch.Generator().manual_seed(1)
    w0 = torch.randn(d, d, generator=g, dtype=torch.float64) / d
    b0 = torch.randn(d, generator=g, dtype=torch.float64)
    layer = model.model.layers[1]
    layer.input_layernorm = torch.nn.Identity()
    layer.self_attn = NBLAttention(d, 1).double()
    with torch.no_grad():
        layer.self_attn.linear.weight.copy_(w0)
        layer.self_attn.linear.bias.copy_(b0)
    blocks = torch.randint(0, 128, (16, 32), generator=g)
    cal = calibrate(model, blocks, batch_size=4, product_dtype=torch.float64, progress=False)
    m = scores.layer_moments(cal.stats[1], "attn")
    f = scores.lmmse(m, ridge=0.0)
    assert torch.allclose(f.weight, w0, atol=1e-6)
    assert torch.allclose(f.bias, b0, atol=1e-6)
    sc = scores.score_layer(cal.stats[1])["attn"]
    assert sc.nmse < 1e-10
    assert sc.cca_bound < 1e-6
    # a real attention layer is far from linear
    assert scores.score_layer(cal.stats[0])["attn"].nmse > 1e-3


def test_holdout_count():
    assert holdout_count(1) == 0
    assert holdout_count(2) == 1
    assert holdout_count(16) == 1
    assert holdout_count(256) == 25
    assert holdout_count(256, 0.0) == 0
