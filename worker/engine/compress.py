"""The compression pipeline as plain stages: load -> blocks -> calibrate (cached) -> score -> compress.

Used by `nbl compress` and by the worker's job task alike. `report(stage, fraction, message)`
receives progress; it may raise to cancel between batches.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from . import stats_cache
from .calibrate import calibrate, holdout_count
from .data import DatasetSpec, load_texts, make_blocks
from .loading import LoadedModel, load_model
from .saving import save_compressed
from .scores import DEFAULT_RIDGE, LinearMap, layer_moments, lmmse, score_layer
from .selection import CRITERIA, choose, loss_rise
from .stats import BRANCHES, LayerStats
from .surgery import Plan, replaced

log = logging.getLogger(__name__)
Report = Callable[[str, float, str], None]


@dataclass
class CompressConfig:
    model: str
    dataset: DatasetSpec
    ks: list[int]
    out: Path | None = None
    revision: str | None = None
    num_samples: int = 256
    seq_len: int = 2048
    seed: int = 0
    shuffle: bool = False
    mode: str = "attn"
    method: str = "nbl"
    criterion: str = "cca"
    dtype: str | None = None
    device: str | None = None
    batch_size: int | None = None
    holdout_fraction: float = 0.1
    ridge: float = DEFAULT_RIDGE
    product_dtype: str = "float32"
    stats_dir: Path | None = None
    use_cache: bool = True
    max_model_bytes: int | None = None  # refuse larger input weights (None: no limit)

    def check(self) -> None:
        """Checks that need no model; k against the layer count is checked after loading."""
        if self.mode not in BRANCHES:
            raise ValueError(f"mode must be one of {BRANCHES}, got {self.mode!r}")
        if self.method not in ("nbl", "drop"):
            raise ValueError(f"method must be 'nbl' or 'drop', got {self.method!r}")
        if self.criterion not in CRITERIA:
            raise ValueError(f"criterion must be one of {CRITERIA}, got {self.criterion!r}")
        if not self.ks:
            raise ValueError("give at least one k")
        if any(k <= 0 for k in self.ks):
            raise ValueError(f"k must be positive, got {self.ks}")
        if self.product_dtype not in ("float32", "float64"):
            raise ValueError("product_dtype must be float32 or float64")


@dataclass
class CalibrationResult:
    stats: list[LayerStats]
    held_blocks: torch.Tensor
    meta: dict
    cached: bool
    cache_key: str


@dataclass
class CompressResult:
    calibration: dict
    scores: list[dict]
    outputs: list[dict] = field(default_factory=list)
    timings: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)


def _noop(stage: str, fraction: float, message: str) -> None:
    pass


def default_batch_size(seq_len: int, device: str) -> int:
    # Larger batches make the per-batch stats products efficient; keep activations modest.
    tokens = 16384 if device.startswith("cuda") else 4096
    return max(1, tokens // seq_len)


def calibration_stage(cfg: CompressConfig, lm: LoadedModel, report: Report = _noop, progress=True) -> CalibrationResult:
    """Sums for every layer, from the cache when the same calibration ran before."""
    key = stats_cache.cache_key(
        model=lm.fingerprint,
        dataset=cfg.dataset.key(),
        num_samples=cfg.num_samples,
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        shuffle=cfg.shuffle,
        dtype=str(next(lm.model.parameters()).dtype),
        holdout_fraction=cfg.holdout_fraction,
        product_dtype=cfg.product_dtype,
    )
    path = Path(cfg.stats_dir or stats_cache.default_dir()) / f"{key}.safetensors"
    device = next(lm.model.parameters()).device
    if cfg.use_cache:
        hit = stats_cache.load(path, device)
        if hit is not None:
            report("calibrate", 1.0, f"statistics cache hit {key}")
            return CalibrationResult(hit[0], hit[1], hit[2], True, key)

    report("calibrate", 0.0, "tokenizing calibration data")
    blocks = make_blocks(load_texts(cfg.dataset), lm.tokenizer, cfg.num_samples, cfg.seq_len, cfg.shuffle, cfg.seed)
    holdout = holdout_count(len(blocks), cfg.holdout_fraction)
    bs = cfg.batch_size or default_batch_size(cfg.seq_len, str(device))
    cal = calibrate(
        lm.model,
        blocks,
        batch_size=bs,
        holdout=holdout,
        product_dtype=getattr(torch, cfg.product_dtype),
        on_batch=lambda done, total: report("calibrate", done / total, f"{done}/{total} blocks"),
        progress=progress,
    )
    meta = {
        "tokens": cal.tokens,
        "seconds": round(cal.seconds, 3),
        "stats_bytes": cal.stats_bytes,
        "peak_rss_bytes": cal.peak_rss_bytes,
        "peak_device_bytes": cal.peak_device_bytes,
        "holdout_blocks": holdout,
        "batch_size": bs,
    }
    held = blocks[len(blocks) - holdout :].clone()
    if cfg.use_cache:
        stats_cache.save(path, cal.stats, held, meta)
    return CalibrationResult(cal.stats, held, meta, False, key)


def score_stage(stats: list[LayerStats], ridge: float = DEFAULT_RIDGE, progress: bool = False) -> list[dict]:
    """Every layer's scores for both modes, as plain dicts (the report's and the JSON's shape)."""
    bar = tqdm(stats, desc="score", unit="layer", disable=not progress)
    return [{"layer": i, **{b: sc.as_dict() for b, sc in score_layer(s, ridge).items()}} for i, s in enumerate(bar)]


