"""Each family's entry (nbl/families.py, and its copy in the shipped modeling file) says where a layer's attention
branch ends and which norm feeds the MLP. Checked in float64 on every family's tiny random model, against the
layer's own forward: the residual entering the MLP branch is h + the branch's output, and a replaced branch adds
exactly W h + b."""

from __future__ import annotations

import pytest
import torch
from testkit.models import FAMILY_CONFIGS, tiny_model

from nbl.families import FAMILIES
from worker.engine.modeling import modeling_nbl


def _float64(family: str, layers: int):
    # experts run one by one: the grouped matmul of transformers' default takes 32 and 16-bit floats only
    return tiny_model(family, layers=layers, experts_implementation="eager").double()


class ZeroMLP(torch.nn.Module):
    """An MLP branch that adds nothing: what a layer returns is then the residual after attention."""

    def forward(self, x):
        return torch.zeros_like(x)


def _layer_io(model, i: int, ids: torch.Tensor, **hooks):
    """Layer i's input h, output, and what the named modules received or returned (float64)."""
    layer = model.model.layers[i]
    seen, handles = {}, []

    def keep(name, inputs: bool):
        def hook(module, args, output):
            value = args[0] if inputs else (output[0] if isinstance(output, tuple) else output)
            seen[name] = value

        return hook

    def on_layer(module, args, kwargs, output):
        seen["h"] = args[0] if args else kwargs["hidden_states"]
        seen["out"] = output[0] if isinstance(output, tuple) else output

    handles.append(layer.register_forward_hook(on_layer, with_kwargs=True))
    for name, (module, inputs) in hooks.items():
        handles.append(module.register_forward_hook(keep(name, inputs)))
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for h in handles:
            h.remove()
    return seen


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_the_branch_output_is_what_the_layer_adds_before_its_mlp(family):
    model = _float64(family, layers=2)
    layer = model.model.layers[1]
    ids = torch.randint(2, 100, (2, 20), generator=torch.Generator().manual_seed(0))
    io = _layer_io(
        model,
        1,
        ids,
        branch=(modeling_nbl.branch_end(layer, model.config), False),
        ln2_in=(getattr(layer, FAMILIES[family].ln2), True),
    )
    torch.testing.assert_close(io["ln2_in"] - io["h"], io["branch"], rtol=0, atol=1e-12)


@pytest.mark.parametrize("family", sorted(FAMILY_CONFIGS))
def test_a_replaced_attention_branch_adds_exactly_w_h_plus_b(family):
    model = _float64(family, layers=3)
    d = model.config.hidden_size
    modeling_nbl.apply_nbl(model, {"mode": "attn", "method": "nbl", "layers": [1]})
    g = torch.Generator().manual_seed(1)
    layer = model.model.layers[1]
    with torch.no_grad():
        layer.self_attn.linear.weight.copy_(torch.randn(d, d, generator=g, dtype=torch.float64) / d)
        layer.self_attn.linear.bias.copy_(torch.randn(d, generator=g, dtype=torch.float64))
    layer.mlp = ZeroMLP()
    ids = torch.randint(2, 100, (2, 20), generator=torch.Generator().manual_seed(0))
    io = _layer_io(model, 1, ids)
    want = io["h"] + layer.self_attn.linear(io["h"])
    torch.testing.assert_close(io["out"], want, rtol=0, atol=1e-12)
    # nothing of the branch is left: its norms are identities, attention is the map
    for name in FAMILIES[family].attn:
        assert isinstance(getattr(layer, name), (torch.nn.Identity, modeling_nbl.NBLAttention))


def test_the_shipped_modeling_file_has_every_entry_and_branch():
    assert {f: (e.config, e.model, e.attn) for f, e in FAMILIES.items()} == modeling_nbl.FAMILIES
    assert set(FAMILY_CONFIGS) == set(FAMILIES)  # every family has its tiny config in the tests


def test_the_vllm_plugin_builds_the_families_whose_entry_says_so():
    """The plugin (its own venv, which may not import nbl) has its own table: read from its source, it must be
    the entries with plugin=True, so runs_in never claims vLLM for a family the plugin does not build."""
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parents[4] / "integrations" / "vllm" / "nbl_vllm" / "configs.py"
    tables = [
        ast.literal_eval(node.value)
        for node in ast.parse(source.read_text()).body
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "FAMILIES"
    ]
    assert len(tables) == 1 and set(tables[0]) == {f for f, entry in FAMILIES.items() if entry.plugin}


def test_vllm_is_claimed_for_a_fold_output_only_where_a_vllm_test_runs_one():
    """An entry's `plain` names vLLM only for a family whose fold block output tests/serving/test_vllm_forms.py
    serves in vLLM (token-exact against transformers); read from its source (it runs in the serving venv)."""
    import ast
    import re

    from testkit.models import REPO

    source = (REPO / "tests" / "serving" / "test_vllm_forms.py").read_text()
    names = ast.literal_eval(re.search(r"^NAMES = (\[.*?\])", source, re.S | re.M).group(1))
    served = {n.removeprefix("tiny-").removesuffix("-fold-block") for n in names if n.startswith("tiny-")}
    assert {f for f, entry in FAMILIES.items() if "vllm" in entry.plain} == served & set(FAMILIES)
