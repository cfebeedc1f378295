"""The refine stage: after the layers are chosen and their maps fitted, refit them (refit.py) and/or heal them
(heal.py), per output, before it is written. Progress stage `refine`.

What is computed once per run and shared by the outputs (k values): the calibration blocks (re-tokenised, as
the sums may come from the cache), the healing blocks and the teacher's top-K logits on them, and the heal's
guard: the selection dataset's blocks (the ones a measured selection scores), when the job gives a selection
dataset other than the calibration's. Healing that raises the guard's perplexity is not kept (heal.py): the
held-out healing text alone cannot see a heal that learns its own domain at the others' cost. A selection
dataset equal to the calibration's is its next blocks, the healing text itself: no guard then.

The refit's maps depend on the chosen set, so they are cached by it: a file beside the calibration's shards,
`refit-<key>.safetensors` in the statistics cache entry, keyed by the set, mode, form, ridge and the batching
the sums were taken with. It lives and goes with its entry (the cache's LRU, `nbl admin gc`, a --no-cache run's
temporary entry). Healing is not cached: its result depends on its steps, rate and clock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from nbl.data.heal import heal_data_error, stream_blocks
from nbl.refine_schema import REFIT, heal_split
from worker.engine.calibration.data import DataError, load_texts, make_blocks
from worker.engine.calibration.products import resolve_products
from worker.engine.calibration.stage import CalibrationResult, Report, layer_source, spill_dir
from worker.engine.calibration.stats_cache import cache_key
from worker.engine.config import CompressConfig
from worker.engine.forms.surgery import Plan
from worker.engine.loading.load import LoadedModel, load_weights
from worker.engine.placement import max_memory_for
from worker.engine.refine.heal import TeacherTargets, heal, teacher_targets
from worker.engine.refine.refit import sequential_refit
from worker.engine.scoring.scores import LinearMap
from worker.engine.selection.stage import other_text_blocks


def healing_stream(cfg: CompressConfig, tokenizer, report: Report, stage: str = "refine") -> torch.Tensor:
    """The calibration's blocks, then the healing's (the same stream, cut further): (num_samples + heal, seq_len).
    Made before calibrating when healing is asked (compress.run), so data too short for the heal fails then,
    naming compression.heal.tokens, not after the calibration's hours (nbl/data/heal.py: the API's check)."""
    heal = cfg.heal.tokens if cfg.heal else 0
    n = stream_blocks(cfg.num_samples, cfg.seq_len, heal) if heal else cfg.num_samples
    report(stage, 0.0, "tokenizing calibration data" + (" and healing text" if heal else ""))
    try:
        return make_blocks(load_texts(cfg.dataset, cfg.data_dir), tokenizer, n, cfg.seq_len, cfg.shuffle, cfg.seed)
    except DataError as e:
        if not heal:
            raise
        raise DataError(heal_data_error(cfg.num_samples, cfg.seq_len, heal, str(e))) from e


class Refiner:
    """`refine(plan, maps, k)` -> (maps, record) for each output of one run. `blocks`: healing_stream's, when the
    run made them already."""

    def __init__(
        self,
        cfg: CompressConfig,
        lm: LoadedModel,
        cal: CalibrationResult,
        report: Report,
        blocks: torch.Tensor | None = None,
    ):
        self.cfg, self.lm, self.cal, self.report = cfg, lm, cal, report
        self._blocks = blocks  # calibration + healing blocks, tokenised once
        self._targets: TeacherTargets | None = None
        self._guard: torch.Tensor | None = None

    @property
    def active(self) -> bool:
        return self.cfg.refit != REFIT or self.cfg.heal is not None

    def refine(self, plan: Plan, maps: dict[int, LinearMap], k: int) -> tuple[dict[int, LinearMap], dict]:
        record: dict = {}
        if self.cfg.refit == "sequential" and plan.layers:
            maps, record["refit"] = self._refit(plan, maps, k)
        if self.cfg.heal is not None and plan.layers:
            maps, record["heal"] = self._heal(plan, maps, k)
        return maps, record

    def blocks(self) -> torch.Tensor:
        """The calibration's blocks, then the healing's (the same stream, cut further)."""
        if self._blocks is None:
            self._blocks = healing_stream(self.cfg, self.lm.tokenizer, self.report)
        return self._blocks

    # --- sequential refit ---------------------------------------------------------------------------
    def _refit(self, plan: Plan, maps: dict[int, LinearMap], k: int) -> tuple[dict[int, LinearMap], dict]:
        cfg, meta = self.cfg, self.cal.meta
        source = layer_source(self.lm)
        products = resolve_products(cfg.product_dtype, source.device)
        key = cache_key(
            layers=sorted(plan.layers),
            mode=plan.mode,
            form=plan.form,
            ridge=cfg.ridge,
            batch_size=meta.get("batch_size", 1),
            holdout=meta.get("holdout_blocks", 0),
            products=products,
        )
        path = Path(self.cal.stats.path) / f"refit-{key}.safetensors"
        if path.exists():
            self.report("refine", 1.0, f"k={k}: refit maps from the statistics cache")
            return _read_maps(path)
        blocks = self.blocks()[: cfg.num_samples]
        refit = sequential_refit(
            source,
            blocks,
            plan,
            maps,
            batch_size=meta.get("batch_size", 1),
            holdout=meta.get("holdout_blocks", 0),
            ridge=cfg.ridge,
            product_dtype=torch.float64 if products == "float64" else torch.float32,
            tf32=products == "tf32",
            host_bytes=cfg.host_cache_bytes,
            spill_dir=spill_dir(cfg),
            on_batch=lambda done, total: self.report(
                "refine", done / total, f"k={k}: refit {done}/{total} layer passes"
            ),
        )
        record = {**refit.record(), "cached": False}
        _write_maps(path, refit.maps, {**record, "cached": True})
        return refit.maps, record

    # --- healing ------------------------------------------------------------------------------------
    def _heal(self, plan: Plan, maps: dict[int, LinearMap], k: int) -> tuple[dict[int, LinearMap], dict]:
        spec, cfg = self.cfg.heal, self.cfg
        n_train, n_held = heal_split(spec.tokens, cfg.seq_len)
        rest = self.blocks()[cfg.num_samples :]
        train, held = rest[:n_train], rest[n_train:]
        if self.lm.model is None:  # healing backpropagates through the whole compressed model
            self.report("refine", 0.0, "loading the whole model for healing")
            load_weights(self.lm, max_memory_for(self.lm.path, cfg.devices))
        model = self.lm.model
        if self._targets is None:  # the teacher's top-K logits, once for every output
            self.report("refine", 0.0, f"teacher logits on {n_train} healing blocks")
            self._targets = teacher_targets(
                model,
                train,
                on_block=lambda done, total: self.report(
                    "refine", done / total, f"teacher logits {done}/{total} blocks"
                ),
            )
        steps = spec.steps or n_train
        guard = self.guard()
        out = heal(
            model,
            plan,
            maps,
            train,
            held,
            self._targets,
            steps=steps,
            lr=spec.lr,
            max_seconds=spec.max_seconds,
            guard=guard,
            on_step=lambda done, total, loss: self.report(
                "refine", done / total, f"k={k}: heal block {done}/{total}, KL {loss:.4f}"
            ),
        )
        record = {**out.record(), "lr": spec.lr, "held_tokens": int(held.numel())}
        if guard is not None:
            record["guard_tokens"] = int(guard.numel())
        return out.maps, record

    def guard(self) -> torch.Tensor | None:
        """The selection dataset's blocks, the ones a measured selection scores, when it is not the calibration's;
        None else."""
        cfg = self.cfg
        if cfg.selection is None or cfg.selection == cfg.dataset:
            return None
        if self._guard is None:
            self.report("refine", 0.0, "tokenizing the selection data (the heal's guard)")
            self._guard = other_text_blocks(cfg, self.lm.tokenizer)
        return self._guard


def _write_maps(path: Path, maps: dict[int, LinearMap], record: dict) -> None:
    """Atomically: a reader sees the whole file or none."""
    tensors = {f"{i}.{name}": getattr(m, name).contiguous() for i, m in maps.items() for name in ("weight", "bias")}
    tensors.update({f"{i}.ridge": torch.tensor(m.ridge, dtype=torch.float64) for i, m in maps.items()})
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    save_file(tensors, str(tmp), metadata={"record": json.dumps(record)})
    os.replace(tmp, path)


def _read_maps(path: Path) -> tuple[dict[int, LinearMap], dict]:
    from safetensors import safe_open

    flat = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        record = json.loads(f.metadata()["record"])
    layers = sorted({int(name.split(".")[0]) for name in flat})
    return {i: LinearMap(flat[f"{i}.weight"], flat[f"{i}.bias"], float(flat[f"{i}.ridge"])) for i in layers}, record
