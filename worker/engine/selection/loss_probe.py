"""The `loss` criterion, layer by layer: the rise in next-token loss when one layer alone is replaced.

For every layer j, the model with layer j replaced (its fitted map, or nothing for DROP) is run on
the held-out blocks, and its mean next-token loss is compared with the unmodified model's. Layer j
changes everything after it, so each variant needs layers j..L-1. Rather than L full passes (each
reading every layer's weights), one walk over the layers carries L + 1 streams of hidden states:

    at layer l:  base stream      -> original layer l
                 streams j < l    -> original layer l       (layer j was replaced earlier)
                 stream l         -> replaced layer l, from a copy of the base stream's input
    at the end:  every stream     -> final norm + LM head -> Σ -log p(next token)

Each layer's weights are read once. Cost: layer l runs on l + 2 streams, so about L²/2 layer passes
over the held-out blocks, i.e. (L / 2) x (held-out / all blocks) of calibration's forward work
(L=30, a tenth held out: 1.5 calibration passes; L=80: 4), plus L + 1 LM-head passes over the
held-out tokens, a chunk of positions at a time (scoring/likelihood.token_nll). Host memory: L + 1 copies of
the held-out hidden states, spilt to disk past the budget, and one chunk of logits.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from nbl.sizing.head import head_chunk
from worker.engine.calibration.activations import HiddenCache
from worker.engine.calibration.calibrate import first_pass
from worker.engine.calibration.layer_source import as_source, head_logits
from worker.engine.modeling.modeling_nbl import NBLAttention, NBLBlock, attn_branch
from worker.engine.scoring.likelihood import token_nll
from worker.engine.scoring.scores import LinearMap

BASE = "base"


@contextmanager
def replaced_layer(layer: torch.nn.Module, i: int, config, mode: str, method: str, fmap: LinearMap | None):
    """Layer `i` with its attention branch (attn) or itself (block) replaced, as modeling_nbl does."""
    ref, d = next(layer.parameters()), config.hidden_size
    cls = NBLAttention if mode == "attn" else NBLBlock
    new = cls(d, i, linear=method == "nbl").to(device=ref.device, dtype=ref.dtype)
    if fmap is not None:
        with torch.no_grad():
            new.linear.weight.copy_(fmap.weight.to(ref.dtype))
            new.linear.bias.copy_(fmap.bias.to(ref.dtype))
    if mode == "block":
        yield new
        return
    saved = {name: getattr(layer, name) for name in attn_branch(config)}
    for name in saved:  # the branch's norms go, the map takes attention's place (modeling_nbl.apply_nbl)
        setattr(layer, name, new if name == "self_attn" else torch.nn.Identity())
    try:
        yield layer
    finally:
        for name, module in saved.items():
            setattr(layer, name, module)


def layer_output(o):
    return o[0] if isinstance(o, tuple) else o


@torch.no_grad()
def loss_rise(
    model,
    blocks: torch.Tensor,
    mode: str,
    method: str,
    maps: Callable[[int], LinearMap] | dict | None = None,
    batch_size: int = 1,
    progress: bool = True,
    on_pass: Callable[[int, int], None] | None = None,
    *,
    device=None,
    host_bytes: int | None = None,
    spill_dir: Path | None = None,
) -> list[float]:
    """For each layer alone: mean loss on `blocks` with it replaced minus the base model's.

    `model`: a model in memory or a layer_source; `maps(i)` (or maps[i]) the map of layer i (nbl only).
    `on_pass(done, total)` after each layer pass of one batch (layer l makes l + 2 of them per batch) and
    each LM-head pass of a stream, so reports stay a pass apart, at most a few seconds on SmolLM2 on a
    CPU, even at the last layers; it may raise to cancel.
    """
    source = as_source(model)
    device = torch.device(device) if device is not None else source.device
    get_map = maps.__getitem__ if isinstance(maps, dict) else maps
    n_layers = source.config.num_hidden_layers
    n = blocks.shape[0]
    batches = [(s, min(s + batch_size, n), "held") for s in range(0, n, batch_size)]
    streams = [BASE, *range(n_layers)]
    with HiddenCache(host_bytes, spill_dir) as cache:
        kwargs = first_pass(source, blocks, batches, device, cache)  # cache[b]: the base stream's input
        source.release_stem()
        for b in range(len(batches)):
            cache.put((BASE, b), cache.pop(b))
        # An LM-head pass over a stream counts as vocab / 12d layer passes (a layer holds ~12 d² weights).
        head = max(1, round(source.config.vocab_size / (12 * source.config.hidden_size)))
        done, total_passes = 0, len(batches) * (sum(i + 2 for i in range(n_layers)) + head * len(streams))
        tick = on_pass or (lambda done, total: None)
        for i in tqdm(range(n_layers), desc="loss probe", unit="layer", disable=not progress):
            layer = source.layer(i, device)
            fmap = get_map(i) if method == "nbl" else None
            try:
                for b in range(len(batches)):
                    kw = kwargs[b][i]
                    base_in = cache.get((BASE, b)).to(device)
                    with replaced_layer(layer, i, source.config, mode, method, fmap) as rep:
                        cache.put((i, b), layer_output(rep(base_in, **kw)))
                    done += 1
                    tick(done, total_passes)
                    for j in streams[1 : i + 1]:  # streams whose replaced layer is behind
                        cache.put((j, b), layer_output(layer(cache.get((j, b)).to(device), **kw)))
                        done += 1
                        tick(done, total_passes)
                    cache.put((BASE, b), layer_output(layer(base_in, **kw)))
                    done += 1
                    tick(done, total_passes)
            finally:
                source.release(i)
        norm, lm_head = source.head(device)
        chunk = head_chunk(source.config.vocab_size)  # positions through the head at once, not a batch's
        try:
            losses = {}
            for s in streams:
                total, count = 0.0, 0
                for b, (lo, hi, _) in enumerate(batches):
                    target = blocks[lo:hi, 1:].to(device)
                    h = cache.get((s, b)).to(device)[:, :-1]
                    nll = token_nll(h, lambda x: head_logits(source.config, norm, lm_head, x), target, chunk)
                    total += float(nll.double().sum())
                    count += target.numel()
                    done += head
                    tick(done, total_passes)
                losses[s] = total / count
        finally:
            source.release_head()
    return [losses[i] - losses[BASE] for i in range(n_layers)]
