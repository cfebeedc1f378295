"""The parameters an output removes: those of its replaced layers (attention branches or whole blocks) less the
maps that take their place, in total and active (a mixture of experts' token runs its top-k experts only).

Pure: from the base's config.json and the plan, for the card and `nbl compress --json` (issue 37: a MoE output is
judged by both numbers, e.g. Qwen3-30B-A3B's 30.5B total and 3.3B active).
"""

from __future__ import annotations

from nbl.sizing.shapes import layer_param_counts, param_counts, shape_of


def removed_params(config: dict, layers, mode: str, method: str) -> dict:
    """{"total", "active", "removed_total", "removed_active"}: the base's parameters and those the plan removes."""
    shape = shape_of(config)
    base = param_counts(shape)
    maps = (shape.hidden * shape.hidden + shape.hidden) if method == "nbl" else 0  # W and b per replaced layer
    total = active = 0
    for i in layers:
        layer = layer_param_counts(shape, i, mode)
        total, active = total + layer.total - maps, active + layer.active - maps
    return {"total": base.total, "active": base.active, "removed_total": total, "removed_active": active}
