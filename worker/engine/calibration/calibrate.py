"""Calibration, layer by layer: each decoder layer's sums (stats.py) from one pass of every batch.

    embeddings(blocks) -> hidden cache -> layer 0 -> hidden cache -> layer 1 -> ... -> last layer

A first pass runs the decoder with every layer replaced by a catcher: it records the inputs of
layer 0 (the embeddings) and the other arguments each layer is called with (attention mask, rotary
tables), without running a layer. Then, for each layer in turn, its weights are brought to the device
(layer_source.py), every cached batch goes through it with the statistics hook, its outputs replace
its inputs in the host cache (activations.py), and its sums are handed to `on_layer` (scored and
written out by the caller) and dropped. Device memory at any moment: one layer's weights, one layer's
sums, one batch of activations; host memory: the hidden states of all blocks (spilt to disk past a
budget), never the whole model. The LM head is never run: calibration needs only the decoder stack.

The layers see exactly the inputs of a full forward pass, so the sums equal those of the former
one-pass calibration (tests/worker/engine/calibration/test_sequential.py).
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from worker.engine.calibration import distributed
from worker.engine.calibration.activations import HiddenCache
from worker.engine.calibration.form_taps import FormTaps
from worker.engine.calibration.heap import calibration_heap, release_free_memory
from worker.engine.calibration.layer_source import as_source
from worker.engine.calibration.stats import BRANCHES, LayerAccumulator, LayerStats
from worker.engine.devices import share
from worker.engine.modeling.modeling_nbl import branch_end


@dataclass
class Calibration:
    stats: list[LayerStats]  # one per decoder layer; empty when they went to `on_layer`
    tokens: int
    seconds: float
    stats_bytes: int  # float64 sums held at once: one layer's
    peak_rss_bytes: int  # process peak resident memory
    peak_device_bytes: int | None  # CUDA peak allocation, on GPU


def holdout_count(num_blocks: int, fraction: float = 0.1) -> int:
    """Blocks kept apart for the held-out diagnostic: the last tenth, at least one when possible."""
    if fraction <= 0 or num_blocks < 2:
        return 0
    return max(1, int(num_blocks * fraction))


class _Catcher(torch.nn.Module):
    """Stands in for decoder layer i during the first pass: records its call, passes h through."""

    def __init__(self, i: int, calls: dict):
        super().__init__()
        self.i, self.calls = i, calls

    def forward(self, hidden_states, *args, **kwargs):
        if args:
            raise TypeError("decoder layers are expected to take their arguments after h by keyword")
        self.calls[self.i] = (hidden_states, kwargs)
        return hidden_states


@torch.no_grad()
def first_pass(source, blocks, batches, device, cache: HiddenCache) -> list[list[dict]]:
    """Put each batch's layer-0 inputs in `cache`; return each batch's per-layer keyword arguments.

    A layer's arguments other than h (mask, rotary tables, positions) are the same objects for
    every layer of a family that does not vary them per layer, so they are stored once."""
    decoder = source.stem(device)
    layers = decoder.layers
    saved = list(layers)
    calls: dict[int, tuple] = {}
    per_batch = []
    try:
        for i in range(len(layers)):
            layers[i] = _Catcher(i, calls)
        for b, (lo, hi, _) in enumerate(batches):
            calls.clear()
            decoder(input_ids=blocks[lo:hi].to(device), use_cache=False)
            cache.put(b, calls[0][0])
            per_batch.append([calls[i][1] for i in range(len(layers))])
    finally:
        for i, layer in enumerate(saved):
            layers[i] = layer
    return per_batch


@torch.no_grad()
def calibrate(
    model,
    blocks: torch.Tensor,
    batch_size: int = 1,
    holdout: int = 0,
    product_dtype: torch.dtype = torch.float32,
    on_batch: Callable[[int, int], None] | None = None,
    progress: bool = True,
    *,
    modes=BRANCHES,
    device=None,
    host_bytes: int | None = None,
    spill_dir: Path | None = None,
    on_layer: Callable[[int, LayerStats], None] | None = None,
    devices: list[str] | None = None,
    timeout_s: float = distributed.TIMEOUT_S,
    group=None,
    tf32: bool = False,
    form: str = "nbl",
    max_run: int = 1,
) -> Calibration:
    """Run `blocks` (num_blocks, seq_len) through `model` (a model in memory or a layer_source), layer
    by layer; the last `holdout` blocks go to 'held'. Sums are kept for `modes` only.

    `on_layer(i, stats)` receives each layer's sums as soon as they are complete; with it the sums are
    not kept (Calibration.stats is empty), without it they are all returned. `on_batch(done, total)`
    is called after every batch of every layer (total = layers x batches); it may raise to cancel.
    `host_bytes`: hidden states beyond this many bytes go to files under `spill_dir` (None: no limit).

    `form` (nbl/outputs/forms.py) other than nbl: the sums of that form's regression for the one mode in `modes`
    (form_taps.py); `max_run`: the longest run of blocks form fold may fold as one.

    `devices` (several): one process per device (distributed.py), this one being rank 0 on devices[0];
    each takes a contiguous share of the batches (devices.share), the sums are added across processes
    before `on_layer`. The other processes read the weights from the source's checkpoint directory.
    """
    source = as_source(model)
    if group is None and devices is not None and len(devices) > 1:
        path = source.checkpoint_dir()
        job = dict(
            blocks=blocks,
            batch_size=batch_size,
            holdout=holdout,
            product_dtype=product_dtype,
            tf32=tf32,
            modes=tuple(modes),
            form=form,
            max_run=max_run,
            host_bytes=host_bytes,
            spill_dir=spill_dir,
            path=path,
            dtype=source.dtype,
        )
        with distributed.launch(devices, calibrate, job, timeout_s) as group:
            return calibrate(
                source,
                blocks,
                batch_size,
                holdout,
                product_dtype,
                on_batch,
                progress,
                modes=modes,
                tf32=tf32,
                form=form,
                max_run=max_run,
                device=devices[0],
                host_bytes=host_bytes,
                spill_dir=spill_dir,
                on_layer=on_layer,
                group=group,
            )
    group = group or distributed.SOLO
    if devices:
        device = devices[0]
    device = torch.device(device) if device is not None else source.device
    n_layers, d = source.config.num_hidden_layers, source.config.hidden_size
    n = blocks.shape[0]
    n_fit = n - holdout
    # Fit blocks first, then held-out blocks; a batch never straddles the two.
    batches = [
        (start, min(start + batch_size, hi), name)
        for lo, hi, name in [(0, n_fit, "fit"), (n_fit, n, "held")]
        for start in range(lo, hi, batch_size)
    ]
    batches = [batches[j] for j in share(len(batches), group.world)[group.rank]]  # this process's share
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    kept: list[LayerStats] = []
    stats_bytes = 0
    t0 = time.perf_counter()
    total = n_layers * len(batches)
    bar = tqdm(total=total, desc="calibrate", unit="batch", disable=not progress)
    with HiddenCache(host_bytes, spill_dir) as cache, calibration_heap():
        kwargs = first_pass(source, blocks, batches, device, cache)
        source.release_stem()
        taps = FormTaps(form, modes[0], max_run, cache, source.config) if form != "nbl" else None
        for i in range(n_layers):
            layer = source.layer(i, device)
            acc = LayerAccumulator(d, device, product_dtype, modes, tf32=tf32, lags=taps.lags if taps else ())
            stats_bytes = acc.nbytes()
            attn: list[torch.Tensor] = []
            hooks = taps.hooks(layer) if taps else []
            if "attn" in modes and taps is None:
                hooks.append(
                    branch_end(layer, source.config).register_forward_hook(
                        lambda m, a, o: attn.append(o[0] if isinstance(o, tuple) else o)
                    )
                )
            try:
                for b, (_, _, split) in enumerate(batches):
                    h = cache.get(b).to(device)  # (B, T, d)
                    out = layer(h, **kwargs[b][i])
                    out = out[0] if isinstance(out, tuple) else out  # (B, T, d)
                    stream, lags = h.reshape(-1, d), None
                    if taps is None:  # the branch's output (its hook's), or the whole block's
                        x, ys = stream, {m: (attn.pop() if m == "attn" else out - h).reshape(-1, d) for m in modes}
                    else:
                        x, ys, lags = taps.pairs(i, b, layer, h, out, device)
                    if b == 0:
                        group.agree_shift(acc, x, ys)
                    acc.add(x, ys, split, stream, lags)
                    if i + 1 < n_layers:
                        cache.overwrite(b, out)  # the next layer's input replaces this one's (h: used up)
                    del h, out, x, ys, stream, lags
                    bar.update(1)
                    if on_batch is not None:
                        on_batch(i * len(batches) + b + 1, total)
                if not batches:  # more processes than batches: this one adds zeros
                    group.agree_shift(acc, None, None)
                group.reduce(acc)
                if taps is not None:
                    taps.done(i, acc, len(batches))
            finally:
                for hook in hooks:
                    hook.remove()
                source.release(i)
            if on_layer is not None:
                on_layer(i, acc.stats)
            else:
                kept.append(acc.stats)
            del acc
            release_free_memory()  # once a layer: large activations never entered the heap (heap.py)
    bar.close()
    seconds = time.perf_counter() - t0
    return Calibration(
        stats=kept,
        tokens=int(blocks.numel()),
        seconds=seconds,
        stats_bytes=stats_bytes,
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        peak_device_bytes=torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
    )