def fit_maps(stats: list[LayerStats], mode: str, layers, ridge: float = DEFAULT_RIDGE, split=None) -> dict[int, LinearMap]:
    return {i: lmmse(layer_moments(stats[i], mode, split), ridge) for i in layers}


def run(cfg: CompressConfig, report: Report = _noop, progress: bool = True, lm: LoadedModel | None = None,
        on_saved: Callable[[dict, torch.nn.Module], None] | None = None) -> CompressResult:
    """`on_saved(output, model)` runs after each output is saved, while `model` is still the compressed
    one in memory (the job's load check takes its reference logits there)."""
    cfg.check()
    timings = {}
    t = time.perf_counter()
    if lm is None:  # the job pipeline loads (and reports) the model itself
        report("load", 0.0, f"loading {cfg.model}")
        lm = load_model(cfg.model, cfg.revision, cfg.dtype, cfg.device, max_bytes=cfg.max_model_bytes)
    n_layers = len(lm.model.model.layers)
    if max(cfg.ks) >= n_layers:
        raise ValueError(f"k must be below the number of layers ({n_layers}), got {max(cfg.ks)}")
    timings["load_s"] = time.perf_counter() - t

    t = time.perf_counter()
    cal = calibration_stage(cfg, lm, report, progress)
    timings["calibrate_s"] = time.perf_counter() - t

    t = time.perf_counter()
    report("score", 0.0, "scoring layers")
    scores = score_stage(cal.stats, cfg.ridge, progress)
    if cfg.criterion == "loss":
        if len(cal.held_blocks) == 0:
            raise ValueError("criterion 'loss' needs held-out blocks: use num_samples >= 2 and holdout_fraction > 0")
        probe_maps = fit_maps(cal.stats, cfg.mode, range(n_layers), cfg.ridge, split="fit") if cfg.method == "nbl" else {}
        rises = loss_rise(
            lm.model, cal.held_blocks, cfg.mode, cfg.method, probe_maps,
            batch_size=cal.meta.get("batch_size", 1), progress=progress,
            on_layer=lambda i, n: report("score", i / n, f"loss probe {i}/{n}"),
        )
        for s, r in zip(scores, rises):
            s[cfg.mode]["loss_rise"] = r
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
    )

    t = time.perf_counter()
    for j, k in enumerate(cfg.ks):
        layers = choose(scores, cfg.mode, cfg.criterion, k)
        plan = Plan(cfg.mode, cfg.method, tuple(layers))
        maps = fit_maps(cal.stats, cfg.mode, layers, cfg.ridge) if cfg.method == "nbl" else {}
        out = None if cfg.out is None else Path(cfg.out) if len(cfg.ks) == 1 else Path(cfg.out) / f"k{k}"
        output = {"k": k, "mode": cfg.mode, "method": cfg.method, "criterion": cfg.criterion,
                  "replaced_layers": layers, "path": str(out) if out else None}
        if out is not None:
            report("compress", j / len(cfg.ks), f"k={k}: layers {layers} -> {out}")
            with replaced(lm.model, plan, maps):
                save_compressed(lm.model, lm.tokenizer, out, lm.family, _scores_report(cfg, lm, result, plan))
                if on_saved is not None:
                    on_saved(output, lm.model)
        result.outputs.append(output)
    timings["compress_s"] = time.perf_counter() - t
    report("compress", 1.0, "done")
    return result


def _scores_report(cfg: CompressConfig, lm: LoadedModel, result: CompressResult, plan: Plan) -> dict:
    return {
        "base_model": lm.source,
        "base_revision": lm.revision,
        "base_fingerprint": lm.fingerprint,
        "base_license": lm.license,
        "recipe": {
            "dataset": cfg.dataset.key(), "num_samples": cfg.num_samples, "seq_len": cfg.seq_len,
            "seed": cfg.seed, "shuffle": cfg.shuffle, "mode": plan.mode, "method": plan.method,
            "criterion": cfg.criterion, "k": len(plan.layers), "ridge": cfg.ridge,
        },
        "replaced_layers": sorted(plan.layers),
        "calibration": result.calibration,
        "layers": result.scores,
    }
