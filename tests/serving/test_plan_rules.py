"""The plugin builds no layer from a plan the transformers loader would refuse (issue 24, finding 14):
mode `mlp` was built as attn, method `NBL` as drop, a layer out of range was never built. The rules
themselves are held to modeling_nbl.py's in the main suite (tests/worker/engine/modeling/test_nbl_plan_rules.py)."""

from types import SimpleNamespace

import pytest

GOOD = {"mode": "attn", "method": "nbl", "layers": [1], "bias": True}


@pytest.fixture
def build():
    from nbl_vllm import models  # the serving venv's plugin (imported here: collection works anywhere)

    def kept(**kw):
        return "the family's own layer"

    return models.layer_factory(kept)


def config(plan) -> SimpleNamespace:
    return SimpleNamespace(nbl=plan, num_hidden_layers=2, hidden_size=8, rms_norm_eps=1e-6)


def test_a_kept_layer_of_a_good_plan_is_the_family_layer(build):
    assert build(config=config(GOOD), quant_config=None, prefix="model.layers.0") == "the family's own layer"


@pytest.mark.parametrize(
    "plan,says",
    [
        ({**GOOD, "mode": "mlp"}, "nbl.mode must be one of"),
        ({**GOOD, "method": "NBL"}, "nbl.method must be one of"),
        ({**GOOD, "layers": [1, 5]}, r"nbl.layers must be a list of distinct layer indices in \[0, 2\)"),
    ],
)
def test_a_bad_plan_is_refused_before_any_layer_is_built(build, plan, says):
    with pytest.raises(ValueError, match=says):
        build(config=config(plan), quant_config=None, prefix="model.layers.0")
