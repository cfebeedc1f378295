"""A job's result in one shape, as pure functions over plain dicts: the API's `result`
(service/jobs/views.py), `nbl eval --json` and `nbl compress --json` (worker/eval/report.py) all
build it here, so the three agree.

    {"calibration": {"tokens", "seconds", "cached"},
     "base": METRICS,
     "base_evaluation": {"cached", "seconds"}, "base_quantized": [QUANTIZED],
     "outputs": [{"k", "mode", "method", "criterion", "form", "runs_in", "layers", "dtype", "metrics", "delta", "relative",
                  "seconds", "refit", "heal", "quantized": [QUANTIZED]}]}   (QUANTIZED: nbl/quant_result.py)

    METRICS = {"perplexity": {name: {ppl, bits_per_byte, tokens}},
               "tasks": {name: {acc, acc_norm, n, ppl}},
               "speed": {prefill_tokens_per_s: {tokens: rate}, decode_tokens_per_s, ...} | None,
               "params": {params, non_embedding_params} | None}

delta = model - base, relative = (model - base) / |base| for every number both have (else null); JSON has no NaN
or Infinity: `finite` makes them null, so a value not measured reads as unknown, never as a parse error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from nbl.outputs.forms import FORM, runs_in
from nbl.quant_result import QUANTIZATION, copies

PERPLEXITY_KEYS = ("ppl", "bits_per_byte", "tokens")
TASK_KEYS = ("acc", "acc_norm", "n", "ppl")
PARAM_KEYS = ("params", "non_embedding_params")
SPEED_KEYS = (
    *("prefill_tokens_per_s", "decode_tokens_per_s", "decode_context", "new_tokens", "kv_cache_bytes_per_token"),
    *("kv_cache_layers", "params", "non_embedding_params", "base_non_embedding_params", "sparsity", "repeats"),
    *("threads", "device", "dtype"),
)
CALIBRATION_KEYS = ("tokens", "seconds", "cached")
CALIBRATION = "calibration"  # the stored variant of the calibration's facts {"tokens", "seconds", "cached"}
BASE_EVALUATION = "base_evaluation"  # the stored variant of the base's evaluation facts {"cached", "seconds"}
EVALUATION_SECONDS = "evaluation_seconds"  # the stored variant {"k4": seconds of its reload and evaluation}
REFINE = "refine"  # the stored variant {"k4/refit/seconds": ..., "k4/heal/perplexity_after": ...}
REFINE_KEYS = {
    "refit": ("seconds", "cached"),
    "heal": (
        "tokens",
        "steps",
        "lr",
        "seconds",
        "perplexity_before",
        "perplexity_after",
        "guard_perplexity_before",
        "guard_perplexity_after",
        "kept",
    ),
}


def finite(node: Any) -> Any:
    """`node` with every NaN and +-inf replaced by None, through dicts, lists and tuples."""
    if isinstance(node, float):
        return node if math.isfinite(node) else None
    if isinstance(node, Mapping):
        return {k: finite(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [finite(v) for v in node]
    return node


def _number(x: Any) -> int | float | None:
    """A whole float from the store (245000.0) as an int, so counts read as counts."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, float) and not math.isfinite(x)):
        return None
    return int(x) if isinstance(x, float) and x.is_integer() and abs(x) < 2**53 else x


def _dict(x: Any) -> dict:
    return x if isinstance(x, dict) else {}


def metrics_of(result: Mapping[str, Any]) -> dict:
    """The nested metrics of one evaluation result (worker/eval/evaluate.py's dict)."""
    return finite(
        {
            "perplexity": {
                name: {m: r.get(m) for m in PERPLEXITY_KEYS} for name, r in (result.get("perplexity") or {}).items()
            },
            "tasks": {name: {m: r.get(m) for m in TASK_KEYS} for name, r in (result.get("tasks") or {}).items()},
            "speed": {m: result["speed"].get(m) for m in SPEED_KEYS} if result.get("speed") else None,
            "params": {m: result["params"].get(m) for m in PARAM_KEYS} if result.get("params") else None,
        }
    )


