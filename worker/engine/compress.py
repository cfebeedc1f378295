"""The compression pipeline as plain stages: load -> blocks -> calibrate (cached) -> score -> compress.

Used by `nbl compress` and by the worker's job task alike. `report(stage, fraction, message)`
receives progress; it may raise to cancel between batches.

Calibration runs layer by layer (calibrate.py); each layer is scored as soon as its sums are complete
and its sums go to their own shard of the statistics cache (stats_cache.py), so no stage holds every
layer's sums. Given no loaded model, `run` reads the weights one layer at a time from the checkpoint
(layer_source.py) and loads the whole model only to save outputs or for the `loss` probe.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from . import stats_cache
from .calibrate import calibrate, holdout_count
from .data import DatasetSpec, load_texts, make_blocks
from .layer_source import CheckpointLayers, ModelLayers
from .loading import LoadedModel, load_model, load_weights
from .saving import save_compressed
from .scores import DEFAULT_RIDGE, LinearMap, layer_moments, lmmse, score_layer
from .loss_probe import loss_rise
from .selection import CRITERIA, choose
from .stats import BRANCHES, LayerStats
from .stats_cache import Shards
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
    host_cache_bytes: int | None = None  # hidden states past this go to disk (None: no limit)
    spill_dir: Path | None = None  # where they go (None: 'spill' beside the statistics directory)

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
    stats: Shards  # each layer's sums, read from its shard on demand
    held_blocks: torch.Tensor
    meta: dict
    cached: bool
    cache_key: str
    scores: list[dict] | None = None  # scored during calibration (None on a cache hit)
    temporary: bool = False  # written for this run only (--no-cache): remove when done

    def cleanup(self) -> None:
        if self.temporary:
            shutil.rmtree(self.stats.path.parent, ignore_errors=True)


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


def layer_source(lm: LoadedModel):
    """The loaded model, or its checkpoint read layer by layer when only its skeleton was loaded."""
    if lm.model is not None:
        return ModelLayers(lm.model)
    return CheckpointLayers(lm.path, lm.dtype, lm.device)


def calibration_stage(cfg: CompressConfig, lm: LoadedModel, report: Report = _noop, progress=True,
                      source=None) -> CalibrationResult:
    """Sums for every layer, from the cache when the same calibration ran before for this mode."""
    source = source or layer_source(lm)
    key = stats_cache.cache_key(
        model=lm.fingerprint,
        dataset=cfg.dataset.key(),
        num_samples=cfg.num_samples,
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        shuffle=cfg.shuffle,
        dtype=str(source.dtype),
        holdout_fraction=cfg.holdout_fraction,
        product_dtype=cfg.product_dtype,
    )
    stats_dir = Path(cfg.stats_dir or stats_cache.default_dir())
    if cfg.use_cache:
        hit = stats_cache.open_entry(stats_cache.entry_path(stats_dir, key))
        if hit is not None and cfg.mode in hit.modes:
            report("calibrate", 1.0, f"statistics cache hit {key}")
            return CalibrationResult(hit, hit.held_blocks(), hit.meta, True, key)
        path = stats_cache.entry_path(stats_dir, key)
    else:  # the shards still go to disk, for the chosen layers' maps, and are removed after the run
        stats_dir.mkdir(parents=True, exist_ok=True)
        path = stats_cache.entry_path(tempfile.mkdtemp(prefix="nocache-", suffix=".tmp", dir=stats_dir), key)

    report("calibrate", 0.0, "tokenizing calibration data")
    blocks = make_blocks(load_texts(cfg.dataset), lm.tokenizer, cfg.num_samples, cfg.seq_len, cfg.shuffle, cfg.seed)
    holdout = holdout_count(len(blocks), cfg.holdout_fraction)
    bs = cfg.batch_size or default_batch_size(cfg.seq_len, str(source.device))
    n_layers = source.config.num_hidden_layers
    writer = stats_cache.ShardWriter(path)
    scores: list[dict] = []

    def on_layer(i: int, stats: LayerStats) -> None:  # score at once, write the shard, drop the sums
        writer.layer(i, stats)
        scores.append(layer_scores(i, stats, cfg.ridge))

    try:
        cal = calibrate(
            source,
            blocks,
            batch_size=bs,
            holdout=holdout,
            product_dtype=getattr(torch, cfg.product_dtype),
            on_batch=lambda done, total: report("calibrate", done / total,
                                                f"layer {(done - 1) * n_layers // total + 1}/{n_layers}"),
            progress=progress,
            modes=(cfg.mode,),
            host_bytes=cfg.host_cache_bytes,
            spill_dir=_spill_dir(cfg),
            on_layer=on_layer,
        )
    except BaseException:
        writer.abort()
        if not cfg.use_cache:
            shutil.rmtree(path.parent, ignore_errors=True)
        raise
    meta = {
        "tokens": cal.tokens,
        "seconds": round(cal.seconds, 3),
        "stats_bytes": cal.stats_bytes,
        "peak_rss_bytes": cal.peak_rss_bytes,
        "peak_device_bytes": cal.peak_device_bytes,
        "holdout_blocks": holdout,
        "batch_size": bs,
        "modes": [cfg.mode],
        "num_layers": n_layers,
    }
    held = blocks[len(blocks) - holdout :].clone()
    shards = writer.finish(held, meta)
    return CalibrationResult(shards, held, meta, False, key, scores=scores, temporary=not cfg.use_cache)


def _spill_dir(cfg: CompressConfig) -> Path:
    return Path(cfg.spill_dir or Path(cfg.stats_dir or stats_cache.default_dir()).parent / "spill")


def layer_scores(i: int, stats: LayerStats, ridge: float = DEFAULT_RIDGE) -> dict:
    """One layer's scores for the modes its sums hold, as a plain dict (the report's and the JSON's shape)."""
    return {"layer": i, **{b: sc.as_dict() for b, sc in score_layer(stats, ridge).items()}}


