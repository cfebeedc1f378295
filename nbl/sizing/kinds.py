"""The kind of work each stage of a job does, so that measured rates are only ever compared like with like.

A stage's seconds per token-layer depend on more than its planned work: a calibration in block mode keeps
other sums than one in attn mode (6x faster on SmolLM2, bench/results/estimate_replay.md), one whose sums come
from the statistics cache reads shards instead of running the model (and the score stage then does the scoring
calibration would have done), an export to a quantized GGUF converts and quantizes where an f16 one only
converts, a fold output is saved and reloaded in another class than an nbl one, a GPTQ quantization runs
calibration blocks through the model where an FP8 one only rounds its weights. Each of those is its own
kind, and stage_rates keeps it beside the stage (migration 0013): the estimate reads the rows of the kind the
job will do (service/estimates/rates.py), the worker writes the kind the stage did (worker/rates.py). Before
this, a cache-hit calibration's 5 s was folded into the fresh calibration's rate and halved it each time.

`stats_cached`: at submit, what the class's notes say (nbl/sizing/reuse.py); at the end of a job, what the
calibration did. Pure.
"""

from __future__ import annotations

from nbl.outputs.gguf_formats import gguf_types
from nbl.recipe import Recipe

FRESH = "fresh"
CACHED = "cached"


def export_kind(recipe: Recipe) -> str:
    """The GGUF types a job exports, in one name (`gguf:Q4_K_M+gguf:f16`); '' when it exports none."""
    types = gguf_types(recipe.publishing.formats) if recipe.publishing is not None else ()
    return "+".join(f"gguf:{t}" for t in sorted(types))


def quantize_kind(recipe: Recipe) -> str:
    """The schemes a job quantizes with, in one name (`quant:w4a16+quant:w8a8`); '' when it quantizes none."""
    schemes = recipe.publishing.quantize if recipe.publishing is not None else ()
    return "+".join(f"quant:{s}" for s in sorted(set(schemes)))


def stage_kinds(recipe: Recipe, stats_cached: bool) -> dict[str, str]:
    """{stage: kind} for the stages whose cost depends on what they do; the others are kind ''."""
    comp = recipe.compression
    done_by = f"{CACHED if stats_cached else FRESH}/{comp.mode}"  # a block-mode calibration ran 6x faster here
    out = {
        "calibrate": done_by,
        "score": done_by,  # scoring runs inside a fresh calibration; after a cache hit it is the score stage's
        "compress": f"{comp.form}/{comp.mode}",
        "check": f"{comp.form}/{comp.mode}",
    }
    if kind := export_kind(recipe):
        out["export"] = kind
    if kind := quantize_kind(recipe):
        out["quantize"] = kind
    return out
