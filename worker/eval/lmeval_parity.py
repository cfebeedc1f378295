"""Check our tasks against lm-eval itself, on the shipped files.

lm-eval's own task configs are pointed at the local data (its `dataset_path: json` +
`dataset_kwargs.data_files` mechanism) after mapping each file to the Hub schema, then
- `compare_prompts`: every (context, continuation, label, choice length) lm-eval builds must equal ours;
- `compare_scores`: lm-eval's own evaluation (HFLM, simple_evaluate) and ours must give the same
  acc / acc_norm, and per-request log-likelihoods equal to float tolerance;
- `compare_lmeval_task_scores`, `compare_task_file_scores`: the same for one of lm-eval's own tasks
  read from the Hugging Face cache (WinoGrande's multiple inputs) and for a user's task file, which
  lm-eval reads through a config built here (task_file_config).

    python -m worker.eval.lmeval_parity --model MODEL --task arc_easy --limit 50
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from .benchmarks import local_data
from .benchmarks.lmeval import NUM_FEWSHOT, leaf_config, lmeval_task, offline, task_manager
from .benchmarks.registry import SHIPPED, local_task
from .benchmarks.task import Task
from .benchmarks.task_file import CHOICES, CONTEXTS, METRICS, load_task_file
from .harness import run_task
from .loglikelihood import loglikelihoods

SPLIT = {"hellaswag": "validation", "boolq": "validation", "piqa": "validation", "winogrande": "validation"}


def _write(path: Path, docs: list[dict]) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


def _local(files: dict[str, str], eval_split: str = "test") -> dict:
    return {
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": files},
        "training_split": None,
        "validation_split": "validation" if eval_split == "validation" else None,
        "test_split": eval_split if eval_split == "test" else None,
    }


def lmeval_overrides(name: str, root: Path, tmp: Path) -> dict[str, dict]:
    """leaf task -> config keys that make lm-eval read `name` from the shipped files."""
    if name == "mmlu":
        out = {}
        for subject in local_data.mmlu_subjects(root):
            files = {
                s: _write(tmp / f"{subject}_{s}.jsonl", local_data.read_mmlu(root, subject, s)) for s in ("test", "dev")
            }
            out[f"mmlu_{subject}"] = {**_local(files), "fewshot_split": "dev"}
        return out
    split = SPLIT.get(name, "test")
    return {name: _local({split: _write(tmp / f"{name}.jsonl", local_data.read_docs(name, root))}, split)}


def compare_prompts(name: str, root: Path, limit: int | None = None) -> list[tuple[int, object, object]]:
    """(index, ours, lm-eval's) for every document where the two differ; [] when identical. `root`: the
    shipped data sets (NBL_DATA_DIR)."""
    ours = local_task(name, root, limit)
    with tempfile.TemporaryDirectory() as tmp:
        theirs = lmeval_task(name, limit, overrides=lmeval_overrides(name, root, Path(tmp)))
    if (ours.kind, ours.metrics) != (theirs.kind, theirs.metrics):
        return [(-1, (ours.kind, ours.metrics), (theirs.kind, theirs.metrics))]
    diffs = [(i, a, b) for i, (a, b) in enumerate(zip(ours.docs, theirs.docs)) if a != b]
    if len(ours.docs) != len(theirs.docs):
        diffs.append((-1, len(ours.docs), len(theirs.docs)))
    return diffs


def lmeval_results(
    model,
    tokenizer,
    tasks: list,
    leaves: list[str],
    limit: int | None,
    num_fewshot: int | None = None,
    batch_size: int = 8,
) -> tuple[dict, list[float]]:
    """lm-eval's own evaluation (HFLM, simple_evaluate) of `tasks` (names or configs): acc / acc_norm
    over the documents of `leaves` (None where lm-eval does not report it), and the log-likelihood of
    every request, subtasks by name, documents by index, requests in option order (our order)."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    with offline():
        res = simple_evaluate(
            model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size),
            tasks=tasks,
            limit=limit,
            num_fewshot=num_fewshot,
            task_manager=task_manager(),
            bootstrap_iters=0,
            log_samples=True,
        )
    samples = [s for leaf in sorted(leaves) for s in sorted(res["samples"][leaf], key=lambda s: s["doc_id"])]
    lls = [r[0][0] for s in samples for r in s["resps"]]
    metrics = {m: (sum(s[m] for s in samples) / len(samples) if m in samples[0] else None) for m in ("acc", "acc_norm")}
    return metrics, lls


