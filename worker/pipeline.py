"""The stages of one compression job, run by the worker task: plain functions over a Recipe.

    load -> calibrate (statistics cache) -> score -> compress -> check -> evaluate -> gates -> export -> publish

The engine's own stages (engine/compress.py) do the first four; this adds the load check (each saved
output reloaded in a fresh process), evaluation, the quality gates (worker/gates.py: an output that fails
one is not published; none passing fails the job), and publishing (the card rewritten with the results,
then a Destination: a local directory or the Hub, worker/publish).

The pipeline knows nothing of the database or the broker: it reports through a `Sink` (the task
writes that to the DB) and is cancelled by the sink raising `Cancelled` from `progress` (those, its Paths,
Options and result: worker/pipeline_io.py; the evaluation stage: worker/eval_stage.py). Work is
idempotent: calibration is cached by content, outputs are written atomically, so a retried job
skips what is done and never leaves half a checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path

from nbl.outputs.gguf_formats import gguf_types
from nbl.quant_result import QUANTIZATION
from nbl.recipe import Recipe
from nbl.result import REFINE, refine_flat

from . import budget, gates, load_stage, progress, run_warnings
from .engine import compress
from .engine.config import from_recipe
from .engine.devices import visible
from .engine.loading.hub_ids import refuse_path_shadowing
from .engine.loading.load import release_weights
from .eval.evaluate import check_tasks
from .eval_stage import eval_spec, evaluate
from .pipeline_io import Options, Paths, PipelineResult, Sink
from .publish import loadcheck
from .publish.destination import Destination
from .publish.gguf_export import export_formats, exportable, gguf_python
from .publish.stage import publish
from .quant import stage as quant_stage
from .quant.quantize import shapes as quant_shapes


def layer_count(model_dir: Path) -> int | None:
    """The decoder layers its config.json says (the weights are not loaded yet); None if it does not say."""
    try:
        n = json.loads((Path(model_dir) / "config.json").read_text()).get("num_hidden_layers")
    except (OSError, ValueError, AttributeError):
        return None
    return n if isinstance(n, int) and n > 0 else None


def resolve_model(model_id: str) -> str:
    """A Hub id, or the directory the task resolved `local:NAME` to (service.core.paths.model_source, the
    one place that maps local names)."""
    refuse_path_shadowing(model_id, "model")  # a Hub id that is also a local path: the loader would read the path
    return model_id


def run(
    recipe: Recipe,
    sink: Sink,
    paths: Paths,
    destination: Destination | None,
    options: Options = Options(),
    source: str | None = None,
) -> PipelineResult:
    """Load, calibrate, score and compress into `paths.work_dir` (engine stages report through `sink.progress`),
    check that each output reloads alone, evaluate the base and every output as saved, then publish each to
    `destination` (a job's directory or Hub repo, built by the task; `nbl compress`'s --out in place) with its
    card, written there once. `source` is where the model is read (a job's `local:NAME` resolved to its
    directory; default the recipe's model). A job's estimate must fit this worker's devices before any
    download (preflight.fits); calibration runs on those devices, one process each.
    The steps that reach the Hub (load, compress's dataset, publish) are retried by `options.retry` while their
    failure is transient (worker/errors.py); they are idempotent (cached downloads, atomic outputs, adopted commits)."""
    retry = options.retry
    model = source or recipe.model
    cfg = from_recipe(
        recipe,
        model if options.local_paths else resolve_model(model),
        out=paths.work_dir,
        dtype=options.dtype,
        batch_size=options.batch_size,
        product_dtype=options.product_dtype,
        stats_dir=paths.stats_dir,
        use_cache=paths.stats_cache,
        spill_dir=paths.spill_dir,
        data_dir=paths.data_dir,
        models_dir=paths.models_dir,
        home=paths.home,
        greedy_width=options.greedy_width,
        max_model_bytes=options.max_model_bytes,
        host_cache_bytes=options.host_cache_bytes,
        out_dtype=recipe.publishing.dtype if recipe.publishing is not None else None,
    )
    cfg.devices = visible(options.devices, options.device)
    cfg.device = cfg.devices[0]  # the model is loaded there; the other processes read its checkpoint
    cfg.check()
    if paths.work_dir is not None and destination is not None and not recipe.evaluation.empty():
        # a task whose data is absent fails the run before any download
        with tempfile.TemporaryDirectory(prefix="nbl-tasks-") as tmp:
            check_tasks(eval_spec(recipe.evaluation, Path(tmp)), paths.data_dir)
    if paths.work_dir is not None and recipe.publishing is not None and gguf_types(recipe.publishing.formats):
        gguf_python(paths.gguf_python)  # no GGUF venv: the job fails now, not after calibrating
    if paths.work_dir is not None:
        quant_stage.ready(recipe, paths.quant_python)  # nor without the quantization venv
    name = recipe.model  # as the job names it (local:NAME), never a server path
    lm, load_s, fetched = load_stage.load(recipe, cfg, options, sink)
    lm.source = name  # what nbl_scores.json and the card call the base model
    if gguf_types(recipe.publishing.formats if recipe.publishing else ()) and (cfg.form, cfg.mode) == ("fold", "block"):
        # the output is the base's own class with fewer layers: what llama.cpp cannot take of it fails now
        exportable(Path(lm.path), f"the base model {name}")
    if quant_stage.schemes_of(recipe):  # a width w4a16's groups cannot divide: refused before calibrating
        quant_shapes(Path(lm.path), quant_stage.schemes_of(recipe), f"the base model {name}")
    if hasattr(sink, "loaded"):
        sink.loaded(fetched)
    layers = layer_count(lm.path)

    known = {"base_cached": False, "stats_cached": False}  # what the job turned out to reuse

    def replan(base_cached: bool | None = None) -> None:  # the stages' costs, now that the layer count is known
        if base_cached is not None:
            known["base_cached"] = base_cached
        if hasattr(sink, "replan"):  # (worker/progress.py)
            sink.replan(progress.plan(recipe, layers, **known))

    replan()
    refs: dict[int, loadcheck.Reference] = {}  # k -> logits of the compressed model in memory
    compressed = retry.run(
        lambda: compress.run(
            cfg,
            report=sink.progress,
            progress=options.progress,
            lm=lm,
            on_saved=(lambda o, model: refs.__setitem__(o["k"], loadcheck.reference(model)))
            if options.load_check
            else None,
        ),
        "calibrating",
    )
    compressed.timings["load_s"] += load_s  # the engine timed only its checks of the model handed to it
    result = PipelineResult(
        calibration=compressed.calibration,
        compressed=compressed,
        selected={o["k"]: o["replaced_layers"] for o in compressed.outputs},
    )
    sink.layer_scores(compressed.scores)
    sink.selection(
        recipe.compression.mode,
        result.selected,
        compressed.selection,  # measured: auto_k.Chooser.record
        family=lm.family,
        dtypes={o["k"]: o["dtype"] for o in compressed.outputs if o.get("dtype")},
    )
    cal = compressed.calibration
    if cal.get("cached"):  # a calibration that read the statistics cache: recorded as the work of one
        known["stats_cached"] = True
        replan()
    sink.metrics(
        "calibration",
        {"tokens": cal.get("tokens"), "seconds": cal.get("seconds"), "cached": float(bool(cal.get("cached")))},
    )
    if refined := refine_flat(compressed.outputs):  # compression.refit / heal: each output's (result.outputs[])
        sink.metrics(REFINE, refined)
    caveats = run_warnings.after_compression(  # over-fitted maps, too few tokens: warned now, on the cards later
        compressed.scores,
        recipe.compression.mode,
        result.selected,
        cal.get("tokens"),
        run_warnings.hidden_size(lm),
        sink.warning,
    )
    if (msg := run_warnings.text_part(lm)) is not None:
        caveats.common.append(msg)
        sink.warning(msg)
    if (msg := budget.selection_warning(recipe, compressed.selection, recipe.calibration.seq_len)) is not None:
        caveats.common.append(msg)  # the selection data cannot tell the budget apart: on the cards too
        sink.warning(msg)
    if paths.work_dir is None or destination is None:
        return result  # scores and the layers each k would replace; nothing saved

    outputs = {o["k"]: Path(o["path"]) for o in compressed.outputs}
    if options.load_check:  # the base (whole after a measured selection) leaves memory before each output loads
        release_weights(lm)
        result.checks = check(outputs, refs, sink, options.check_timeout_s, devices=cfg.devices) or {}
    quantized, schemes = result.quantized, quant_stage.schemes_of(recipe)
    metrics: dict[str, dict[str, float]] = {}
    # The base's quantized copies (the comparison, never published) beside the work directory until evaluated.
    base_copies = (
        tempfile.TemporaryDirectory(prefix=".nbl-base-quantized-", dir=Path(paths.work_dir).absolute().parent)
        if schemes and not recipe.evaluation.empty()
        else contextlib.nullcontext(None)
    )
    with base_copies as base_root:
        if schemes:  # each output (and, to compare, the base) once more per scheme
            quantized = result.quantized = quant_stage.run(
                recipe,
                outputs,
                (Path(lm.path), Path(base_root)) if base_root else None,
                sink,
                paths.quant_python,
                paths.data_dir,
                stop_check(sink),
            )
            sink.metrics(QUANTIZATION, quantized.facts())
            if hasattr(sink, "quantized"):  # a job's: the facts on its outputs' rows
                sink.quantized(quantized.outputs)
        if (
            not recipe.evaluation.empty()
        ):  # a base not in memory (released above) is loaded over cfg.devices: compare.py
            with tempfile.TemporaryDirectory(prefix="nbl-tasks-") as tmp:  # a job's task files, as files
                metrics, result.evaluation = evaluate(
                    lm,
                    outputs,
                    eval_spec(recipe.evaluation, Path(tmp)),
                    sink,
                    paths,
                    options.progress,
                    cfg.devices,
                    on_base=replan,
                    extra=quantized.variants(),
                )
    run_warnings.after_evaluation(caveats, metrics, recipe.evaluation.limit, recipe.evaluation.max_tokens, sink.warning)
    lm = None  # the base model goes before publishing (a closure above shares the name)

    held, told = budget.on_evaluation(recipe, metrics, list(outputs), sink.warning)  # k auto's, on the evaluation
    caveats.common.extend(told)
    outputs = gates.apply(  # QualityFailure when none passes
        recipe.gates, outputs, metrics, sink, extra=held, schemes=quant_stage.schemes_of(recipe)
    )
    if recipe.publishing is not None and gguf_types(recipe.publishing.formats):  # written into each output's folder
        for j, (k, path) in enumerate(outputs.items()):  # its own stage: timed and priced per GGUF type
            sink.progress("export", j / len(outputs), f"k={k}: GGUF {', '.join(gguf_types(recipe.publishing.formats))}")
            export_formats(path, recipe.publishing.formats, paths.gguf_python, should_stop=stop_check(sink))
        sink.progress("export", 1.0, f"exported {len(outputs)} output(s) to GGUF")
    result.outputs = publish(
        outputs,
        result.selected,
        destination,
        metrics,
        recipe.request,
        sink,
        retry,
        several=len(result.selected) > 1,
        caveats=caveats,
        base_bytes={s: f["bytes"] for s, f in quantized.base.items()},
        base_size=quantized.base_bytes,
    )
    return result


def stop_check(sink: Sink):
    """What a subprocess polls while it runs (worker/subproc.py): a job's sink raises Cancelled from should_stop
    on a cancel, and the child's group is killed; the terminal's sink has none."""
    return getattr(sink, "should_stop", None)


def check(outputs: dict[int, Path], refs: dict, sink: Sink, timeout_s: float, devices=None) -> dict[int, dict]:
    """Every output reloaded in a fresh process (over the run's `devices` when larger than the first) must generate
    and reproduce the in-memory logits; a failure (LoadCheckError) ends the job before anything is published."""
    sink.progress("check", 0.0, "reloading each output in a fresh process")
    done = {}
    for j, (k, path) in enumerate(outputs.items(), start=1):
        done[k] = res = loadcheck.check(
            path, refs[k], timeout_s=timeout_s, devices=devices, should_stop=stop_check(sink)
        )
        sink.progress(
            "check",
            j / len(outputs),
            f"k={k}: {res['class']} reloads and generates; max |logit "
            f"difference| {res['max_abs_diff']:.2g} (tolerance {res['tolerance']:.2g})",
        )
    return done
