"""A model's shape as the API lists it (GET /v1/models, a job's estimate): the config.json numbers that
size it, and its parameter count. Pure: from the config alone (nbl/sizing/shapes.py reads it)."""

from __future__ import annotations

from nbl.sizing.shapes import ShapeError, shape_of


def shape_summary(config: dict) -> dict | None:
    """{"architecture", "model_type", "layers", "hidden_size", ..., "params"}; None for a config that does
    not give a decoder's numbers (the estimate refuses it too)."""
    try:
        s = shape_of(config)
    except (ShapeError, TypeError, ValueError):
        return None
    arch = config.get("architectures")
    return {
        "architecture": arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else None,
        "model_type": config.get("model_type") if isinstance(config.get("model_type"), str) else None,
        "layers": s.layers,
        "hidden_size": s.hidden,
        "intermediate_size": s.intermediate,
        "heads": s.heads,
        "kv_heads": s.kv_heads,
        "head_dim": s.head_dim,
        "vocab_size": s.vocab,
        "context": s.context,
        "params": s.params,
    }
