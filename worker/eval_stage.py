"""The pipeline's evaluation stage (worker/pipeline.py): a recipe's evaluation as the evaluation's own spec,
the base and each saved output measured (worker/eval/compare.py) and each result reported through the sink
as soon as it is in, as flat metric names (perplexity/wikitext2/ppl, ...) that the gates, the card and the
job's metrics rows read.
"""

from __future__ import annotations

from pathlib import Path

from nbl.recipe import Evaluation
from nbl.result import BASE_EVALUATION, EVALUATION_SECONDS

from .eval.compare import evaluate_outputs
from .eval.evaluate import EvalSpec
from .pipeline_io import Paths, Sink


def eval_spec(ev: Evaluation, task_dir: Path | None = None) -> EvalSpec:
    """The evaluation's own spec of a recipe's section (None there: the evaluation's default). A job's
    task files are written under `task_dir` as NAME.jsonl, so they are read, reported and cached as
    `nbl eval --task-file NAME.jsonl` would read the same file."""
    extra = {k: v for k, v in (("repeats", ev.repeats), ("batch_tokens", ev.batch_tokens)) if v is not None}
    files = list(ev.task_files)
    if ev.task_texts:
        if task_dir is None:
            raise ValueError("a job's task files need a directory to be written to")
        task_dir.mkdir(parents=True, exist_ok=True)
        for name, text in ev.task_texts:
            (task_dir / f"{name}.jsonl").write_text(text, encoding="utf-8")
            files.append(str(task_dir / f"{name}.jsonl"))
    return EvalSpec(
        perplexity=ev.perplexity,
        tasks=ev.tasks,
        task_files=tuple(files),
        limit=ev.limit,
        max_tokens=ev.max_tokens,
        suite=ev.suite,
        speed=ev.speed,
        **extra,
    )


def evaluate(
    lm,
    outputs: dict[int, Path],
    espec: EvalSpec,
    sink: Sink,
    paths: Paths,
    progress: bool = False,
    devices: list[str] | None = None,
    on_base=lambda cached: None,
    extra: dict[str, Path] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, dict]]:
    """Base (cached per model and spec unless paths.eval_cache is off) and each output reloaded from disk
    (worker/eval/compare.py), over `devices` when larger than the first, each stored as soon as measured.
    `on_base(cached)`: the base's evaluation is done, from the cache or not (the stage's cost is replanned).
    `extra`: more models by name, measured after the outputs (the quantized ones: "k4+w4a16", "base+w4a16").
    Returns the flat metrics by variant ({"base": {...}, "k4": {...}}) and the nested results they come from."""
    metrics: dict[str, dict[str, float]] = {}
    nested: dict[str, dict] = {}
    seconds: dict[str, float] = {}

    def record(variant: str, result: dict) -> None:
        nested[variant] = result
        metrics[variant] = flatten(result)
        sink.metrics(variant, metrics[variant])
        if variant == "base":  # whether it came from the cache, and the time it took: result.base_evaluation
            on_base(bool(result.get("cached")))
            sink.metrics(
                BASE_EVALUATION,
                {"cached": float(bool(result.get("cached"))), "seconds": float(result.get("seconds") or 0.0)},
            )
        elif result.get("seconds") is not None:  # each output's reload and evaluation: result.outputs[].seconds
            seconds[variant] = float(result["seconds"])
            sink.metrics(EVALUATION_SECONDS, dict(seconds))

    evaluate_outputs(
        lm,
        outputs,
        espec,
        use_cache=paths.eval_cache,
        progress=progress,
        report=sink.progress,
        on_result=record,
        data_dir=paths.data_dir,
        home=paths.home,
        devices=devices,
        extra=extra,
    )
    return metrics, nested


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