def side_by_side(model, tokenizer, task: Task, theirs: dict, their_lls: list[float]) -> dict:
    """Our numbers on `task` next to lm-eval's."""
    ours = run_task(model, tokenizer, task)
    our_lls = [ll for ll, _ in loglikelihoods(model, tokenizer, [p for d in task.docs for p in d.pairs()])]
    same = len(our_lls) == len(their_lls)
    return {
        "task": task.name,
        "documents": len(task.docs),
        "lm_eval": theirs,
        "ours": {m: ours[m] for m in ("acc", "acc_norm")},
        "requests": len(our_lls),
        "max_abs_ll_diff": max(abs(a - b) for a, b in zip(our_lls, their_lls)) if same else None,
    }


def compare_scores(model, tokenizer, name: str, limit: int, root: Path, batch_size: int = 8) -> dict:
    """lm-eval's end-to-end numbers next to ours on the first `limit` documents of a shipped task
    (of each subject, for mmlu, 5-shot), read under `root` (the shipped data sets, NBL_DATA_DIR)."""
    if not local_data.present(name, root):
        raise ValueError(
            f"compare_scores takes a task whose data is under {root}: {', '.join(SHIPPED)}, or "
            f"{', '.join(local_data.OPTIONAL)} when there"
        )
    with tempfile.TemporaryDirectory() as tmp:
        overrides = lmeval_overrides(name, root, Path(tmp))
        configs = [{**leaf_config(leaf), **cfg} for leaf, cfg in overrides.items()]
        theirs, lls = lmeval_results(
            model, tokenizer, configs, list(overrides), limit, NUM_FEWSHOT.get(name), batch_size
        )
    return {**side_by_side(model, tokenizer, local_task(name, root, limit), theirs, lls), "limit": limit}


def compare_lmeval_task_scores(model, tokenizer, name: str, limit: int | None = None, batch_size: int = 8) -> dict:
    """lm-eval's numbers next to ours on lm-eval's own task `name` (one leaf, e.g. winogrande), read
    from the local Hugging Face cache."""
    task = lmeval_task(name, limit)
    theirs, lls = lmeval_results(model, tokenizer, [name], [name], limit, NUM_FEWSHOT.get(name), batch_size)
    return side_by_side(model, tokenizer, task, theirs, lls)


def task_file_config(path: Path, form: str) -> dict:
    """An lm-eval task config that reads a task file as lm-eval would score its records: a choices
    file as multiple_choice with the choices as continuations, a contexts file as multiple_input
    (doc_to_text an index, doc_to_choice the contexts); no delimiter, the file's strings as given."""
    fields = (
        {"doc_to_text": "context", "doc_to_choice": "choices", "doc_to_target": "label"}
        if form == CHOICES
        else {"doc_to_text": "label", "doc_to_choice": "contexts", "doc_to_target": "continuation"}
    )
    return {
        "task": path.stem,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(path)}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "target_delimiter": "",
        **fields,
        "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True} for m in METRICS[form]],
    }


def compare_task_file_scores(model, tokenizer, path: str | Path, batch_size: int = 8) -> dict:
    """lm-eval's numbers next to ours on a task file (either form), every record."""
    path = Path(path)
    task = load_task_file(path)
    form = CONTEXTS if task.docs[0].contexts else CHOICES
    theirs, lls = lmeval_results(model, tokenizer, [task_file_config(path, form)], [path.stem], None, 0, batch_size)
    return side_by_side(model, tokenizer, task, theirs, lls)


def main(argv: list[str] | None = None) -> int:
    import argparse

    from service.core.settings import Settings

    from ..engine.loading.load import load_model

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--task", default="arc_easy")
    p.add_argument("--limit", type=int, default=50)
    args = p.parse_args(argv)
    settings = Settings()
    if settings.data_dir is None:
        raise SystemExit("set NBL_DATA_DIR to the shipped data sets")
    lm = load_model(args.model, models_dir=settings.models_dir, home=settings.home)
    print(json.dumps(compare_scores(lm.model, lm.tokenizer, args.task, args.limit, settings.data_dir), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
