"""The KV cache argument of a causal LM's forward, under either name.

transformers 5.x renamed `past_key_values` (argument and output field) to `cache`; the older name
still works there with a deprecation warning. Both are spelled here so callers need not care.
"""

from __future__ import annotations

import inspect


def cache_kwarg(model) -> str:
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def cache_of(output):
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def keep_last_logits(model) -> dict:
    """{"logits_to_keep": 1} where the forward takes it: a prefill needs only the last position's logits."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
