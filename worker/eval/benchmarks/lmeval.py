"""lm-eval's own tasks as Tasks: prompts rendered by lm-eval itself, scored by our scorer.

Serves task names when NBL_DATA_DIR is unset or names no shipped file, and the parity tests (which
point lm-eval's configs at the shipped files with `overrides`). lm-eval reads its datasets through
`datasets`; the Hub is never contacted here: offline mode is forced while tasks load, so data must
already be in the Hugging Face cache.

A group (mmlu) becomes one task over all its subtasks' documents: the mean over documents is
lm-eval's size-weighted group score. `limit` applies per subtask, as in lm-eval.

Multiple-input tasks (WinoGrande: one context per option, one shared continuation) keep lm-eval's
requests as they are: the gold option is lm-eval's doc_to_text (an index) and acc_norm, where a
task asks for it, divides by the options' lengths, as lm-eval's process_results does.
"""

from __future__ import annotations

import os
from collections import defaultdict
from contextlib import contextmanager
from functools import lru_cache

from . import local_data
from .task import LOGLIKELIHOOD, MULTIPLE_CHOICE, Doc, Task, multiple_input_doc

NUM_FEWSHOT = {"mmlu": 5}
FEWSHOT_SEED = 1234  # lm-eval's default fewshot_random_seed


class DataUnavailable(ValueError):
    """An lm-eval task whose dataset is not in the local Hugging Face cache (the Hub is never asked)."""


@contextmanager
def offline():
    """Hub offline mode for `datasets` and `huggingface_hub`, restored afterwards."""
    import datasets.config
    import huggingface_hub.constants

    saved_env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    targets = [
        (huggingface_hub.constants, "HF_HUB_OFFLINE"),
        (datasets.config, "HF_HUB_OFFLINE"),
        (datasets.config, "HF_DATASETS_OFFLINE"),
    ]
    saved = [getattr(mod, attr) for mod, attr in targets]
    os.environ.update({k: "1" for k in saved_env})
    for mod, attr in targets:
        setattr(mod, attr, True)
    try:
        yield
    finally:
        for (mod, attr), value in zip(targets, saved):
            setattr(mod, attr, value)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@lru_cache(maxsize=1)
def task_manager():
    try:
        from lm_eval.tasks import TaskManager
    except ImportError as e:  # pragma: no cover - lm-eval is in the worker extra
        raise ValueError(
            "lm-eval is not installed (pip install lm-eval); set NBL_DATA_DIR to use the shipped files"
        ) from e
    return TaskManager()


def leaf_config(name: str) -> dict:
    """The full config (includes resolved) of one lm-eval leaf task."""
    from lm_eval.tasks._yaml_loader import load_yaml

    entry = task_manager().task_index.get(name)
    if entry is None:
        raise ValueError(f"unknown task {name!r}: not a shipped task and not an lm-eval task")
    return dict(load_yaml(entry.yaml_path, resolve_func=True)) if entry.yaml_path else dict(entry.cfg)


def lmeval_task(
    name: str,
    limit: int | None = None,
    num_fewshot: int | None = None,
    overrides: dict[str, dict] | None = None,
) -> Task:
    """Task `name` (a task or group) as lm-eval builds its requests; `overrides` maps leaf task -> config
    keys to replace (e.g. dataset_path/dataset_kwargs pointing at local files)."""
    manager = task_manager()
    if name not in manager.task_index:
        raise ValueError(f"unknown task {name!r}: not a shipped task and not an lm-eval task")
    num_fewshot = NUM_FEWSHOT.get(name) if num_fewshot is None else num_fewshot
    spec = [{**leaf_config(leaf), **cfg} for leaf, cfg in overrides.items()] if overrides else name
    with offline():
        try:
            leaves = manager.load(spec)["tasks"]
        except (ConnectionError, OSError) as e:
            raise DataUnavailable(
                f"{name}: lm-eval's dataset is not in the local Hugging Face cache and the Hub is "
                "not contacted during evaluation; the shipped files under NBL_DATA_DIR cover "
                f"{', '.join(local_data.FILES)}, and {', '.join(local_data.OPTIONAL)} when there "
                f"({', '.join(local_data.OPTIONAL.values())}) ({e})"
            ) from e
        kinds, metrics, docs = set(), set(), []
        for leaf_name in sorted(leaves):
            kind, leaf_metrics, leaf_docs = _leaf_docs(leaves[leaf_name], limit, num_fewshot)
            kinds.add(kind)
            metrics.add(leaf_metrics)
            docs.extend(leaf_docs)
    if len(kinds) != 1 or len(metrics) != 1:
        raise ValueError(f"{name}: its subtasks mix output types or metrics; evaluate them one by one")
    return Task(name, kinds.pop(), tuple(docs), metrics.pop())


def _leaf_docs(task, limit: int | None, num_fewshot: int | None) -> tuple[str, tuple[str, ...], list[Doc]]:
    kind = task.OUTPUT_TYPE
    if kind not in (MULTIPLE_CHOICE, LOGLIKELIHOOD):
        raise ValueError(
            f"{task.config.task}: lm-eval output type {kind!r} is not scored here (multiple_choice, or loglikelihood)"
        )
    if num_fewshot is not None:
        task.set_config(key="num_fewshot", value=num_fewshot)
    task.set_fewshot_seed(seed=FEWSHOT_SEED)
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    by_doc = defaultdict(list)
    for inst in task.instances:
        by_doc[inst.doc_id].append(inst)
    docs = []
    for doc_id in sorted(by_doc):
        insts = sorted(by_doc[doc_id], key=lambda i: i.idx)
        context = insts[0].args[0]
        if kind == LOGLIKELIHOOD:
            target = insts[0].args[1]
            docs.append(Doc(context, (target,), 0, (len(target),)))
            continue
        choices = task.doc_to_choice(insts[0].doc)
        if task.multiple_input:  # options in the contexts, one continuation; gold = doc_to_text
            gold, cont = task.doc_to_text(insts[0].doc), insts[0].args[1]
            if any(i.args[1] != cont for i in insts) or not isinstance(gold, int):
                raise ValueError(
                    f"{task.config.task}: a multiple-input document needs one continuation and a gold index"
                )
            docs.append(multiple_input_doc([i.args[0] for i in insts], cont, gold, [len(c) for c in choices]))
            continue
        gold = task.doc_to_target(insts[0].doc)
        if isinstance(gold, str):
            gold = choices.index(gold)
        if not isinstance(gold, int):
            raise ValueError(f"{task.config.task}: several gold answers per document are not supported")
        docs.append(Doc(context, tuple(i.args[1] for i in insts), gold, tuple(len(c) for c in choices)))
    metrics = tuple(m for m in ("acc", "acc_norm") if any(x.get("metric") == m for x in task.config.metric_list))
    return kind, metrics, docs
