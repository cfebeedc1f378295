"""The compression pipeline as plain stages: load -> blocks -> calibrate (cached) -> score -> compress.

Used by `nbl compress` and by the worker's job task alike. `report(stage, fraction, message)`
receives progress; it may raise to cancel between batches.

The stages live one to a file: the request (config.py), calibration (calibration/stage.py: layer by
layer, each layer scored as soon as its sums are complete and written to its own shard of the
statistics cache), scores and maps read one shard at a time (scoring/stage.py); this file chooses the
layers and saves each output. Given no loaded model, `run` reads the weights one layer at a time from
the checkpoint (layer_source.py); each output is written tensor by tensor from the checkpoint's shards
(saving.write_compressed), so the whole model is never loaded to save.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from nbl.outputs.forms import family_error, runs_in
from nbl.sizing.removed import removed_params
from worker.engine.calibration.stage import (
    CalibrationResult,
    Report,
    calibration_stage,
    layer_source,
    no_report,
    spill_dir,
)
from worker.engine.config import CompressConfig
from worker.engine.forms.fold_runs import fit_form_maps
from worker.engine.forms.layerwise_logits import LayerwiseModel
from worker.engine.forms.out_dtype import dtype_name, output_dtype
from worker.engine.forms.saving import write_compressed
from worker.engine.forms.saving_forms import write_form
from worker.engine.forms.surgery import Plan
from worker.engine.loading.load import LoadedModel, load_model
from worker.engine.refine.stage import Refiner, healing_stream
from worker.engine.scoring.stage import fit_maps, layer_reader, score_stage
from worker.engine.selection.auto_k import MEASURED
from worker.engine.selection.criteria import choose
from worker.engine.selection.loss_probe import loss_rise
from worker.engine.selection.stage import selection_stage

log = logging.getLogger(__name__)


@dataclass
class CompressResult:
    calibration: dict
    scores: list[dict]
    outputs: list[dict] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    selection: dict | None = None  # measured selection (greedy, auto, k auto): auto_k.Chooser.record

    def as_dict(self) -> dict:
        return asdict(self)


def run(
    cfg: CompressConfig,
    report: Report = no_report,
    progress: bool = True,
    lm: LoadedModel | None = None,
    on_saved: Callable[[dict, LayerwiseModel], None] | None = None,
) -> CompressResult:
    """`on_saved(output, model)` runs after each output is saved; `model` gives the compressed model's
    logits one decoder layer at a time (the job's load check takes its reference logits there). Without
    `lm`, the model is loaded without weights and calibrated layer by layer from its checkpoint."""
    cfg.check()
    timings = {}
    t = time.perf_counter()
    if lm is None:  # the job pipeline loads (and reports) the model itself
        report("load", 0.0, f"loading {cfg.model}")
        lm = load_model(
            cfg.model,
            cfg.revision,
            cfg.dtype,
            cfg.device,
            max_bytes=cfg.max_model_bytes,
            weights=False,
            models_dir=cfg.models_dir,
            home=cfg.home,
        )
    source = layer_source(lm)
    n_layers = source.config.num_hidden_layers
    if cfg.ks and max(cfg.ks) >= n_layers:
        raise ValueError(f"k must be below the number of layers ({n_layers}), got {max(cfg.ks)}")
    why = family_error(cfg.form, cfg.mode, lm.family, source.config.to_dict())
    if why is not None:  # before calibrating: the output could not be written (the API's rule: nbl/model/checks.py)
        raise ValueError(why)
    timings["load_s"] = time.perf_counter() - t

    t = time.perf_counter()
    # before calibrating too: data too short for the heal (held for the refine stage, which would tokenize it)
    stream = healing_stream(cfg, lm.tokenizer, report, "calibrate") if cfg.heal is not None else None
    cal = calibration_stage(cfg, lm, report, progress, source)
    del source
    timings["calibrate_s"] = time.perf_counter() - t
    try:
        return _score_and_compress(cfg, lm, cal, timings, report, progress, on_saved, stream)
    finally:
        cal.cleanup()


def _score_and_compress(
    cfg: CompressConfig,
    lm: LoadedModel,
    cal: CalibrationResult,
    timings: dict,
    report: Report,
    progress: bool,
    on_saved,
    stream: torch.Tensor | None = None,
) -> CompressResult:
    t = time.perf_counter()
    report("score", 0.0, "scoring layers")
    scores = (
        cal.scores
        if cal.scores is not None
        else score_stage(
            cal.stats,
            cfg.ridge,
            progress,
            on_layer=lambda i, n: report("score", i / n, f"scored layer {i}/{n}"),
            form=cfg.form,
        )
    )
    if cfg.criterion == "loss":
        if len(cal.held_blocks) == 0:
            raise ValueError("criterion 'loss' needs held-out blocks: use num_samples >= 2 and holdout_fraction > 0")
        # Maps fitted on the other blocks, one layer's shard at a time, as the probe reaches it.
        rises = loss_rise(
            layer_source(lm),
            cal.held_blocks,
            cfg.mode,
            cfg.method,
            lambda i: fit_maps(cal.stats, cfg.mode, [i], cfg.ridge, split="fit")[i],
            batch_size=cal.meta.get("batch_size", 1),
            progress=progress,
            on_pass=lambda done, total: report("score", done / total, f"loss probe {done}/{total} layer passes"),
            host_bytes=cfg.host_cache_bytes,
            spill_dir=spill_dir(cfg),
        )
        for s, r in zip(scores, rises):
            s[cfg.mode]["loss_rise"] = r
    chosen, selection = None, None  # k -> (layers, the criterion that chose them), when measured on the selection data
    if cfg.criterion in MEASURED or cfg.max_ppl_increase is not None:
        chosen, selection = selection_stage(cfg, lm, cal, scores, report)
    timings["score_s"] = time.perf_counter() - t

    result = CompressResult(
        calibration={
            "num_samples": cfg.num_samples,
            "seq_len": cfg.seq_len,
            "tokens": cal.meta["tokens"],
            "cache_key": cal.cache_key,
            "cached": cal.cached,
            "seconds": cal.meta["seconds"],
            "stats_bytes": cal.meta["stats_bytes"],
            "peak_rss_bytes": cal.meta["peak_rss_bytes"],
            "peak_device_bytes": cal.meta["peak_device_bytes"],
        },
        scores=scores,
        timings=timings,
        selection=selection,
    )
    ks = list(chosen) if chosen is not None else cfg.ks

    t, refiner, refine_s = time.perf_counter(), Refiner(cfg, lm, cal, report, stream), 0.0
    for j, k in enumerate(ks):
        layers, criterion = (
            chosen[k] if chosen is not None else (choose(scores, cfg.mode, cfg.criterion, k), cfg.criterion)
        )
        plan = Plan(cfg.mode, cfg.method, tuple(layers), cfg.form)
        if cfg.form != "nbl":  # bias-free, on the form's own regressor; fold block: one map per run
            maps = fit_form_maps(layer_reader(cal.stats)[1], cfg.form, cfg.mode, layers, cfg.ridge)
        else:
            maps = fit_maps(cal.stats, cfg.mode, layers, cfg.ridge) if cfg.method == "nbl" else {}
        refined: dict = {}
        if refiner.active:  # refit and/or heal the maps before they are written (refine/stage.py)
            r = time.perf_counter()
            maps, refined = refiner.refine(plan, maps, k)
            refine_s += time.perf_counter() - r
        out = None if cfg.out is None else Path(cfg.out) if len(ks) == 1 else Path(cfg.out) / f"k{k}"
        output = {
            "k": k,
            "mode": cfg.mode,
            "method": cfg.method,
            "criterion": criterion,
            "form": cfg.form,
            "runs_in": runs_in(cfg.form, cfg.mode, cfg.method, lm.family),
            "family": lm.family,
            "replaced_layers": layers,
            "params": _params(lm, plan),  # the base's and those removed, total and active (nbl/sizing/removed.py)
            "path": str(out) if out else None,
            **refined,
        }
        if out is not None:
            report("compress", j / len(ks), f"k={k}: layers {layers} -> {out}")
            # written tensor by tensor from the base's shards: the whole model is never in memory
            saved = output_dtype(cfg.out_dtype, lm.dtype, lm.path, lm.fingerprint)
            output["dtype"] = dtype_name(saved)
            if cfg.form != "nbl":
                write_form(
                    lm.path,
                    plan,
                    maps,
                    saved,
                    lm.tokenizer,
                    out,
                    lm.family,
                    _scores_report(cfg, lm, result, plan, refined, saved),
                    cfg.max_shard_size,
                )
            else:
                write_compressed(
                    lm.path,
                    plan.as_config(),
                    maps,
                    saved,
                    lm.tokenizer,
                    out,
                    lm.family,
                    _scores_report(cfg, lm, result, plan, refined, saved),
                    cfg.max_shard_size,
                )
            if on_saved is not None:
                on_saved(output, LayerwiseModel(layer_source(lm), plan, maps))
        result.outputs.append(output)
    timings["compress_s"] = time.perf_counter() - t - refine_s
    if refiner.active:
        timings["refine_s"] = refine_s
    report("compress", 1.0, "done")
    return result


def _scores_report(
    cfg: CompressConfig,
    lm: LoadedModel,
    result: CompressResult,
    plan: Plan,
    refined: dict | None = None,
    dtype: torch.dtype | None = None,
) -> dict:
    return {
        "base_model": lm.source,
        "base_family": lm.family,  # what the card's "Runs in" claims depends on (nbl/families.py)
        "base_revision": lm.revision,
        "base_fingerprint": lm.fingerprint,
        "base_license": lm.license,
        "recipe": {
            "dataset": cfg.dataset.key(),
            "num_samples": cfg.num_samples,
            "seq_len": cfg.seq_len,
            "seed": cfg.seed,
            "shuffle": cfg.shuffle,
            "mode": plan.mode,
            "method": plan.method,
            "criterion": cfg.criterion,
            "k": len(plan.layers),
            "ridge": cfg.ridge,
            **({"form": plan.form} if plan.form != "nbl" else {}),  # an nbl report reads as before
            **({"refit": cfg.refit} if cfg.refit != "none" else {}),
            **({"heal": asdict(cfg.heal)} if cfg.heal is not None else {}),
            # k auto's budget: the card's plot draws it over the greedy's perplexities
            **({"max_ppl_increase": cfg.max_ppl_increase} if cfg.max_ppl_increase is not None else {}),
        },
        "replaced_layers": sorted(plan.layers),
        **({"dtype": dtype_name(dtype)} if dtype is not None else {}),  # the saved weights': the card says it
        "params": _params(lm, plan),
        "calibration": result.calibration,
        "layers": result.scores,
        **({"selection": result.selection} if result.selection is not None else {}),
        **({"refine": refined} if refined else {}),  # refit / heal records: the card's Refinement section
    }


def _params(lm: LoadedModel, plan: Plan) -> dict:
    config = json.loads((Path(lm.path) / "config.json").read_text())
    return removed_params(config, plan.layers, plan.mode, plan.method)
