"""Evaluate one model: perplexity, tasks, speed; and the cache that spares re-evaluating a base.

A result is {"model", "params", "perplexity", "tasks", "speed", "seconds"}, and "suite" when a
suite was asked for (benchmarks/suite.py: its average, and the tasks skipped because their data is
absent). The base model of a comparison is evaluated once per (fingerprint, evaluation spec,
hardware): its result is kept as JSON under `home`/evals/<key>.json (the caller's NBL_HOME); the key
hashes the model fingerprint, everything that changes the numbers (corpora, token cap, tasks, suite,
task-file contents, data directory, limit, speed settings, dtype, the tokenizer's prefix when it has
one) and, when speed is measured, the device and thread count.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..engine.placement import input_device
from ..engine.text_prefix import text_prefix
from .benchmarks.lmeval import DataUnavailable
from .benchmarks.local_data import OPTIONAL, present
from .benchmarks.registry import load_task
from .benchmarks.suite import ABSENT, suite_tasks, summary
from .benchmarks.task_file import load_task_file
from .harness import run_task
from .perplexity import corpus_text, perplexity
from .speed import count_parameters, measure_speed
from .steps import Steps, beating, part_weights

log = logging.getLogger(__name__)
CACHE_VERSION = 1  # bump when a change of this package changes the numbers


@dataclass(frozen=True)
class EvalSpec:
    perplexity: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    task_files: tuple[str, ...] = ()
    limit: int | None = None
    max_tokens: int | None = None
    suite: str | None = None  # a task suite (benchmarks/suite.py): its tasks whose data is here, and their average
    speed: bool = False
    speed_lengths: tuple[int, ...] = (512, 2048)
    new_tokens: int = 128
    repeats: int = 3
    batch_tokens: int = field(default=2048, compare=False)  # changes batching, not the numbers

    def empty(self) -> bool:
        return not (self.perplexity or self.tasks or self.task_files or self.suite or self.speed)

    def suite_only(self) -> tuple[str, ...]:
        """The suite's tasks not also asked for by name: skipped, not refused, when their data is absent."""
        return tuple(t for t in suite_tasks(self.suite) if t not in self.tasks) if self.suite else ()


def evaluate_model(
    lm,
    spec: EvalSpec,
    base_non_embedding: int | None = None,
    progress: bool = True,
    data_dir: Path | None = None,
    on_progress: Callable[[float], None] | None = None,
) -> dict:
    """Every evaluation `spec` asks for, on a loaded model (LoadedModel from load_for_eval); named corpora
    and tasks read the shipped files under `data_dir` (Settings.data_dir) when given. `on_progress(fraction)`
    is called before every decoder layer's forward and after every window or batch (steps.py); it may
    raise to cancel. The speed runs go without it, so that nothing but the model is timed."""
    model, tok = lm.model, lm.tokenizer
    steps = Steps(part_weights(spec), on_progress)
    parts = iter(range(len(steps.weights)))
    result = {
        "model": {
            "source": lm.source,
            "fingerprint": lm.fingerprint,
            "family": lm.family,
            "nbl": getattr(model.config, "nbl", None),
        },
        "params": count_parameters(model),
        "perplexity": {},
        "tasks": {},
        "speed": None,
        "seconds": {},
    }
    for name in spec.perplexity:
        start = time.perf_counter()
        text = corpus_text(name, data_dir)
        with beating(model, on_progress and steps.beat):
            result["perplexity"][name] = perplexity(
                model, tok, text, max_tokens=spec.max_tokens, progress=progress, on_window=steps.part(next(parts))
            )
        result["seconds"][f"perplexity/{name}"] = time.perf_counter() - start
    tasks = [(None, lambda n=n: load_task(n, spec.limit, data_dir)) for n in spec.tasks]
    tasks += [(n, lambda n=n: load_task(n, spec.limit, data_dir)) for n in spec.suite_only()]
    tasks += [(None, lambda f=f: load_task_file(f, spec.limit)) for f in spec.task_files]
    skipped: dict[str, str] = {}
    for optional, build in tasks:
        start = time.perf_counter()
        tick = steps.part(next(parts))
        try:
            task = build()
        except DataUnavailable:
            if optional is None:
                raise
            log.warning("suite %s: %s skipped (%s)", spec.suite, optional, ABSENT)
            skipped[optional] = ABSENT
            continue
        if task.name in result["tasks"]:
            raise ValueError(f"two tasks report under the name {task.name!r}")
        with beating(model, on_progress and steps.beat):
            result["tasks"][task.name] = run_task(model, tok, task, spec.batch_tokens, progress, on_batch=tick)
        result["seconds"][f"task/{task.name}"] = time.perf_counter() - start
    if spec.suite:
        result["suite"] = summary(spec.suite, result["tasks"], skipped)
        if not result["suite"]["tasks_run"]:  # an average of nothing is no answer: say what is missing
            raise ValueError(
                f"suite {spec.suite}: no task has its data here ({', '.join(skipped)}); set "
                "NBL_DATA_DIR to the shipped files or fill the Hugging Face cache"
            )
    if spec.speed:
        steps.part(next(parts))
        start = time.perf_counter()
        result["speed"] = measure_speed(
            model,
            spec.speed_lengths,
            spec.new_tokens,
            repeats=spec.repeats,
            base_non_embedding=base_non_embedding,
            prefix=text_prefix(tok),
        )
        result["seconds"]["speed"] = time.perf_counter() - start
    steps.finish()
    return result


