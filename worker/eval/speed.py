"""Inference speed and size: what linearizing layers buys.

- prefill tokens/s at 512 and 2048 tokens: one forward of (1, T) tokens that fills a KV cache and
  keeps only the last position's logits, as generation does;
- decode tokens/s: `new_tokens` greedy steps of one token each, with the KV cache on, after a prefill
  of `decode_context` tokens (fewer if the window is short). Every step attends to the whole cache;
  the reference code's decode benchmark never passed the cache, so its context cost nothing;
- the token ids are seeded random ones, opening with the tokenizer's prefix when it has one (Gemma's
  `<bos>`, engine/text_prefix.py), as every real input does;
- each timing is the median of `repeats` runs after `warmup` untimed ones;
- KV-cache bytes per token, read from the cache object a forward returns: layers NBL replaced keep a
  `DummyLayer` holding nothing, so they add nothing;
- parameters, and the paper's sparsity: the share of non-embedding parameters removed vs the base,
  1 - P_ne / P_ne(base). P_ne(base) is given, or rebuilt on the meta device from a compressed
  model's config (its base architecture, no weights).
"""

from __future__ import annotations

import statistics
import time

import torch

from ..engine.placement import input_device
from .kv import cache_kwarg, cache_of, keep_last_logits


def count_parameters(model) -> dict[str, int]:
    """{"params", "non_embedding_params"}: input and output embeddings (counted once when tied) aside."""
    unique = {id(p): p for p in model.parameters()}
    embeddings = {}
    for module in (model.get_input_embeddings(), model.get_output_embeddings()):
        if module is not None:
            embeddings.update({id(p): p for p in module.parameters()})
    total = sum(p.numel() for p in unique.values())
    return {"params": total, "non_embedding_params": total - sum(p.numel() for p in embeddings.values())}


def base_non_embedding_params(config) -> int | None:
    """P_ne of the uncompressed architecture of a compressed model's config; None for other models."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if getattr(config, "nbl", None) is None or not str(config.model_type).startswith("nbl_"):
        return None
    family = config.model_type.removeprefix("nbl_")
    drop = {"nbl", "auto_map", "model_type", "architectures", "transformers_version"}
    base_cfg = AutoConfig.for_model(family, **{k: v for k, v in config.to_dict().items() if k not in drop})
    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(base_cfg)
    return count_parameters(base)["non_embedding_params"]


def sparsity(non_embedding: int, base_non_embedding: int) -> float:
    return 1.0 - non_embedding / base_non_embedding


def kv_cache_bytes(cache) -> int:
    """Bytes of key/value tensors over the cache's layers that hold them."""
    total = 0
    for layer in getattr(cache, "layers", []):
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_time(run, repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        run()
    return statistics.median(run() for _ in range(repeats))


@torch.no_grad()
def _prefill(model, ids: torch.Tensor, **kw):
    return model(input_ids=ids, use_cache=True, **kw)  # ids: (1, T)


@torch.no_grad()
def measure_speed(
    model,
    lengths: tuple[int, ...] = (512, 2048),
    new_tokens: int = 128,
    decode_context: int = 512,
    repeats: int = 3,
    warmup: int = 1,
    base_non_embedding: int | None = None,
    seed: int = 0,
    prefix: tuple[int, ...] = (),
) -> dict:
    device = input_device(model)  # under device_map, where its first layer runs
    vocab = model.config.vocab_size
    window = getattr(model.config, "max_position_embeddings", None) or max(*lengths, decode_context + new_tokens)
    decode_context = max(1, min(decode_context, window - new_tokens))  # a short window shortens the context
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, max(*lengths, decode_context)), generator=gen)  # (1, T_max)
    ids[0, : len(prefix)] = torch.tensor(prefix, dtype=torch.long)
    ids = ids.to(device)
    keep = keep_last_logits(model)
    cache_arg = cache_kwarg(model)

    def prefill_run(t: int):
        def run() -> float:
            _sync(device)
            start = time.perf_counter()
            _prefill(model, ids[:, :t], **keep)
            _sync(device)
            return time.perf_counter() - start

        return run

    def decode_run() -> float:
        out = _prefill(model, ids[:, :decode_context], **keep)
        cache, nxt = cache_of(out), out.logits[:, -1:].argmax(-1)  # nxt: (1, 1)
        _sync(device)
        start = time.perf_counter()
        for _ in range(new_tokens):
            out = model(input_ids=nxt, use_cache=True, **{cache_arg: cache})
            cache, nxt = cache_of(out), out.logits[:, -1:].argmax(-1)
        _sync(device)
        return time.perf_counter() - start

    prefill = {str(t): (t / _median_time(prefill_run(t), repeats, warmup) if t <= window else None) for t in lengths}
    decode = new_tokens / _median_time(decode_run, repeats, warmup)

    cache = cache_of(_prefill(model, ids[:, :decode_context], **keep))
    kv_layers = sum(isinstance(getattr(layer, "keys", None), torch.Tensor) for layer in cache.layers)
    params = count_parameters(model)
    base = base_non_embedding if base_non_embedding is not None else base_non_embedding_params(model.config)
    return {
        "prefill_tokens_per_s": prefill,
        "decode_tokens_per_s": decode,
        "decode_context": decode_context,
        "new_tokens": new_tokens,
        "kv_cache_bytes_per_token": kv_cache_bytes(cache) / decode_context,
        "kv_cache_layers": kv_layers,
        **params,
        "base_non_embedding_params": base,
        "sparsity": sparsity(params["non_embedding_params"], base) if base else None,
        "repeats": repeats,
        "device": str(device),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
    }
