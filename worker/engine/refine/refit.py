"""Sequential refit: each replaced layer's map refitted on the compressed model's own activations.

The one-shot maps (score_stage.fit_maps) regress each layer's branch on the *base* model's stream. Deep in a
compressed model the stream is not that: every earlier replacement has moved it. The refit walks the layers
in depth order, as calibration does (calibrate.py), carrying the compressed stream h̃ instead of the base one:

    layer i not replaced     h̃ <- layer_i(h̃)
    layer i replaced         sums of (x, y) over every block, with
                                 x = h̃                 (nbl)    or LN(h̃), the form's norm (linear)
                                 y = the base layer's branch on h̃: attention output a(h̃), or block change
                                     layer_i(h̃) - h̃ (the teacher, run on the student's own input)
                             W̃ = argmin Σ‖y - W x - b‖² (nbl: lmmse; linear: bias-free), as the one-shot fit
                             h̃ <- the replaced layer i, with W̃, on h̃

The first replaced layer sees the base stream, so its refit is the one-shot map (same blocks, batches and
sums). The walk stops after the last replaced layer: one pass over the calibration data up to it, plus one
cheap sweep of each replaced layer (its map, and in attn mode the MLP after it). Memory is calibration's: one
layer's weights and sums, one batch of activations, the hidden states of all blocks on the host (spilt to disk
past `host_bytes`).
"""

from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from worker.engine.calibration.activations import HiddenCache
from worker.engine.calibration.calibrate import first_pass
from worker.engine.calibration.heap import calibration_heap, release_free_memory
from worker.engine.calibration.layer_source import as_source
from worker.engine.calibration.stats import LayerAccumulator
from worker.engine.forms.form_layers import form_layer
from worker.engine.forms.surgery import Plan
from worker.engine.modeling.modeling_nbl import branch_end
from worker.engine.scoring.form_scores import lstsq_no_bias
from worker.engine.scoring.scores import DEFAULT_RIDGE, LinearMap, layer_moments, lmmse, nmse
from worker.engine.selection.loss_probe import layer_output, replaced_layer


@dataclass
class Refit:
    maps: dict[int, LinearMap]
    seconds: float
    layer_passes: int  # (layer, batch) forward passes, the replaced layers' second sweep included
    # layer -> NMSE on the compressed stream of the one-shot map and of the refitted one (lower: better)
    nmse: dict[int, dict[str, float]] = field(default_factory=dict)

    def record(self) -> dict:
        return {
            "method": "sequential",
            "seconds": round(self.seconds, 3),
            "layer_passes": self.layer_passes,
            "nmse": {str(i): v for i, v in sorted(self.nmse.items())},
        }


@contextmanager
def compressed_layer(layer, i: int, plan: Plan, maps: dict[int, LinearMap], config):
    """Layer i as the compressed model runs it: replaced (nbl), swapped (linear), or as is."""
    if plan.form != "nbl":
        with form_layer(layer, i, plan, maps, config.hidden_size) as rep:
            yield rep
    elif i in plan.layers:
        with replaced_layer(layer, i, config, plan.mode, plan.method, maps.get(i)) as rep:
            yield rep
    else:
        with nullcontext(layer) as rep:
            yield rep


def fit_map(stats, mode: str, form: str, ridge: float) -> LinearMap:
    """The map the form writes, from one layer's sums: nbl's affine LMMSE, linear's bias-free least squares."""
    m = layer_moments(stats, mode)
    return lmmse(m, ridge) if form == "nbl" else lstsq_no_bias(m, ridge)


def _regressor(layer, mode: str, form: str, h: torch.Tensor) -> torch.Tensor:
    if form == "nbl":
        return h
    return (layer.input_layernorm if mode == "attn" else layer.post_attention_layernorm)(h)


