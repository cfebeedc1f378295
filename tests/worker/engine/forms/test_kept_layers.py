"""Form fold removes layers: the config of what remains must give every kept layer its base kind (kept_layers.py),
checked against the models transformers builds from the base config and from the written one."""

from __future__ import annotations

import pytest
from testkit.models import tiny_config, tiny_model

from worker.engine.forms.kept_layers import kept_config


@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_a_mixture_of_experts_keeps_each_layers_kind_after_removal(family):
    from transformers import AutoModelForCausalLM

    # experts on every second layer but layer 3, which is dense: removing 1 and 2 shifts the step's pattern
    base = tiny_model(family, layers=8, decoder_sparse_step=2, mlp_only_layers=[3])
    kinds = [type(layer.mlp).__name__ for layer in base.model.layers]
    assert kinds.count(kinds[1]) == 3  # layers 1, 5, 7 are MoE
    kept = [0, 3, 4, 5, 6, 7]
    config = type(base.config).from_dict(kept_config(base.config.to_dict(), kept))
    small = AutoModelForCausalLM.from_config(config)
    assert [type(layer.mlp).__name__ for layer in small.model.layers] == [kinds[i] for i in kept]


def test_layer_types_follow_the_kept_layers():
    config = tiny_config("gpt_oss", layers=4).to_dict()
    assert kept_config(config, [0, 3])["layer_types"] == [config["layer_types"][0], config["layer_types"][3]]
    assert kept_config(config, [0, 3])["num_hidden_layers"] == 2
