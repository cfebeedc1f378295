"""Base vs compressed: the base model evaluated once (cached per model and spec, and looked up in the cache
before its weights are loaded: a cached base is never read from disk), then every output
reloaded from disk, as users will load it, in the base's dtype and on its device; each one larger than
the run's first device spread over its devices with device_map="auto" (engine/placement.py).

Shared by the job pipeline (which stores each result as it comes, through `on_result`) and by
`nbl compress --eval` (which prints and returns them).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..engine.loading.load import load_weights, release_weights
from ..engine.placement import input_device, max_memory_for
from .compressed import load_compressed
from .evaluate import EvalSpec, evaluate_cached, evaluate_model


def _noop(*args) -> None:
    pass


def evaluate_outputs(
    lm,
    outputs: dict[int, Path],
    spec: EvalSpec,
    *,
    use_cache: bool = True,
    progress: bool = False,
    report: Callable[[str, float, str], None] = _noop,
    on_result: Callable[[str, dict], None] = _noop,
    data_dir: Path | None = None,
    home: Path | None = None,
    devices: list[str] | None = None,
    extra: dict[str, Path] | None = None,
) -> tuple[dict, dict[int, dict]]:
    """(base result, {k: output result}); `on_result(variant, result)` sees "base", then "k{K}" each, then each
    of `extra` by its name (the quantized outputs and bases: "k4+w4a16", "base+w4a16", loaded the same way).
    `data_dir`: the shipped data sets; `home`: where the base's result is cached (evaluate.py); `devices`:
    the run's devices (a base not loaded yet, lm.model None, is loaded over them too)."""
    extra = extra or {}

    def load() -> None:
        load_weights(lm, max_memory_for(lm.path, devices))

    parts = [len(outputs) + len(extra) + 1]  # the stage's models; a cached base takes none of its time

    def within(j: int, what: str) -> Callable[[float], None]:  # model j of the stage's, a fraction of its evaluation
        return lambda f: report("evaluate", (j + f) / parts[0], what)

    report("evaluate", 0.0, "evaluating the base model")
    base = evaluate_cached(
        lm,
        spec,
        use_cache=use_cache,
        progress=progress,
        data_dir=data_dir,
        home=home,
        on_progress=within(0, "evaluating the base model"),
        devices=devices,
        load=load,
    )
    if base.get("cached"):
        parts[0] = max(
            1, len(outputs) + len(extra)
        )  # the outputs make the whole stage now: output j is model j - 1 of it
        report("evaluate", 0.0, "the base model's evaluation reused from the cache (same model and evaluation)")
    on_result("base", base)
    first = 0 if base.get("cached") else 1
    dtype = lm.model.dtype if lm.model is not None else lm.dtype
    device = devices[0] if devices else str(input_device(lm.model)) if lm.model is not None else lm.device
    release_weights(lm)  # the base leaves the devices before each output is placed on them
    results: dict[int | str, dict] = {}
    named = [(k, f"k{k}", f"k={k}", path) for k, path in outputs.items()]
    named += [(name, name, name, path) for name, path in extra.items()]
    for j, (k, variant, label, path) in enumerate(named, start=first):
        what = f"evaluating {label} from {Path(path).name}"
        report("evaluate", j / parts[0], what)
        started = time.monotonic()
        out = load_compressed(path, dtype, device, home, max_memory_for(path, devices))
        results[k] = evaluate_model(
            out,
            spec,
            base_non_embedding=base["params"]["non_embedding_params"],
            progress=progress,
            data_dir=data_dir,
            on_progress=within(j, what),
        )
        results[k]["seconds"] = time.monotonic() - started  # reload and evaluation: the JUnit case's time
        del out  # one compressed copy in memory at a time
        on_result(variant, results[k])
    report("evaluate", 1.0, "evaluated")
    return base, results
