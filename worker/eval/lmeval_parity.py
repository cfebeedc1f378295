"""Check our tasks against lm-eval itself, on the shipped files.

lm-eval's own task configs are pointed at the local data (its `dataset_path: json` +
`dataset_kwargs.data_files` mechanism) after mapping each file to the Hub schema, then
- `compare_prompts`: every (context, continuation, label, choice length) lm-eval builds must equal ours;
- `compare_scores`: lm-eval's own evaluation (HFLM, simple_evaluate) and ours must give the same
  acc / acc_norm, and per-request log-likelihoods equal to float tolerance.

    python -m worker.eval.lmeval_parity --model MODEL --task arc_easy --limit 50
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from . import local_data
from .harness import run_task
from .lmeval_tasks import NUM_FEWSHOT, leaf_config, lmeval_task, offline, task_manager
from .loglikelihood import loglikelihoods
from .tasks import SHIPPED, local_task

SPLIT = {"hellaswag": "validation", "boolq": "validation"}  # lm-eval evaluates these on validation


def _write(path: Path, docs: list[dict]) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


def _local(files: dict[str, str], eval_split: str = "test") -> dict:
    return {"dataset_path": "json", "dataset_name": None, "dataset_kwargs": {"data_files": files},
            "training_split": None, "validation_split": "validation" if eval_split == "validation" else None,
            "test_split": eval_split if eval_split == "test" else None}


def lmeval_overrides(name: str, root: Path, tmp: Path) -> dict[str, dict]:
    """leaf task -> config keys that make lm-eval read `name` from the shipped files."""
    if name == "mmlu":
        out = {}
        for subject in local_data.mmlu_subjects(root):
            files = {s: _write(tmp / f"{subject}_{s}.jsonl", local_data.read_mmlu(root, subject, s))
                     for s in ("test", "dev")}
            out[f"mmlu_{subject}"] = {**_local(files), "fewshot_split": "dev"}
        return out
    split = SPLIT.get(name, "test")
    return {name: _local({split: _write(tmp / f"{name}.jsonl", local_data.read_docs(name, root))}, split)}


def compare_prompts(name: str, limit: int | None = None, root: Path | None = None) -> list[tuple[int, object, object]]:
    """(index, ours, lm-eval's) for every document where the two differ; [] when identical."""
    root = root or local_data.data_dir()
    ours = local_task(name, root, limit)
    with tempfile.TemporaryDirectory() as tmp:
        theirs = lmeval_task(name, limit, overrides=lmeval_overrides(name, root, Path(tmp)))
    if (ours.kind, ours.metrics) != (theirs.kind, theirs.metrics):
        return [(-1, (ours.kind, ours.metrics), (theirs.kind, theirs.metrics))]
    diffs = [(i, a, b) for i, (a, b) in enumerate(zip(ours.docs, theirs.docs)) if a != b]
    if len(ours.docs) != len(theirs.docs):
        diffs.append((-1, len(ours.docs), len(theirs.docs)))
    return diffs


def compare_scores(model, tokenizer, name: str, limit: int, root: Path | None = None, batch_size: int = 8) -> dict:
    """lm-eval's end-to-end numbers next to ours on the first `limit` documents of a shipped task
    (of each subject, for mmlu, 5-shot)."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    if name not in SHIPPED:
        raise ValueError(f"compare_scores takes a shipped task: {', '.join(SHIPPED)}")
    root = root or local_data.data_dir()
    with tempfile.TemporaryDirectory() as tmp:
        overrides = lmeval_overrides(name, root, Path(tmp))
        with offline():
            res = simple_evaluate(
                model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size),
                tasks=[{**leaf_config(leaf), **cfg} for leaf, cfg in overrides.items()], limit=limit,
                num_fewshot=NUM_FEWSHOT.get(name), task_manager=task_manager(), bootstrap_iters=0, log_samples=True,
            )
    # per-document samples in our order: subtasks by name, documents by index
    samples = [s for leaf in sorted(overrides) for s in sorted(res["samples"][leaf], key=lambda s: s["doc_id"])]
    their_lls = [r[0][0] for s in samples for r in s["resps"]]
    theirs = {m: (sum(s[m] for s in samples) / len(samples) if m in samples[0] else None) for m in ("acc", "acc_norm")}

    task = local_task(name, root, limit)
    ours = run_task(model, tokenizer, task)
    pairs = [(d.context, c) for d in task.docs for c in d.continuations]
    our_lls = [ll for ll, _ in loglikelihoods(model, tokenizer, pairs)]
    same = len(our_lls) == len(their_lls)
    return {
        "task": name, "limit": limit,
        "lm_eval": theirs,
        "ours": {m: ours[m] for m in ("acc", "acc_norm")},
        "requests": len(our_lls),
        "max_abs_ll_diff": max(abs(a - b) for a, b in zip(our_lls, their_lls)) if same else None,
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    from ..engine.loading import load_model

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--task", default="arc_easy")
    p.add_argument("--limit", type=int, default=50)
    args = p.parse_args(argv)
    lm = load_model(args.model)
    print(json.dumps(compare_scores(lm.model, lm.tokenizer, args.task, args.limit), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
