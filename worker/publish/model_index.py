"""The model card's model-index (its front matter's `eval_results`): every perplexity and task accuracy
of the evaluation, once for the base and once compressed, as huggingface_hub EvalResults. An evaluation
cut short by max_tokens or limit says how much it scored (worker/eval/truncation.py), in its
`dataset_args` ({"tokens": N, "corpus_tokens": M, "max_tokens": L} or {"documents": N, "limit": L}), so
a leaderboard reading the model-index does not mistake a sample for the whole test set.
"""

from __future__ import annotations

# model-index: (Hub dataset id, pretty name, config, split) of what worker.eval measures
PPL_DATASETS = {
    "wikitext2": ("Salesforce/wikitext", "WikiText-2", "wikitext-2-raw-v1", "test"),
    "c4": ("allenai/c4", "C4", "en", "validation"),
}
TASK_DATASETS = {
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy", "ARC-Easy", "test"),
    "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge", "ARC-Challenge", "test"),
    "hellaswag": ("Rowan/hellaswag", "HellaSwag", None, "validation"),
    "boolq": ("google/boolq", "BoolQ", None, "validation"),
    "openbookqa": ("allenai/openbookqa", "OpenBookQA", "main", "test"),
    "lambada_openai": ("EleutherAI/lambada_openai", "LAMBADA (OpenAI)", "default", "test"),
    "mmlu": ("cais/mmlu", "MMLU", "all", "test"),
}


def eval_results(metrics: dict, name: str, scored: dict[str, dict] | None = None) -> list:
    """model-index entries: every perplexity and task accuracy, once for the base and once compressed
    (told apart by the metric name, as model-index has one model per card); `scored`: the evaluations
    cut short, by section ("perplexity/wikitext2"), and how much they scored."""
    from huggingface_hub import EvalResult

    out = []
    for variant, label in (("base", "base model"), ("compressed", name)):
        flat = metrics.get(variant) or {}
        for key, value in sorted(flat.items()):
            parts = key.split("/")
            if value is None or len(parts) != 3:
                continue
            section, what, metric = parts
            if section == "perplexity" and metric == "ppl":
                ds = PPL_DATASETS.get(what, (what, what, None, None))
                mtype, task = "perplexity", "text-generation"
            elif section == "tasks" and metric in ("acc", "acc_norm"):
                ds = TASK_DATASETS.get(what, (what, what, None, None))
                mtype, task = ("accuracy" if metric == "acc" else "acc_norm"), "text-generation"
            else:
                continue
            out.append(
                EvalResult(
                    task_type=task,
                    dataset_type=ds[0],
                    dataset_name=ds[1],
                    dataset_config=ds[2],
                    dataset_split=ds[3],
                    metric_type=mtype,
                    metric_value=float(value),
                    metric_name=f"{what} {metric} ({label})",
                    dataset_args=(scored or {}).get(f"{section}/{what}"),
                )
            )
    return out
