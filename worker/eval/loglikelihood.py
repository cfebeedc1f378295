"""Log-likelihood of continuations given contexts, computed as lm-evaluation-harness computes it.

Pairs are split into tokens as lm-eval splits them (token_split.py). The model reads
(ctx + cont)[-(L+1):][:-1], L its context window; an input cut so opens with the tokenizer's prefix
still when the whole did (engine/text_prefix.py: Gemma's `<bos>`), where lm-eval drops it, and

    ll     = Σ_i log p(cont_i | ctx, cont_<i)
    greedy = every cont_i is the argmax of its distribution

Requests whose model input is identical (the choices " A", " B", ... of one MMLU prompt) share one
forward pass, as lm-eval's one-token-continuation cache does; inputs sharing a long prefix (MMLU's
five examples, a question before its choices) run that prefix once into a KV cache, which cuts the
tokens of 5-shot MMLU about 3.4-fold. Rows are right-padded without an attention mask: under causal
attention, padding after a row never changes its logits.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Callable

import torch
from tqdm.auto import tqdm

from ..engine.placement import input_device
from ..engine.text_prefix import text_prefix
from .kv import cache_kwarg, cache_of, keep_last_logits
from .token_split import encode_pair, max_length

MIN_SHARED = 32  # shortest common prefix worth a forward of its own


def model_input(ctx: list[int], cont: list[int], window: int, prefix: tuple[int, ...] = ()) -> tuple[int, ...]:
    """What the model reads for a request: (ctx + cont)[:-1], its last `window` tokens when longer, after
    the prefix when the whole opens with it."""
    whole = ctx + cont
    if len(whole) <= window + 1 or not prefix or tuple(whole[: len(prefix)]) != prefix:
        if len(cont) > window:
            raise ValueError(f"a continuation of {len(cont)} tokens does not fit the {window}-token window")
        return tuple(whole[-(window + 1) :][:-1])
    room = window - len(prefix)
    if len(cont) > room:
        raise ValueError(
            f"a continuation of {len(cont)} tokens does not fit the {window}-token window after its "
            f"{len(prefix)}-token prefix"
        )
    return prefix + tuple(whole[-(room + 1) : -1])


def common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def plan_batches(
    inputs: dict[tuple[int, ...], int], batch_tokens: int, min_shared: int = MIN_SHARED
) -> list[tuple[int, list[tuple[int, ...]]]]:
    """Batches (shared, rows) of model inputs; `inputs` maps each input to how many of its last
    positions are scored.

    Inputs in lexicographic order that share a prefix of >= min_shared tokens (few-shot examples, a
    question before its choices) form a batch whose prefix runs once into a KV cache, `shared` > 0;
    only the differing suffixes are batched. The prefix stops before the first scored position, and
    stays the previous batch's when that one still fits (one KV cache per MMLU subject, not per batch).
    Everything else is batched whole (shared = 0), longest first, at most `batch_tokens` per batch.
    """
    out, alone = [], []
    order = sorted(inputs)
    i = 0
    while i < len(order):
        rows, shared, longest = [order[i]], len(order[i]) - inputs[order[i]], len(order[i])
        j = i + 1
        while j < len(order):
            s = min(shared, common_prefix(rows[0], order[j]), len(order[j]) - inputs[order[j]])
            if s < min_shared or (len(rows) + 1) * (max(longest, len(order[j])) - s) > batch_tokens:
                break
            rows.append(order[j])
            shared, longest = s, max(longest, len(order[j]))
            j += 1
        if len(rows) > 1:
            last = out[-1][1][0][: out[-1][0]] if out else ()
            if min_shared <= len(last) <= shared and rows[0][: len(last)] == last:
                shared = len(last)  # keep the previous batch's prefix: its KV cache is reused
            out.append((shared, rows))
        else:
            alone.append(rows[0])
        i = j
    alone.sort(key=lambda t: (-len(t), t))  # longest first: each batch's first row sets its width
    start = 0
    while start < len(alone):
        n = max(1, batch_tokens // len(alone[start]))
        out.append((0, alone[start : start + n]))
        start += n
    return out


@torch.no_grad()
def _prefix_cache(model, prefix: tuple[int, ...], device, memo: dict):
    """A KV cache of `prefix`; a copy of the last one when the prefix is the same (5-shot MMLU asks
    for one subject's prefix batch after batch)."""
    if memo.get("prefix") != prefix:
        ids = torch.tensor([prefix], device=device)  # (1, P)
        memo["prefix"], memo["cache"] = (
            prefix,
            cache_of(model(input_ids=ids, use_cache=True, **keep_last_logits(model))),
        )
    return copy.deepcopy(memo["cache"])


@torch.no_grad()
def _logits(model, shared: int, rows: list[tuple[int, ...]], device, memo: dict) -> torch.Tensor:
    """Logits at input positions shared.., right-padded: (B, T - shared, V)."""
    ids = torch.zeros(len(rows), max(map(len, rows)) - shared, dtype=torch.long)  # (B, T - shared)
    for r, inp in enumerate(rows):
        ids[r, : len(inp) - shared] = torch.tensor(inp[shared:])
    if not shared:
        return model(input_ids=ids.to(device), use_cache=False).logits
    cache = _prefix_cache(model, rows[0][:shared], device, memo)
    cache.batch_repeat_interleave(len(rows))
    return model(input_ids=ids.to(device), use_cache=True, **{cache_kwarg(model): cache}).logits


@torch.no_grad()
def score(
    model,
    requests: list[tuple[list[int], list[int]]],
    window: int,
    batch_tokens: int = 2048,
    progress: bool = False,
    share_prefix: bool = True,
    on_batch: Callable[[int, int], None] | None = None,
    prefix: tuple[int, ...] = (),
) -> list[tuple[float, bool]]:
    """(log-likelihood, greedy) of each (context tokens, continuation tokens) request; `on_batch(done,
    total)` after each batch (it may raise to cancel); `prefix`: the tokenizer's, kept when a long input
    is cut (model_input).

    With `share_prefix` a common prefix runs once (KV cache); the numbers then match a full forward
    to float rounding (about 1e-5 in float32), not bit for bit.
    """
    device = input_device(model)  # under device_map, where its first layer runs
    users: dict[tuple[int, ...], list[int]] = defaultdict(list)  # model input -> requests reading it
    for i, (ctx, cont) in enumerate(requests):
        users[model_input(ctx, cont, window, prefix)].append(i)
    span = {inp: max(len(requests[i][1]) for i in idx) for inp, idx in users.items()}
    batches = plan_batches(span, batch_tokens, MIN_SHARED if share_prefix else window + 1)

    out: list[tuple[float, bool] | None] = [None] * len(requests)
    memo: dict = {}
    if on_batch is not None:  # the count first: the first batch's layers are reported as they pass (steps.py)
        on_batch(0, len(batches))
    for n_done, (shared, rows) in enumerate(tqdm(batches, desc="loglikelihood", unit="batch", disable=not progress), 1):
        logits = _logits(model, shared, rows, device, memo)  # (B, T - shared, V)
        for r, inp in enumerate(rows):
            end = len(inp) - shared
            logp = torch.log_softmax(logits[r, end - span[inp] : end].float(), dim=-1)  # (span, V)
            for i in users[inp]:
                cont = requests[i][1]
                lp = logp[span[inp] - len(cont) :]  # (C, V): the positions predicting cont
                target = torch.tensor(cont, device=lp.device)
                ll = lp.gather(1, target[:, None]).sum()
                out[i] = (float(ll), bool((lp.argmax(-1) == target).all()))
        if on_batch is not None:
            on_batch(n_done, len(batches))
    return out  # type: ignore[return-value]


def loglikelihoods(
    model,
    tokenizer,
    pairs: list[tuple[str, str]],
    batch_tokens: int = 2048,
    progress: bool = False,
    share_prefix: bool = True,
    on_batch: Callable[[int, int], None] | None = None,
) -> list[tuple[float, bool]]:
    """(log-likelihood, greedy) of each (context, continuation) string pair."""
    requests = [encode_pair(tokenizer, c, k) for c, k in pairs]
    window = max_length(model, tokenizer)
    return score(model, requests, window, batch_tokens, progress, share_prefix, on_batch, text_prefix(tokenizer))
