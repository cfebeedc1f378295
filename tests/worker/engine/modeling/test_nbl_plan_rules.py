"""One checkpoint, one verdict (issue 24, finding 14): the vLLM plugin took mode `mlp` for attn, method
`NBL` for drop and ignored layers out of range, where the transformers loader (the modeling_nbl.py
shipped with every output) refused all three. Both now run the same `validate_plan`, in two copies (the
output's file may import nothing of ours, and the plugin cannot import the output's file): the same
table of plans goes through both, which must accept and refuse alike, with the same messages.

The plugin's copy is loaded by its file path: it imports nothing, so no vLLM (not in this venv) is needed.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from worker.engine.modeling import modeling_nbl

RULES_FILE = Path(__file__).resolve().parents[4] / "integrations" / "vllm" / "nbl_vllm" / "plan_rules.py"
LAYERS = 4
GOOD = {"mode": "attn", "method": "nbl", "layers": [1, 3], "bias": True}

ACCEPTED = [
    GOOD,
    {"mode": "block", "method": "drop", "layers": [0, 3]},  # bias is optional
    {"mode": "attn", "method": "drop", "layers": []},
    {"mode": "block", "method": "nbl", "layers": [3, 0, 2], "bias": False},
]
REFUSED = [  # (plan, a part of the message)
    ({**GOOD, "mode": "mlp"}, "nbl.mode must be one of ('attn', 'block'), got 'mlp'"),  # was attn in vLLM
    ({**GOOD, "method": "NBL"}, "nbl.method must be one of ('nbl', 'drop'), got 'NBL'"),  # was drop in vLLM
    ({**GOOD, "layers": [1, 4]}, "nbl.layers must be a list of distinct layer indices in [0, 4), got [1, 4]"),
    ({**GOOD, "layers": [-1]}, "in [0, 4), got [-1]"),
    ({**GOOD, "layers": [1, 1]}, "distinct"),
    ({**GOOD, "layers": [1.0]}, "got [1.0]"),
    ({**GOOD, "layers": [True]}, "got [True]"),
    ({**GOOD, "layers": "13"}, "got '13'"),
    ({**GOOD, "layers": list(range(1000))}, "..."),  # a long value is shortened in the message
    ({k: v for k, v in GOOD.items() if k != "layers"}, "got None"),
    ({k: v for k, v in GOOD.items() if k != "mode"}, "nbl.mode must be one of"),
    ({**GOOD, "bias": "false"}, "nbl.bias must be true or false, got 'false'"),
    ({**GOOD, "rank": 8}, "config.nbl has unknown keys ['rank']"),
    (None, "config.nbl must be an object {mode, method, layers}, got None"),  # no `nbl` in config.json
    (["attn", "nbl", [1]], "config.nbl must be an object"),
]


def plugin_rules():
    spec = importlib.util.spec_from_file_location("nbl_vllm_plan_rules", RULES_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verdict(validate, plan) -> str | None:
    """None when accepted, else the message."""
    try:
        validate(plan, LAYERS)
    except ValueError as e:
        return str(e)
    return None


@pytest.mark.parametrize("plan", ACCEPTED)
def test_both_loaders_accept_a_good_plan(plan):
    assert verdict(modeling_nbl.validate_plan, plan) is None
    assert verdict(plugin_rules().validate_plan, plan) is None


@pytest.mark.parametrize("plan,says", REFUSED)
def test_both_loaders_refuse_a_bad_plan_with_the_same_message(plan, says):
    ours = verdict(modeling_nbl.validate_plan, plan)
    assert ours is not None and says in ours, ours
    assert len(ours) < 200, ours  # the plan's value is shown shortened
    assert verdict(plugin_rules().validate_plan, plan) == ours


def test_the_two_copies_are_the_same_code():
    """The table cannot list every plan; the copies themselves must not drift apart."""
    plugin = plugin_rules()
    for name in ("_shown", "validate_plan"):
        assert inspect.getsource(getattr(plugin, name)) == inspect.getsource(getattr(modeling_nbl, name)), name
    for name in ("MODES", "METHODS", "PLAN_KEYS"):
        assert getattr(plugin, name) == getattr(modeling_nbl, name), name


def test_the_plugin_checks_the_plan_against_the_config_layer_count():
    checked = plugin_rules().checked_plan
    assert checked(SimpleNamespace(nbl=GOOD, num_hidden_layers=LAYERS)) is GOOD
    with pytest.raises(ValueError, match=r"in \[0, 2\), got \[1, 3\]"):
        checked(SimpleNamespace(nbl=GOOD, num_hidden_layers=2))
    with pytest.raises(ValueError, match="config.nbl must be an object"):
        checked(SimpleNamespace(num_hidden_layers=LAYERS))


def test_the_transformers_loader_refuses_a_bad_plan_when_building_the_model():
    """The class an output's auto_map names builds its layers through validate_plan (a config with a bad
    `nbl` is what from_pretrained hands it)."""
    from transformers import LlamaConfig

    kw = dict(
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=LAYERS,
        num_attention_heads=2,
        num_key_value_heads=2,
        vocab_size=32,
    )
    build = modeling_nbl.NBLLlamaForCausalLM
    assert len(build(modeling_nbl.NBLLlamaConfig(nbl=GOOD, **LlamaConfig(**kw).to_dict())).model.layers) == LAYERS
    for plan, says in REFUSED[:3]:
        with pytest.raises(ValueError) as caught:
            build(modeling_nbl.NBLLlamaConfig(nbl=plan, **LlamaConfig(**kw).to_dict()))
        assert str(caught.value) == verdict(plugin_rules().validate_plan, plan) and says in str(caught.value)
    with pytest.raises(ValueError, match="config.nbl must be an object"):
        build(modeling_nbl.NBLLlamaConfig(**LlamaConfig(**kw).to_dict()))
