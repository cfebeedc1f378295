"""The rules of config.json's `nbl` plan, as the transformers loader applies them.

A copy, word for word, of `validate_plan` (and its constants and helper) in the modeling_nbl.py shipped
with every output (worker/engine/modeling/modeling_nbl.py): the plugin cannot import that file (it is not
installed; loading it would be trust_remote_code), and that file can import nothing of ours. With the
same rules and messages in both, one checkpoint loads in transformers and in vLLM, or in neither: mode
`mlp`, method `NBL` or a layer out of range is refused, not served as some other model.
tests/worker/engine/modeling/test_nbl_plan_rules.py holds the two copies to each other. Imports nothing (no vllm, no
torch), so that test loads this file by its path.
"""

from __future__ import annotations

MODES = ("attn", "block")
METHODS = ("nbl", "drop")
PLAN_KEYS = ("mode", "method", "layers", "bias")


def checked_plan(config) -> dict:
    """`config.nbl`, validated against the config's own layer count; raises ValueError."""
    plan = getattr(config, "nbl", None)
    validate_plan(plan, config.num_hidden_layers)
    return plan


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_plan(plan, num_layers: int) -> None:
    """Raise ValueError unless `plan` (config.json's `nbl`) names a known mode and method, distinct
    in-range layer indices and a boolean bias, and nothing else. Both loaders run this function, word for
    word (transformers: modeling_nbl.py; vLLM: nbl_vllm/plan_rules.py): a checkpoint loads in both or neither."""
    if not isinstance(plan, dict):
        raise ValueError(f"config.nbl must be an object {{mode, method, layers}}, got {_shown(plan)}")
    unknown = sorted(str(key) for key in plan if key not in PLAN_KEYS)
    if unknown:
        raise ValueError(f"config.nbl has unknown keys {unknown}; the known ones are {PLAN_KEYS}")
    if plan.get("mode") not in MODES:
        raise ValueError(f"nbl.mode must be one of {MODES}, got {_shown(plan.get('mode'))}")
    if plan.get("method") not in METHODS:
        raise ValueError(f"nbl.method must be one of {METHODS}, got {_shown(plan.get('method'))}")
    layers = plan.get("layers")
    if (
        not isinstance(layers, list)
        or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers)
        or len(set(layers)) != len(layers)
        or not all(0 <= i < num_layers for i in layers)
    ):
        raise ValueError(
            f"nbl.layers must be a list of distinct layer indices in [0, {num_layers}), got {_shown(layers)}"
        )
    if not isinstance(plan.get("bias", True), bool):
        raise ValueError(f"nbl.bias must be true or false, got {_shown(plan['bias'])}")
