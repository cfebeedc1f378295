"""lm-eval's per-document metrics and their aggregation, as pure functions.

For a multiple-choice document with log-likelihoods ll_i and choice lengths n_i (characters):

    acc      = [argmax_i ll_i       == label]
    acc_norm = [argmax_i ll_i / n_i == label]        (ties go to the first choice, as np.argmax)

A log-likelihood task (LAMBADA) scores acc = [the target is the greedy continuation] and
ppl = exp(-mean ll). Means carry lm-eval's standard error, sample std / sqrt(n).
"""

from __future__ import annotations

import math

import numpy as np


def choice_metrics(lls: list[float], lengths: list[int], label: int) -> dict[str, float]:
    lls_a = np.asarray(lls, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # an empty context of a multiple-input doc: acc only
        norm = lls_a / np.asarray(lengths, dtype=np.float64)
    return {"acc": float(np.argmax(lls_a) == label), "acc_norm": float(np.argmax(norm) == label)}


def mean_stderr(values: list[float]) -> tuple[float, float | None]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def aggregate(per_doc: list[dict[str, float]], metrics: tuple[str, ...]) -> dict:
    """{"acc", "acc_stderr", "acc_norm", "acc_norm_stderr", "n"}; a metric lm-eval does not report is None."""
    if not per_doc:
        raise ValueError("no documents to aggregate")
    out: dict = {"n": len(per_doc)}
    for name in ("acc", "acc_norm"):
        if name in metrics:
            out[name], out[f"{name}_stderr"] = mean_stderr([d[name] for d in per_doc])
        else:
            out[name] = out[f"{name}_stderr"] = None
    return out


def perplexity_of(lls: list[float]) -> float:
    return math.exp(-sum(lls) / len(lls))
