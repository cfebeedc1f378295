"""Task suites: the tasks a paper averages, which metric of each, and the average it reports.

`paper` is the NBL paper's suite (Erdogan et al. 2025, arXiv:2505.21077; design/method.md): MMLU
5-shot and ARC-e, ARC-c, BoolQ, HellaSwag, OBQA, PIQA, WinoGrande 0-shot, through
lm-evaluation-harness, averaged with equal weight per task.

Which metric per task: neither the paper's text nor its reference code (LIONS-EPFL/NBL,
scripts/benchmark/benchmark_lm_eval_*.sh runs stock `lm_eval` per task, whose table prints both acc
and acc_norm) says which one enters the average. We take acc_norm where lm-eval reports it (ARC-e,
ARC-c, HellaSwag, OBQA, PIQA) and acc elsewhere (BoolQ, MMLU, WinoGrande): the convention of the
LLM-Drop code NBL builds on (CASE-Lab-UMD/LLM-Drop checks its lm-eval setup on arc_challenge's
acc_norm) and of most layer-pruning papers. Both metrics stay in the report, task by task, for
anyone who averages otherwise.

A task of the suite whose data is absent (not shipped under NBL_DATA_DIR, not in the local Hugging
Face cache) is skipped and named; the average is then over the tasks that ran, and says so.
"""

from __future__ import annotations

SUITES: dict[str, tuple[tuple[str, str], ...]] = {
    "paper": (
        ("mmlu", "acc"),
        ("arc_easy", "acc_norm"),
        ("arc_challenge", "acc_norm"),
        ("boolq", "acc"),
        ("hellaswag", "acc_norm"),
        ("openbookqa", "acc_norm"),
        ("piqa", "acc_norm"),
        ("winogrande", "acc"),
    ),
}
ABSENT = "data absent: not shipped under NBL_DATA_DIR and not in the local Hugging Face cache"


def suite_tasks(name: str) -> tuple[str, ...]:
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; known: {', '.join(SUITES)}")
    return tuple(task for task, _ in SUITES[name])


def summary(name: str, tasks: dict[str, dict], skipped: dict[str, str]) -> dict:
    """The suite's report from per-task results ({task: {"acc", "acc_norm", ...}}):

        {"name", "average", "tasks_run", "tasks_total", "scores": {task: {"metric", "value"}}, "skipped": {task: why}}

    average = mean over the tasks that ran of each one's metric (None when none ran)."""
    scores = {}
    for task, metric in SUITES[name]:
        if task in skipped:
            continue
        value = tasks[task].get(metric)
        if value is None:  # a task lm-eval reports without acc_norm: its acc, as lm-eval's table shows
            metric, value = "acc", tasks[task]["acc"]
        scores[task] = {"metric": metric, "value": value}
    values = [s["value"] for s in scores.values()]
    return {
        "name": name,
        "average": sum(values) / len(values) if values else None,
        "tasks_run": len(scores),
        "tasks_total": len(SUITES[name]),
        "scores": scores,
        "skipped": dict(skipped),
    }