@torch.no_grad()
def sequential_refit(
    model,
    blocks: torch.Tensor,
    plan: Plan,
    maps: dict[int, LinearMap],
    *,
    batch_size: int = 1,
    holdout: int = 0,
    ridge: float = DEFAULT_RIDGE,
    product_dtype: torch.dtype = torch.float32,
    tf32: bool = False,
    device=None,
    host_bytes: int | None = None,
    spill_dir: Path | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    target: str = "student",
) -> Refit:
    """The plan's maps refitted in depth order on `blocks` (num_blocks, seq_len), the calibration's, batched as
    calibration batched them (`batch_size`, the last `holdout` blocks apart), so the first replaced layer's sums
    are calibration's. `maps`: the one-shot maps (their NMSE on the compressed stream is reported beside the
    refit's). `on_batch(done, total)` after every batch (it may raise to cancel).

    `target`: y as above, the base layer run on the compressed stream ("student", the default); or "teacher":
    the base model's own branch output, on its own stream, carried beside the compressed one (twice the hidden
    states and the forward work; measured in bench/results/quality2_table.md)."""
    if target not in ("student", "teacher"):
        raise ValueError(f"target must be 'student' or 'teacher', got {target!r}")
    if plan.method != "nbl" or plan.form == "fold":
        raise ValueError(f"a sequential refit needs nbl or linear maps, not method {plan.method!r} form {plan.form!r}")
    t0 = time.perf_counter()
    source = as_source(model)
    device = torch.device(device) if device is not None else source.device
    d = source.config.hidden_size
    chosen = sorted(plan.layers)
    n, n_fit = blocks.shape[0], blocks.shape[0] - holdout
    batches = [
        (s, min(s + batch_size, hi), name)
        for lo, hi, name in [(0, n_fit, "fit"), (n_fit, n, "held")]
        for s in range(lo, hi, batch_size)
    ]
    new = dict(maps)
    out = Refit(new, 0.0, 0)
    total, done = (chosen[-1] + 1 + len(chosen)) * len(batches), 0
    with HiddenCache(host_bytes, spill_dir) as cache, calibration_heap():
        kwargs = first_pass(source, blocks, batches, device, cache)
        source.release_stem()
        teacher = target == "teacher"
        for b in range(len(batches) if teacher else 0):
            cache.put(("base", b), cache.get(b).clone())
        for i in range(chosen[-1] + 1):
            layer = source.layer(i, device)
            try:
                if teacher and i not in plan.layers:  # the base stream moves on
                    for b in range(len(batches)):
                        cache.overwrite(
                            ("base", b), layer_output(layer(cache.get(("base", b)).to(device), **kwargs[b][i]))
                        )
                if i in plan.layers:  # the sums of (x, y) on the compressed stream, then the map
                    acc = LayerAccumulator(d, device, product_dtype, (plan.mode,), tf32=tf32)
                    attn: list[torch.Tensor] = []
                    hook = (
                        branch_end(layer, source.config).register_forward_hook(
                            lambda m, a, o: attn.append(layer_output(o))
                        )
                        if plan.mode == "attn"
                        else None
                    )
                    try:
                        for b, (_, _, split) in enumerate(batches):
                            h = cache.get(b).to(device)  # (B, T, d)
                            src = cache.get(("base", b)).to(device) if teacher else h  # the base layer's input
                            base_out = layer_output(layer(src, **kwargs[b][i]))  # (B, T, d)
                            y = attn.pop() if plan.mode == "attn" else base_out - src
                            if teacher:
                                cache.overwrite(("base", b), base_out)
                            x = _regressor(layer, plan.mode, plan.form, h)
                            acc.add(x.reshape(-1, d), {plan.mode: y.reshape(-1, d)}, split, h.reshape(-1, d))
                            done += 1
                            if on_batch is not None:
                                on_batch(done, total)
                    finally:
                        if hook is not None:
                            hook.remove()
                    m = layer_moments(acc.stats, plan.mode)
                    new[i] = fit_map(acc.stats, plan.mode, plan.form, ridge)
                    out.nmse[i] = {"one_shot": nmse(m, maps[i]), "refit": nmse(m, new[i])} if i in maps else {}
                    del acc, m
                with compressed_layer(layer, i, plan, new, source.config) as rep:  # the stream moves on, compressed
                    for b in range(len(batches)):
                        h = cache.get(b).to(device)
                        cache.overwrite(b, layer_output(rep(h, **kwargs[b][i])))
                        done += 1
                        if on_batch is not None:
                            on_batch(done, total)
            finally:
                source.release(i)
            release_free_memory()
    out.layer_passes = done
    out.seconds = time.perf_counter() - t0
    return out
