"""One model's evaluation as one fraction, reported often enough to check for a cancel.

The parts (each perplexity corpus, each task, the speed runs) are weighted by their expected tokens, the
estimate's own figures (nbl/sizing/model.py); inside a part, by the windows or batches done. A
perplexity window of 2048 tokens can take over ten seconds on a CPU, so while a forward runs a pre-hook
on every decoder layer re-reports the current fraction (`beating`): the reporter (the job's sink) writes
at most once a second, and checks for a cancel when it writes.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from nbl.sizing.model import EVAL_TOKENS_PER_CORPUS, TASK_DOCS, TASK_TOKENS_PER_DOC

SPEED_TOKENS = 8192  # the speed runs' weight: a few prefills and decodes


def part_weights(spec) -> list[float]:
    """The expected tokens of each part of an EvalSpec, in evaluate_model's order: corpora, tasks (named,
    the suite's others, task files), speed."""
    task_tokens = (spec.limit or TASK_DOCS) * TASK_TOKENS_PER_DOC
    n_tasks = len(spec.tasks) + len(spec.suite_only()) + len(spec.task_files)
    return (
        [float(spec.max_tokens or EVAL_TOKENS_PER_CORPUS)] * len(spec.perplexity)
        + [float(task_tokens)] * n_tasks
        + ([float(SPEED_TOKENS)] if spec.speed else [])
    )


class Steps:
    """`report(fraction)` of one model's evaluation, from its parts' (done, total) counts and, inside a batch,
    from the decoder layers its forward has passed (a batch of one 2048-token window is the whole of a small
    evaluation: counted by batches alone, the stage said 0 % until it ended)."""

    def __init__(self, weights: list[float], report: Callable[[float], None] | None):
        self.weights, self.report = weights, report
        self.total = sum(weights) or 1.0
        self.before = 0.0  # the weight of the parts done
        self.current = 0  # the index of the part running
        self.done, self.count = 0, 0  # its batches done, of how many (0: not said yet)
        self.fraction = 0.0

    def part(self, index: int) -> Callable[[int, int], None]:
        """The (done, total) callback of part `index`; the parts before it count as done. A part may call it
        with (0, total) before its first batch, so that the layers of that batch count too."""
        self.before, self.current, self.done, self.count = sum(self.weights[:index]), index, 0, 0
        self._say(self.before / self.total)

        def tick(done: int, total: int) -> None:
            self.done, self.count = done, max(total, 1)
            self._say((self.before + self.weights[index] * done / self.count) / self.total)

        return tick

    def beat(self, within: float = 0.0) -> None:
        """Re-reports the fraction while a forward runs; `within`: the share of the current batch's forward
        done (the decoder layers passed), counted once the part said its batches."""
        if self.count and self.weights:
            self._say((self.before + self.weights[self.current] * (self.done + within) / self.count) / self.total)
        else:
            self._say(self.fraction)

    def finish(self) -> None:
        self._say(1.0)

    def _say(self, fraction: float) -> None:
        self.fraction = min(max(fraction, self.fraction), 1.0)
        if self.report is not None:
            self.report(self.fraction)


def decoder_layers(model) -> list:
    """The decoder layers of a causal LM (model.model.layers in every family we load), else none."""
    return list(getattr(getattr(model, "model", None), "layers", None) or [])


@contextmanager
def beating(model, beat: Callable[[float], None] | None) -> Iterator[None]:
    """`beat(i / L)` before decoder layer i's forward (of L) while inside (nothing when beat is None)."""
    layers = decoder_layers(model)
    hooks = (
        []
        if beat is None
        else [layer.register_forward_pre_hook(lambda *_, i=i: beat(i / len(layers))) for i, layer in enumerate(layers)]
    )
    try:
        yield
    finally:
        for h in hooks:
            h.remove()
