"""A decoder's shape, read from its config.json alone: the numbers every estimate term is made of.

Pure (no torch, no transformers): the API reads a `local:NAME` config, the CLI a directory or a Hub
config, and both get the same Shape. Multimodal configs keep the language model under `text_config`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float64": 8}


# The largest value each number of a config.json may take: above any released decoder, and small enough that
# the estimate's arithmetic stays exact and quick. A config is user input (a Hub repo, a local:NAME, a GGUF's
# metadata converted): 10**12 layers once pinned the API's CPU, 10**300 overflowed its floats.
BOUNDS = {
    "num_hidden_layers": 4096,  # nbl/request.K_HARD_MAX: no k is larger either
    "hidden_size": 65536,
    "intermediate_size": 2**20,
    "num_attention_heads": 16384,
    "num_key_value_heads": 16384,
    "head_dim": 16384,
    "vocab_size": 2**22,
    "max_position_embeddings": 2**24,
}


class ShapeError(ValueError):
    """A config.json that lacks a number the estimate needs, or has one out of bounds (`field` names it)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Shape:
    hidden: int  # d
    layers: int  # L
    intermediate: int  # I, the MLP's inner width
    heads: int  # H
    kv_heads: int  # grouped-query attention: K and V have kv_heads x head_dim columns
    head_dim: int
    vocab: int  # V
    tied: bool  # the LM head shares the embedding matrix
    checkpoint_bytes_per_param: int  # as stored on the Hub (config torch_dtype), for the download
    context: int = 2048  # max_position_embeddings: the evaluation's perplexity windows are min(this, 2048)

    @property
    def layer_params(self) -> int:
        """One decoder layer: q and o (d x H·hd), k and v (d x KV·hd), gate/up/down (3 d I), two norms."""
        d, attn = self.hidden, self.heads * self.head_dim
        return 2 * d * attn + 2 * d * self.kv_heads * self.head_dim + 3 * d * self.intermediate + 2 * d

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """The whole model: layers, embeddings, the LM head unless tied, the final norm."""
        return self.layers * self.layer_params + self.embed_params * (1 if self.tied else 2) + self.hidden


def _int(cfg: dict, key: str, default: int | None = None, where: str = "") -> int:
    """`where`: the key's prefix in a message (`text_config.`)."""
    value = cfg.get(key, default)
    if value is None:
        raise ShapeError(f"config.json has no {where}{key}", key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapeError(f"config.json: {where}{key} must be a positive integer, got {_shown(value)}", key)
    if value > BOUNDS[key]:
        raise ShapeError(f"config.json: {where}{key} must be at most {BOUNDS[key]:,}, got {_shown(value)}", key)
    return value


def _shown(value) -> str:
    """A config's value in a message, short: a long number by its size, a list or object by its kind (repr
    of either could run to thousands of characters, or recurse as deep as the JSON nests)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 64:
        digits = math.floor(abs(value).bit_length() * math.log10(2)) + 1
        return f"a {'negative ' if value < 0 else ''}number of about {digits} digits"
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "an object"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def out_of_bounds(config: dict) -> list[ShapeError]:
    """Each number the config gives that is not a positive integer within BOUNDS (absent ones are not
    checked: the estimate says what it lacks), at the top level and under text_config both: the estimate
    reads text_config when there is one, while transformers builds a text-only family (LlamaConfig) from
    the top level, so a bound on one level alone let 10**12 layers by on the other."""
    levels = [("", config)] + ([("text_config.", config["text_config"])]
                               if isinstance(config.get("text_config"), dict) else [])
    errors = []
    for where, cfg in levels:
        for key in BOUNDS:
            if cfg.get(key) is not None:
                try:
                    _int(cfg, key, where=where)
                except ShapeError as e:
                    errors.append(e)
    return errors


def _numbers(config: dict) -> dict:
    """Multimodal configs keep the language model under text_config."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def shape_of(config: dict) -> Shape:
    bad = out_of_bounds(config)  # both levels, though the shape is read from one
    if bad:
        raise bad[0]
    cfg = _numbers(config)
    d = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads", heads)
    if kv_heads > heads:
        raise ShapeError(f"config.json: num_key_value_heads ({kv_heads}) must be at most num_attention_heads "
                         f"({heads})", "num_key_value_heads")
    if cfg.get("head_dim") is None and heads > d:
        raise ShapeError(f"config.json: num_attention_heads ({heads}) must be at most hidden_size ({d}) "
                         "when head_dim is not given", "num_attention_heads")
    stored = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "bfloat16"
    return Shape(
        hidden=d,
        layers=_int(cfg, "num_hidden_layers"),
        intermediate=_int(cfg, "intermediate_size", 4 * d),
        heads=heads,
        kv_heads=kv_heads,
        head_dim=_int(cfg, "head_dim", d // heads) if cfg.get("head_dim") is not None else d // heads,
        vocab=_int(cfg, "vocab_size"),
        tied=bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        checkpoint_bytes_per_param=DTYPE_BYTES.get(stored, 2) if isinstance(stored, str) else 2,
        context=_int(cfg, "max_position_embeddings", 2048),
    )
