"""A checkpoint's tensor names and the model's parameter names, which differ for mixture-of-experts families.

transformers >= 5 holds a MoE layer's experts as stacked parameters (`mlp.experts.gate_up_proj`, [E, 2I, d];
`mlp.experts.down_proj`, [E, d, I]) while the checkpoints on the Hub, and what save_pretrained writes, keep one
matrix per expert (`mlp.experts.{e}.down_proj.weight`; Mixtral's `block_sparse_moe.experts.{e}.w2.weight`).
from_pretrained converts between the two with the family's table (transformers/conversion_mapping.py);
this engine reads and writes checkpoints a layer or a tensor at a time, without from_pretrained, so it applies
the same table here:

    to_modules(model, tensors)      checkpoint names -> parameter names (stacked, renamed), for load_state_dict
    to_checkpoint(model, tensors)   parameter names -> checkpoint names, as save_pretrained writes them

For a dense family the table is empty and both return their input. The tensors may be on the meta device
(the output writer's layout): the conversions only stack, split, concatenate and rename.
"""

from __future__ import annotations

from copy import deepcopy


def _transforms(model, reverse: bool):
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange, WeightConverter, WeightRenaming

    transforms = [t for t in get_model_conversion_mapping(model, add_legacy=False) if not isinstance(t, PrefixChange)]
    if reverse:  # as transformers' revert_weight_conversion: sub-models first, each transform inverted
        transforms = [t.reverse_transform() for t in transforms[::-1]]
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    return renamings, converters


def _convert(model, tensors: dict, reverse: bool) -> dict:
    from transformers.core_model_loading import (
        WeightRenaming,
        apply_converters,
        apply_renamings,
        dot_natural_key,
        rename_source_key,
    )

    renamings, converters = _transforms(model, reverse)
    if not renamings and not converters:
        return dict(tensors)
    by_pattern = {pattern: c for c in converters for pattern in c.source_patterns}
    pending: dict = {}  # target name -> (transform collecting its sources, whether it is a converter)
    for key, tensor in sorted(tensors.items(), key=lambda kv: dot_natural_key(kv[0])):
        if reverse:  # a converter's key only: the renamings apply to what it produces (below)
            new, pattern = apply_converters(key, converters)
            new = new if pattern is not None else apply_renamings(key, renamings)
        else:
            new, pattern = rename_source_key(key, renamings, converters)
        if pattern is None:
            transform, _ = pending.setdefault(new, (WeightRenaming(key, new), False))
            transform.add_tensor(new, key, key, tensor)
        else:  # each target gets its own converter, which collects every source tensor of that target
            transform, _ = pending.setdefault(new, (deepcopy(by_pattern[pattern]), True))
            transform.add_tensor(new, key, pattern, tensor)
    out = {}
    for first, (transform, converter) in pending.items():
        for name, value in transform.convert(first, model=model, config=model.config).items():
            if reverse and converter:
                name = apply_renamings(name, renamings)
            out[name] = value[0] if isinstance(value, list) else value
    return out


def to_modules(model, tensors: dict) -> dict:
    """Checkpoint tensors (full names) as `model`'s parameters: renamed and, for MoE experts, stacked."""
    return _convert(model, tensors, reverse=False)


def to_checkpoint(model, tensors: dict) -> dict:
    """`model`'s parameters (full names) as its family's checkpoints hold them: per expert, original names."""
    return _convert(model, tensors, reverse=True)
