"""Each stage's expected cost for a recipe, in one unit: one token through one decoder layer
("token-layers"). Calibration costs its tokens x layers; the other stages are priced in the same unit by
constants measured on SmolLM2-135M on a CPU (bench/progress_smollm2.py). The worker's progress weighs its
stages by it (worker/progress.py), and the API's estimate turns it into seconds with the rates a worker
class measured (nbl/sizing/rates.py). Pure: no torch, no database.
"""

from __future__ import annotations

from dataclasses import dataclass

from nbl.outputs.gguf_formats import gguf_types
from nbl.recipe import Recipe
from nbl.selection.score_fields import MEASURED
from nbl.selection.sets import expected_sets
from nbl.sizing.model import EVAL_TOKENS_PER_CORPUS, TASK_DOCS, TASK_TOKENS_PER_DOC
from nbl.sizing.quant import quantized_layers, token_layers
from nbl.sizing.refine import guard_blocks, refine_token_layers

# select: measured only; refine: compression.refit / heal (nbl/sizing/refine.py)
# quantize: publish.quantize, each output (and the base, for its comparison) per scheme (nbl/sizing/quant.py)
STAGES = (
    "load",
    "calibrate",
    "score",
    "select",
    "refine",
    "compress",
    "check",
    "quantize",
    "evaluate",
    "export",
    "publish",
)
LAYERS = 32  # before the model's config is read (only the loss probe's cost is not linear in layers)
# Token-layers per layer of each stage's one unit of work, measured on SmolLM2-135M (CPU, 2 cores under
# load, bench/results/progress_smollm2.json): scoring a layer from its sums ~0.9 s, saving an output ~4 s,
# reloading it in a fresh process ~20 s, loading the model ~1 s, where calibration ran ~2000 token-layers/s.
# Calibration scores each layer as its sums complete, so it carries the scoring too; the score stage costs
# as much again when the sums come from the statistics cache (else it is done at once).
SCORE_PER_LAYER = 2048
SAVE_PER_LAYER = 256
CHECK_PER_LAYER = 1024
LOAD_PER_LAYER = 128
PUBLISH_PER_LAYER = 64
# A GGUF export (convert, then quantize unless f16/bf16/f32) per output and type: ~7 s for SmolLM2 on 2 busy
# cores (issue 38) where calibration ran ~2000 token-layers/s; measured per type from a class's first export
EXPORT_PER_LAYER = 512
CACHED_CALIBRATE_PER_LAYER = 64  # a statistics cache hit reads each layer's shard, no forward
EVAL_PER_TOKEN_LAYER = 0.65  # a forward alone: evaluation ran 2600 token-layers/s where calibration ran 1700
HEAD_LAYERS = 11  # an LM-head pass in layer passes (SmolLM2: 49k vocabulary, d = 576; the probe took 155 s
# for its 495 layer passes, then 110 s for its 31 head passes)
WINDOW = 2048  # tokens of a perplexity window (eval/perplexity.default_window on most models)
MIN_MEASURE_S = 1.0  # a stage done faster (a cache hit) measures nothing


@dataclass(frozen=True)
class StageCost:
    units: float  # the stage's work in its own unit: tokens, layers, documents, outputs
    unit: str
    weight: float  # expected cost in token-layers


def plan(
    recipe: Recipe, layers: int | None = None, base_cached: bool = False, stats_cached: bool = False
) -> dict[str, StageCost]:
    """Each stage's expected cost for `recipe` on a model of `layers` decoder layers (None: not known yet).
    `base_cached`: the base's evaluation comes from the cache (nbl/sizing/reuse.py), so evaluation is the
    outputs' alone: models = outputs, not 1 + outputs (the worker's measured rate is per model evaluated).
    `stats_cached`: the statistics come from the cache, so calibration reads shards and runs no token."""
    L = layers or LAYERS
    cal, ev = recipe.calibration, recipe.evaluation
    tokens = cal.num_samples * cal.seq_len
    outputs = len(recipe.ks) or 1  # k auto: one output
    score = StageCost(L, "layers", L * SCORE_PER_LAYER)
    if recipe.compression.criterion == "loss":  # layer l runs on l + 2 streams of the held-out tenth, then
        held = max(1, cal.num_samples // 10) * cal.seq_len  # the LM head on each of the L + 1 streams
        score = StageCost(L, "layers", L * SCORE_PER_LAYER + held * (L * (L + 3) / 2 + (L + 1) * HEAD_LAYERS))
    comp, k_auto = recipe.compression, recipe.compression.max_ppl_increase is not None
    sets = expected_sets(comp.criterion, recipe.ks, L, k_auto=k_auto) if comp.criterion in MEASURED or k_auto else 0
    sel_tokens = (recipe.selection.num_samples if recipe.selection else max(1, cal.num_samples // 10)) * cal.seq_len
    ppl_tokens = ev.max_tokens or EVAL_TOKENS_PER_CORPUS
    task_docs = (len(ev.tasks) + len(ev.task_files)) * (ev.limit or TASK_DOCS)
    docs = len(ev.perplexity) * -(-ppl_tokens // WINDOW) + task_docs + (4 if ev.speed else 0)
    eval_tokens = len(ev.perplexity) * ppl_tokens + task_docs * TASK_TOKENS_PER_DOC + (8192 if ev.speed else 0)
    schemes = recipe.publishing.quantize if recipe.publishing else ()
    quantized = quantized_layers(L, recipe.ks, base=not ev.empty()) if schemes else []
    models = outputs + (0 if base_cached else 1) + len(quantized) * len(schemes)
    exports = outputs * len(gguf_types(recipe.publishing.formats if recipe.publishing else ()))
    calibrate = (
        StageCost(0, "tokens", L * CACHED_CALIBRATE_PER_LAYER)
        if stats_cached
        else StageCost(tokens, "tokens", tokens * L + L * SCORE_PER_LAYER)
    )
    return {
        "load": StageCost(1, "models", L * LOAD_PER_LAYER),
        "calibrate": calibrate,
        "score": score,
        # a set runs from its first replaced layer on (L/2 on average), then the LM head (set_loss.py)
        "select": StageCost(sets, "layer sets", sets * sel_tokens * (L / 2 + HEAD_LAYERS)),
        "refine": StageCost(
            outputs,
            "outputs",
            refine_token_layers(
                cal.num_samples,
                cal.seq_len,
                L,
                recipe.ks,
                comp.refit,
                comp.heal,
                HEAD_LAYERS,
                guard_blocks(cal, recipe.selection),
            ),
        ),
        "compress": StageCost(outputs, "outputs", outputs * L * SAVE_PER_LAYER),
        "check": StageCost(outputs, "outputs", outputs * L * CHECK_PER_LAYER),
        "quantize": StageCost(
            len(quantized) * len(schemes),
            "quantizations",
            token_layers(schemes, quantized, cal.num_samples, cal.seq_len),
        ),
        "evaluate": StageCost(
            models * docs, "documents", 0 if ev.empty() else models * eval_tokens * L * EVAL_PER_TOKEN_LAYER
        ),
        "export": StageCost(exports, "exports", exports * L * EXPORT_PER_LAYER),
        "publish": StageCost(outputs, "outputs", outputs * L * PUBLISH_PER_LAYER),
    }
