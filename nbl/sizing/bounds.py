"""The bounds on a config.json's numbers, and reading one number within them. A config is user input (a Hub
repo, a local:NAME, a GGUF's metadata converted): 10**12 layers once pinned the API's CPU, 10**300 overflowed
its floats. Pure.
"""

from __future__ import annotations

import math

# The largest value each number of a config.json may take: above any released decoder, and small enough that
# the estimate's arithmetic stays exact and quick.
BOUNDS = {
    "num_hidden_layers": 4096,  # nbl/request_fields.K_HARD_MAX: no k is larger either
    "hidden_size": 65536,
    "intermediate_size": 2**20,
    "num_attention_heads": 16384,
    "num_key_value_heads": 16384,
    "head_dim": 16384,
    "vocab_size": 2**22,
    "max_position_embeddings": 2**24,
    # a mixture of experts' numbers, bounded in the families that read them (its entry's layout, nbl/families.py): DeepSeek-V3 has
    # 256 experts, Qwen3-235B-A22B 128 with 8 active; moe_intermediate_size and the shared expert's width are
    # inner widths like intermediate_size
    "num_experts": 16384,
    "num_local_experts": 16384,
    "num_experts_per_tok": 16384,
    "moe_intermediate_size": 2**20,
    "shared_expert_intermediate_size": 2**20,
    "decoder_sparse_step": 4096,  # a layer count
}
MOE_KEYS = (
    "num_experts",
    "num_local_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "decoder_sparse_step",
)
MAX_DENSE_LAYERS = BOUNDS["num_hidden_layers"]  # entries of mlp_only_layers (layer indices: as many as layers)


class ShapeError(ValueError):
    """A config.json that lacks a number the estimate needs, or has one out of bounds (`field` names it)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def read_int(cfg: dict, key: str, default: int | None = None, where: str = "") -> int:
    """`where`: the key's prefix in a message (`text_config.`)."""
    value = cfg.get(key, default)
    if value is None:
        raise ShapeError(f"config.json has no {where}{key}", key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapeError(f"config.json: {where}{key} must be a positive integer, got {shown(value)}", key)
    if value > BOUNDS[key]:
        raise ShapeError(f"config.json: {where}{key} must be at most {BOUNDS[key]:,}, got {shown(value)}", key)
    return value


def read_layers(cfg: dict, key: str, where: str = "") -> tuple[int, ...]:
    """A list of layer indices (mlp_only_layers): absent or null is none."""
    value = cfg.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_DENSE_LAYERS:
        got = f"{len(value):,} entries" if isinstance(value, list) else shown(value)
        raise ShapeError(
            f"config.json: {where}{key} must be a list of at most {MAX_DENSE_LAYERS:,} layer indices, got {got}", key
        )
    for i in value:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < BOUNDS["num_hidden_layers"]:
            raise ShapeError(
                f"config.json: {where}{key} must hold layer indices from 0 to "
                f"{BOUNDS['num_hidden_layers'] - 1:,}, got {shown(i)}",
                key,
            )
    return tuple(value)


def shown(value) -> str:
    """A config's value in a message, short: a long number by its size, a list or object by its kind (repr
    of either could run to thousands of characters, or recurse as deep as the JSON nests)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 64:
        digits = math.floor(abs(value).bit_length() * math.log10(2)) + 1
        return f"a {'negative ' if value < 0 else ''}number of about {digits} digits"
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