def nest(flat: Mapping[str, Any] | None) -> dict | None:
    """The stored flat names (worker/pipeline.py flatten: perplexity/wikitext2/ppl, tasks/arc_easy/acc,
    speed/prefill_tokens_per_s/512, params/params) as the nested metrics; None when nothing is stored."""
    if not flat:
        return None
    tree: dict = {}
    for name, value in flat.items():
        *path, leaf = str(name).split("/")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            if not isinstance(node.get(leaf), dict):  # a name that is also a prefix keeps its children
                node[leaf] = value

    def family(name: str, keys: tuple[str, ...]) -> dict:
        return {
            n: {m: _number(r.get(m)) for m in keys} for n, r in _dict(tree.get(name)).items() if isinstance(r, dict)
        }

    speed, params = _dict(tree.get("speed")), _dict(tree.get("params"))
    out = {
        "perplexity": family("perplexity", PERPLEXITY_KEYS),
        "tasks": family("tasks", TASK_KEYS),
        "speed": None,
        "params": {m: _number(params.get(m)) for m in PARAM_KEYS} if params else None,
    }
    if speed:
        out["speed"] = {m: _number(speed.get(m)) for m in SPEED_KEYS}
        prefill = _dict(speed.get("prefill_tokens_per_s"))
        out["speed"]["prefill_tokens_per_s"] = {t: _number(v) for t, v in prefill.items()} or None
    return out


def _walk(model: Any, base: Any, op) -> Any:
    if isinstance(model, Mapping):
        b = base if isinstance(base, Mapping) else {}
        return {k: _walk(v, b.get(k), op) for k, v in model.items()}
    if isinstance(model, bool) or isinstance(base, bool):
        return None
    if isinstance(model, (int, float)) and isinstance(base, (int, float)):
        return finite(op(model, base))
    return None


def delta(model: Mapping | None, base: Mapping | None) -> dict | None:
    """model - base, in the shape of `model`; None when either is missing."""
    if model is None or base is None:
        return None
    return _walk(model, base, lambda m, b: m - b)


def relative(model: Mapping | None, base: Mapping | None) -> dict | None:
    """(model - base) / |base| (0.05 = 5 % higher), in the shape of `model`; a base of 0 gives None."""
    if model is None or base is None:
        return None
    return _walk(model, base, lambda m, b: (m - b) / abs(b) if b else None)


def refine_flat(outputs: Iterable[Mapping]) -> dict[str, float]:
    """The engine's outputs' refit and heal records (worker/engine/refine/stage.py) as the stored flat variant."""
    flat = {}
    for o in outputs:
        for part, keys in REFINE_KEYS.items():
            rec = o.get(part) or {}
            flat.update({f"k{o['k']}/{part}/{key}": float(rec[key]) for key in keys if rec.get(key) is not None})
    return flat


def refine_of(flat: Mapping[str, Any] | None, k: int) -> dict:
    """{"refit": {...} | None, "heal": {...} | None} of output k from the stored flat variant."""
    out = {}
    for part, keys in REFINE_KEYS.items():
        got = {key: _dict(flat).get(f"k{k}/{part}/{key}") for key in keys}
        out[part] = None if all(v is None for v in got.values()) else _facts(got)
    return out


def _facts(rec: Mapping[str, Any]) -> dict:
    return {
        key: (None if v is None else bool(v))
        if key in ("cached", "kept")
        else finite(v)
        if key in ("lr", "seconds") or "perplexity" in key
        else _number(v)
        for key, v in rec.items()
    }


