"""The stages of one compression job, run by the worker task: plain functions over a job spec.

    load -> calibrate (statistics cache) -> score -> compress -> evaluate -> publish

The engine's own stages (engine/compress.py) do the first four; this adds publishing.

The pipeline knows nothing of the database or the broker: it reports through a `Sink` (the task
writes that to the DB) and is cancelled by the sink raising `Cancelled` from `progress`. Work is
idempotent: calibration is cached by content, outputs are written atomically, so a retried job
skips what is done and never leaves half a checkpoint.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .engine import compress
from .engine.compress import CompressConfig
from .engine.data import DatasetSpec
from .engine.loading import load_model
from .eval.compressed import load_compressed
from .eval.evaluate import EvalSpec, evaluate_cached, evaluate_model

class Cancelled(Exception):
    """Raised by a sink when the job's cancellation was requested."""


class Sink(Protocol):
    def progress(self, stage: str, fraction: float, message: str) -> None: ...
    def metrics(self, variant: str, values: dict[str, float]) -> None: ...
    def warning(self, message: str) -> None: ...
    def layer_scores(self, scores: list[dict]) -> None: ...
    def output(self, k: int, layers: list[int], path: str) -> None: ...


@dataclass
class Paths:
    models_dir: Path  # `local:NAME` models
    work_dir: Path  # this job's scratch space (outputs before publishing)
    publish_dir: Path  # local publishing destination
    stats_dir: Path | None = None


@dataclass
class PipelineResult:
    selected: dict[int, list[int]] = field(default_factory=dict)  # k -> layers
    outputs: dict[int, str] = field(default_factory=dict)  # k -> published path
    calibration: dict = field(default_factory=dict)


def resolve_model(model_id: str, models_dir: Path) -> str:
    """`local:NAME` names a checkpoint directory or .gguf file under models_dir; anything else is a Hub id."""
    if not model_id.startswith("local:"):
        return model_id
    name = model_id.removeprefix("local:")
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"invalid local model name {name!r}")
    for candidate in (models_dir / name, models_dir / f"{name}.gguf"):
        if candidate.exists():
            return str(candidate)
    raise ValueError(f"local model {name!r} not found in the models directory")


def compress_config(spec: dict, paths: Paths) -> CompressConfig:
    cal, comp = spec.get("calibration", {}), spec.get("compression", {})
    k = comp.get("k", 4)
    return CompressConfig(
        model=resolve_model(spec["model"]["id"], paths.models_dir),
        revision=spec["model"].get("revision"),
        dataset=DatasetSpec(cal.get("dataset", "c4"), cal.get("config"), cal.get("split", "train"),
                            cal.get("text_field", "text")),
        ks=[k] if isinstance(k, int) else list(k),
        num_samples=cal.get("num_samples", 256),
        seq_len=cal.get("seq_len", 2048),
        seed=cal.get("seed", 0),
        shuffle=cal.get("shuffle", False),
        mode=comp.get("mode", "attn"),
        method=comp.get("method", "nbl"),
        criterion=comp.get("criterion", "cca"),
        dtype=spec.get("dtype"),
        stats_dir=paths.stats_dir,
    )


def run(spec: dict, sink: Sink, paths: Paths, job_id: str) -> PipelineResult:
    """Compress into the job's work dir (engine stages report through `sink.progress`), evaluate
    the base and every output as saved, then publish."""
    cfg = compress_config(spec, paths)
    cfg.out = paths.work_dir
    cfg.check()
    sink.progress("load", 0.0, f"loading {spec['model']['id']}")
    lm = load_model(cfg.model, cfg.revision, cfg.dtype, cfg.device)
    compressed = compress.run(cfg, report=sink.progress, progress=False, lm=lm)
    sink.layer_scores(compressed.scores)
    result = PipelineResult(calibration=compressed.calibration)
    for o in compressed.outputs:
        result.selected[o["k"]] = o["replaced_layers"]

    espec = eval_spec(spec.get("evaluation") or {})
    if not espec.empty():
        evaluate(lm, {o["k"]: Path(o["path"]) for o in compressed.outputs}, espec, sink)
    del lm

    sink.progress("publish", 0.0, "publishing")
    for o in compressed.outputs:
        dest = publish_local(Path(o["path"]), paths.publish_dir, spec, job_id, o["k"], len(cfg.ks) > 1)
        result.outputs[o["k"]] = str(dest)
        sink.output(o["k"], o["replaced_layers"], str(dest))
    sink.progress("publish", 1.0, "published")
    return result


def eval_spec(ev: dict) -> EvalSpec:
    return EvalSpec(perplexity=tuple(ev.get("perplexity") or ()), tasks=tuple(ev.get("tasks") or ()),
                    limit=ev.get("limit"), max_tokens=ev.get("max_tokens"), speed=bool(ev.get("speed")))


def evaluate(lm, outputs: dict[int, Path], espec: EvalSpec, sink: Sink) -> None:
    """Base (cached per model and spec) and each output reloaded from disk, as users will load it."""
    n = len(outputs) + 1
    sink.progress("evaluate", 0.0, "evaluating the base model")
    base = evaluate_cached(lm, espec, progress=False)
    sink.metrics("base", flatten(base))
    base_params = base["params"]["non_embedding_params"]
    for j, (k, path) in enumerate(outputs.items(), start=1):
        sink.progress("evaluate", j / n, f"evaluating k={k} from {path.name}")
        out = load_compressed(path)
        sink.metrics(f"k{k}", flatten(evaluate_model(out, espec, base_non_embedding=base_params, progress=False)))
        del out
    sink.progress("evaluate", 1.0, "evaluated")


def flatten(result: dict) -> dict[str, float]:
    """An evaluation result as flat metric names: perplexity/wikitext2/ppl, tasks/arc_easy/acc, ..."""
    out: dict[str, float] = {}

    def walk(prefix: str, node) -> None:
        if isinstance(node, bool):
            return
        if isinstance(node, (int, float)):
            out[prefix] = float(node)
        elif isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}/{key}" if prefix else str(key), value)

    for section in ("perplexity", "tasks", "speed", "params"):
        walk(section, result.get(section))
    return out


def publish_local(out: Path, publish_dir: Path, spec: dict, job_id: str, k: int, several: bool) -> Path:
    """Copy an output into NBL_PUBLISH_DIR/<name>[/k{K}] atomically; publishing twice is harmless."""
    name = (spec.get("publish") or {}).get("local_dir") or job_id
    dest = publish_dir / name / f"k{k}" if several else publish_dir / name
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(out, tmp)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest
