"""A decoder's shape, read from its config.json alone: the numbers every estimate term is made of.

Pure (no torch, no transformers): the API reads a `local:NAME` config, the CLI a directory or a Hub
config, and both get the same Shape. Multimodal configs keep the language model under `text_config`.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float64": 8}


class ShapeError(ValueError):
    """A config.json that lacks a number the estimate needs."""


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


def _int(cfg: dict, key: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise ShapeError(f"config.json has no {key}")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapeError(f"config.json: {key} must be a positive integer, got {value!r}")
    return value


def shape_of(config: dict) -> Shape:
    cfg = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    d = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    stored = cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "bfloat16"
    return Shape(
        hidden=d,
        layers=_int(cfg, "num_hidden_layers"),
        intermediate=_int(cfg, "intermediate_size", 4 * d),
        heads=heads,
        kv_heads=_int(cfg, "num_key_value_heads", heads),
        head_dim=_int(cfg, "head_dim", d // heads) if cfg.get("head_dim") is not None else d // heads,
        vocab=_int(cfg, "vocab_size"),
        tied=bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        checkpoint_bytes_per_param=DTYPE_BYTES.get(str(stored), 2),
        context=_int(cfg, "max_position_embeddings", 2048),
    )
