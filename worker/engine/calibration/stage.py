"""The calibration stage: every layer's sums, from the statistics cache when the same calibration ran
before for this mode, else computed layer by layer (calibrate.py) with each layer scored as soon as
its sums are complete and written to its own shard (stats_cache.py)."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from worker.engine.calibration import stats_cache
from worker.engine.calibration.calibrate import calibrate, holdout_count
from worker.engine.calibration.data import load_texts, make_blocks
from worker.engine.calibration.layer_source import CheckpointLayers, ModelLayers
from worker.engine.calibration.products import resolve_products
from worker.engine.calibration.stats import LayerStats
from worker.engine.calibration.stats_cache import Shards
from worker.engine.config import CompressConfig
from worker.engine.loading.load import LoadedModel
from worker.engine.scoring.stage import layer_scores
from worker.engine.text_prefix import text_prefix

Report = Callable[[str, float, str], None]


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


def no_report(stage: str, fraction: float, message: str) -> None:
    pass


def default_batch_size(seq_len: int, device: str) -> int:
    # Larger batches make the per-batch stats products efficient; keep activations modest. On CPU 2,048
    # tokens: the products are as fast, and the host peak of a d=1024 model at 32 x 512 falls from 0.56x to
    # 0.48x its weights (bench/results/memory_cpu.json against memory_cpu_bs4.json).
    tokens = 16384 if device.startswith("cuda") else 2048
    return max(1, tokens // seq_len)


def layer_source(lm: LoadedModel):
    """The loaded model, or its checkpoint read layer by layer when only its skeleton was loaded."""
    if lm.model is not None:
        return ModelLayers(lm.model, lm.path)
    return CheckpointLayers(lm.path, lm.dtype, lm.device)


def stats_key(cfg: CompressConfig, fingerprint: str, dtype: str, products: str, prefix: tuple[int, ...] = ()) -> str:
    """The statistics cache's key: everything the sums depend on (stats_cache.py)."""
    return stats_cache.cache_key(
        model=fingerprint,
        dataset=cfg.dataset.key(),
        num_samples=cfg.num_samples,
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        shuffle=cfg.shuffle,
        dtype=dtype,
        holdout_fraction=cfg.holdout_fraction,
        product_dtype=products,
        **({"form": cfg.form} if cfg.form != "nbl" else {}),  # nbl's keys stay as they were
        # blocks open with the tokenizer's prefix (make_blocks); a tokenizer adding none keeps its keys
        **({"prefix": list(prefix)} if prefix else {}),
    )


def calibration_stage(
    cfg: CompressConfig, lm: LoadedModel, report: Report = no_report, progress=True, source=None
) -> CalibrationResult:
    """Sums for every layer, from the cache when the same calibration ran before for this mode."""
    source = source or layer_source(lm)
    products = resolve_products(cfg.product_dtype, source.device)  # auto: tf32 on a GPU, float32 on the CPU
    key = stats_key(cfg, lm.fingerprint, str(source.dtype), products, text_prefix(lm.tokenizer))
    max_run = max(cfg.ks) if (cfg.form, cfg.mode) == ("fold", "block") else 1  # a fold run is at most k blocks
    caching = cfg.use_cache and cfg.stats_dir is not None
    if caching:
        stats_dir = Path(cfg.stats_dir)
        hit = stats_cache.open_entry(stats_cache.entry_path(stats_dir, key))
        if hit is not None and cfg.mode in hit.modes and hit.meta.get("max_run", 1) >= max_run:
            report("calibrate", 1.0, f"statistics cache hit {key}")
            return CalibrationResult(hit, hit.held_blocks(), hit.meta, True, key)
        path = stats_cache.entry_path(stats_dir, key)
    else:  # the shards still go to disk, for the chosen layers' maps, and are removed after the run
        if cfg.stats_dir is not None:
            Path(cfg.stats_dir).mkdir(parents=True, exist_ok=True)
        path = stats_cache.entry_path(tempfile.mkdtemp(prefix="nocache-", suffix=".tmp", dir=cfg.stats_dir), key)

    report("calibrate", 0.0, "tokenizing calibration data")
    blocks = make_blocks(
        load_texts(cfg.dataset, cfg.data_dir), lm.tokenizer, cfg.num_samples, cfg.seq_len, cfg.shuffle, cfg.seed
    )
    holdout = holdout_count(len(blocks), cfg.holdout_fraction)
    bs = cfg.batch_size or default_batch_size(cfg.seq_len, str(source.device))
    n_layers = source.config.num_hidden_layers
    writer = stats_cache.ShardWriter(path)
    scores: list[dict] = []

    def on_layer(i: int, stats: LayerStats) -> None:  # score at once, write the shard, drop the sums
        writer.layer(i, stats)
        scores.append(layer_scores(i, stats, cfg.ridge, cfg.form))

    try:
        cal = calibrate(
            source,
            blocks,
            batch_size=bs,
            holdout=holdout,
            product_dtype=torch.float64 if products == "float64" else torch.float32,
            tf32=products == "tf32",
            on_batch=lambda done, total: report(
                "calibrate", done / total, f"layer {(done - 1) * n_layers // total + 1}/{n_layers}"
            ),
            progress=progress,
            modes=(cfg.mode,),
            host_bytes=cfg.host_cache_bytes,
            spill_dir=spill_dir(cfg),
            on_layer=on_layer,
            devices=cfg.devices,
            form=cfg.form,
            max_run=max_run,
        )
    except BaseException:
        writer.abort()
        if not caching:
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
        "form": cfg.form,
        "max_run": max_run,
    }
    held = blocks[len(blocks) - holdout :].clone()
    shards = writer.finish(held, meta)
    return CalibrationResult(shards, held, meta, False, key, scores=scores, temporary=not caching)


def spill_dir(cfg: CompressConfig) -> Path | None:
    """Where hidden states past the host budget go: the config's, else 'spill' beside the statistics
    directory; None (neither given): nowhere, so a run that must spill fails saying so."""
    if cfg.spill_dir is not None:
        return Path(cfg.spill_dir)
    return Path(cfg.stats_dir).parent / "spill" if cfg.stats_dir is not None else None
