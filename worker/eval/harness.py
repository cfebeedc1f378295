"""Score a task on a model: every continuation through the shared scorer, then lm-eval's metrics."""

from __future__ import annotations

from typing import Callable

from .benchmarks.task import LOGLIKELIHOOD, Task
from .loglikelihood import loglikelihoods
from .metrics import aggregate, choice_metrics, perplexity_of


def run_task(
    model,
    tokenizer,
    task: Task,
    batch_tokens: int = 2048,
    progress: bool = False,
    on_batch: Callable[[int, int], None] | None = None,
) -> dict:
    """{"acc", "acc_norm", "n", ...} of `task`; LAMBADA-style tasks add "ppl". `on_batch(done, total)`
    after each batch of continuations (it may raise to cancel)."""
    pairs = [pair for d in task.docs for pair in d.pairs()]
    results = loglikelihoods(model, tokenizer, pairs, batch_tokens, progress, on_batch=on_batch)
    per_doc, lls_target, at = [], [], 0
    for d in task.docs:
        n = len(d.pairs())
        res, at = results[at : at + n], at + n
        if task.kind == LOGLIKELIHOOD:
            ll, greedy = res[d.label]
            per_doc.append({"acc": float(greedy)})
            lls_target.append(ll)
        else:
            per_doc.append(choice_metrics([ll for ll, _ in res], list(d.choice_lengths), d.label))
    out = aggregate(per_doc, task.metrics)
    if task.kind == LOGLIKELIHOOD:
        out["ppl"] = perplexity_of(lls_target)
    return out