def _layers(stats: list[LayerStats] | Shards):
    """(count, get) over a list of sums in memory or a cache entry read one shard at a time."""
    if isinstance(stats, Shards):
        return stats.num_layers, stats.layer
    return len(stats), stats.__getitem__


def score_stage(stats: list[LayerStats] | Shards, ridge: float = DEFAULT_RIDGE, progress: bool = False) -> list[dict]:
    """Every layer's scores, reading one layer's sums at a time."""
    n, get = _layers(stats)
    return [layer_scores(i, get(i), ridge) for i in tqdm(range(n), desc="score", unit="layer", disable=not progress)]


def fit_maps(stats: list[LayerStats] | Shards, mode: str, layers, ridge: float = DEFAULT_RIDGE,
             split=None) -> dict[int, LinearMap]:
    """LMMSE maps of the given layers only: a cache entry reads only their shards."""
    _, get = _layers(stats)
    return {i: lmmse(layer_moments(get(i), mode, split), ridge) for i in layers}


def run(cfg: CompressConfig, report: Report = _noop, progress: bool = True, lm: LoadedModel | None = None,
        on_saved: Callable[[dict, torch.nn.Module], None] | None = None) -> CompressResult:
    """`on_saved(output, model)` runs after each output is saved, while `model` is still the compressed
    one in memory (the job's load check takes its reference logits there). Without `lm`, the model is
    loaded without weights and calibrated layer by layer from its checkpoint."""
    cfg.check()
    timings = {}
    t = time.perf_counter()
    if lm is None:  # the job pipeline loads (and reports) the model itself
        report("load", 0.0, f"loading {cfg.model}")
        lm = load_model(cfg.model, cfg.revision, cfg.dtype, cfg.device, max_bytes=cfg.max_model_bytes, weights=False)
    source = layer_source(lm)
    n_layers = source.config.num_hidden_layers
    if max(cfg.ks) >= n_layers:
        raise ValueError(f"k must be below the number of layers ({n_layers}), got {max(cfg.ks)}")
    timings["load_s"] = time.perf_counter() - t

    t = time.perf_counter()
    cal = calibration_stage(cfg, lm, report, progress, source)
    del source
    timings["calibrate_s"] = time.perf_counter() - t
    try:
        return _score_and_compress(cfg, lm, cal, timings, report, progress, on_saved)
    finally:
        cal.cleanup()


def _score_and_compress(cfg: CompressConfig, lm: LoadedModel, cal: CalibrationResult, timings: dict,
                        report: Report, progress: bool, on_saved) -> CompressResult:
    n_layers = cal.stats.num_layers
    t = time.perf_counter()
    report("score", 0.0, "scoring layers")
    scores = cal.scores if cal.scores is not None else score_stage(cal.stats, cfg.ridge, progress)
    if cfg.criterion == "loss":
        if len(cal.held_blocks) == 0:
            raise ValueError("criterion 'loss' needs held-out blocks: use num_samples >= 2 and holdout_fraction > 0")
        # Maps fitted on the other blocks, one layer's shard at a time, as the probe reaches it.
        rises = loss_rise(
            layer_source(lm), cal.held_blocks, cfg.mode, cfg.method,
            lambda i: fit_maps(cal.stats, cfg.mode, [i], cfg.ridge, split="fit")[i],
            batch_size=cal.meta.get("batch_size", 1), progress=progress,
            on_layer=lambda i, n: report("score", i / n, f"loss probe {i}/{n}"),
            host_bytes=cfg.host_cache_bytes, spill_dir=_spill_dir(cfg),
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
            load_weights(lm)  # saving still writes from the whole model in memory
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