def output_entry(
    k: int,
    mode: str | None,
    method: str | None,
    criterion: str | None,
    layers: list[int] | None,
    metrics: Mapping | None,
    base: Mapping | None,
    form: str | None = None,
    seconds: float | None = None,
    refine: Mapping | None = None,
    family: str | None = None,
    dtype: str | None = None,
) -> dict:
    """One output's entry; `form` None is nbl (a request without one), runs_in from nbl/outputs/forms.py's table;
    `seconds` its reload and evaluation; `refine` {"refit", "heal"} (refine_of) or the engine's records."""
    form = form or FORM
    refine = refine or {}
    return {
        "k": k,
        "mode": mode,
        "method": method,
        "criterion": criterion,
        "form": form,
        "runs_in": runs_in(form, mode, method, family),
        "layers": layers,
        "dtype": dtype,  # the saved weights'; null where none were saved
        "metrics": metrics,
        "delta": delta(metrics, base),
        "relative": relative(metrics, base),
        "seconds": finite(seconds),
        **{
            part: None if not refine.get(part) else _facts({key: refine[part].get(key) for key in keys})
            for part, keys in REFINE_KEYS.items()
        },
    }


def calibration_of(facts: Mapping[str, Any] | None) -> dict | None:
    """{"tokens", "seconds", "cached"} from the engine's calibration report or the stored variant
    (cached stored as 1.0/0.0); None when unknown."""
    if not facts:
        return None
    cached = facts.get("cached")
    return {
        "tokens": _number(facts.get("tokens")),
        "seconds": finite(facts.get("seconds")),
        "cached": None if cached is None else bool(cached),
    }


def base_evaluation_of(facts: Mapping[str, Any] | None) -> dict | None:
    """{"cached", "seconds"} of the base's evaluation (cached stored as 1.0/0.0); None when not stored."""
    if not facts:
        return None
    cached = facts.get("cached")
    return {"cached": None if cached is None else bool(cached), "seconds": finite(facts.get("seconds"))}


def job_result(
    spec: Mapping[str, Any], selected: Iterable[Mapping] | None, metrics: Mapping[str, Mapping[str, Any]] | None
) -> dict:
    """The API's result from a job's stored rows: its request (the ks, mode, method, criterion), the
    selected layers [{"k", "mode", "layers"}] and the flat metrics by variant ("calibration", "base",
    "k4", ...). Anything not stored yet (a queued job, an older row) is null."""
    comp = spec.get("compression") or {}
    ks = comp.get("k")
    ks = [ks] if isinstance(ks, int) else list(ks) if isinstance(ks, list) else []  # "auto": the k it found, below
    chosen = {int(s["k"]): s for s in selected or [] if isinstance(s, Mapping) and "k" in s}
    ks += [k for k in sorted(chosen) if k not in ks]
    row = {k: chosen.get(k) or {} for k in ks}  # each output's selection row: mode, layers, family, dtype
    metrics = metrics or {}
    ev = spec.get("evaluation") or {}
    order = {"perplexity": list(ev.get("perplexity") or []), "tasks": list(ev.get("tasks") or [])}

    def nested(variant: str) -> dict | None:  # in the order the request named them (the store sorts by name)
        m = nest(metrics.get(variant))
        for family, names in order.items():
            if m is not None and names:
                rank = {n: i for i, n in enumerate(names)}
                m[family] = dict(sorted(m[family].items(), key=lambda kv: rank.get(kv[0], len(rank))))
        return m

    base = nested("base")
    quant = lambda who, done=None: copies(who, metrics.get(QUANTIZATION), metrics, nested, base, delta, relative, done)  # noqa: E731
    return {
        "calibration": calibration_of(metrics.get("calibration")),
        "base": base,
        "base_evaluation": base_evaluation_of(metrics.get(BASE_EVALUATION)),
        "base_quantized": [{**c, "path": None} for c in quant("base")],  # publish.quantize's comparison, unpublished
        "outputs": [
            output_entry(
                k,
                row[k].get("mode", comp.get("mode")),
                comp.get("method"),
                row[k].get("criterion") or comp.get("criterion"),
                row[k].get("layers"),
                nested(f"k{k}"),
                base,
                comp.get("form"),
                _dict(metrics.get(EVALUATION_SECONDS)).get(f"k{k}"),
                refine_of(metrics.get(REFINE), k),
                row[k].get("family"),
                row[k].get("dtype"),
            )
            | {"quantized": quant(f"k{k}", row[k].get("quantized"))}
            for k in ks
        ],
    }