def check_tasks(spec: EvalSpec, data_dir: Path | None = None) -> None:
    """Build every task the spec names, on its first document, before a job spends hours calibrating:
    a task whose data is not here fails the job at once, naming every such task. (A suite's own tasks
    are skipped when absent, so they are not checked.)"""
    missing = []
    for name in spec.tasks:
        try:
            load_task(name, 1, data_dir)
        except DataUnavailable as e:
            missing.append(str(e))
    for f in spec.task_files:
        load_task_file(f, 1)
    if missing:  # raised outside the except: no offline ConnectionError in its chain, so `user`, not retried
        raise DataUnavailable("; ".join(missing))


# --- the base model's cache ---------------------------------------------------------------------
def evals_dir(home: Path) -> Path:
    return Path(home) / "evals"


def cache_key(
    fingerprint: str,
    spec: EvalSpec,
    dtype: str,
    device: str,
    data_dir: Path | None = None,
    prefix: tuple[int, ...] = (),
) -> str:
    d = asdict(spec)
    d.pop("batch_tokens")
    d["task_files"] = [
        [Path(f).stem, hashlib.sha256(Path(f).expanduser().read_bytes()).hexdigest()] for f in spec.task_files
    ]
    d["data_dir"] = str(data_dir) if data_dir else None  # other files, other numbers
    extra = [n for n in OPTIONAL if present(n, data_dir)]  # a file added there later: a suite no longer skips it
    if extra:
        d["optional"] = extra
    if prefix:  # windows open with the tokenizer's prefix (perplexity.py); a tokenizer adding none keeps its keys
        d["prefix"] = list(prefix)
    hardware = None
    if spec.speed:
        hardware = [
            device,
            torch.get_num_threads(),
            torch.cuda.get_device_name(device) if device.startswith("cuda") else None,
        ]
    blob = json.dumps(
        {"v": CACHE_VERSION, "model": fingerprint, "spec": d, "dtype": dtype, "hardware": hardware}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cached(home: Path, key: str) -> dict | None:
    try:
        return json.loads((evals_dir(home) / f"{key}.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def store(home: Path, key: str, result: dict) -> None:
    path = evals_dir(home) / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=2))
    tmp.replace(path)


def placed_as(lm, devices: list[str] | None = None) -> tuple[str, str]:
    """(dtype, device) of the base in its cache key: where its weights are, or, not loaded yet (lm.model
    None), where load_weights will put them (the run's first device, else lm.device, as "cuda:0" not
    "cuda", which is what a loaded model reports), so the cache is asked before any weight is read."""
    if lm.model is not None:
        return str(lm.model.dtype).removeprefix("torch."), str(input_device(lm.model))
    device = torch.device(devices[0] if devices else lm.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return str(lm.dtype).removeprefix("torch."), str(device)


def evaluate_cached(
    lm,
    spec: EvalSpec,
    use_cache: bool = True,
    progress: bool = True,
    data_dir: Path | None = None,
    home: Path | None = None,
    on_progress: Callable[[float], None] | None = None,
    devices: list[str] | None = None,
    load: Callable[[], None] | None = None,
) -> dict:
    """evaluate_model, read from / written to the cache under `home` (Settings.home; None: no cache);
    `result["cached"]` says which, `result["seconds"]` how long this call took. The key is the model's
    content fingerprint and the evaluation spec (with dtype, device and data), nothing of the job's or
    team's: every job of the worker's home on the same base and spec reuses it. A base whose weights are
    not loaded (lm.model None) is looked up where they would go (placed_as, over `devices`) and `load()`
    is called only on a miss: a cached base is never read from disk."""
    started = time.monotonic()
    if lm.model is None and (lm.dtype is None or load is None):
        if load is None:
            raise ValueError("a base with no weights loaded needs `load` to evaluate it")
        load()  # no dtype to key it by before loading
    dtype, device = placed_as(lm, devices)
    key = cache_key(lm.fingerprint, spec, dtype, device, data_dir, text_prefix(lm.tokenizer))
    use_cache = use_cache and home is not None
    hit = cached(home, key) if use_cache else None
    if hit is not None:
        log.info("base evaluation read from the cache (%s)", key)
        return {**hit, "cached": True, "seconds": time.monotonic() - started}
    if lm.model is None:
        load()
    own = count_parameters(lm.model)["non_embedding_params"]  # a base is its own base: sparsity 0
    result = evaluate_model(
        lm, spec, base_non_embedding=own, progress=progress, data_dir=data_dir, on_progress=on_progress
    )
    if use_cache:
        store(home, key, result)
    return {**result, "cached": False, "seconds": time.monotonic() - started}
