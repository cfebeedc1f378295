"""The real SmolLM2-135M: evaluation reports before every decoder layer's forward, so a reporter that
raises (the job's sink on a cancel) stops it inside a 2048-token window. Slow (the GGUF's conversion,
about 30 s on 2 cores), so marked; CI runs it. Scoring's reports are tested on tiny models
(test_job_progress.py: calibrating SmolLM2 to fill a statistics cache took over two minutes here); the
latencies of a real deployment are measured by bench/progress_smollm2.py."""

from __future__ import annotations

import pytest
from testkit.models import DATA_DIR, load_smollm2

from worker.eval.compare import evaluate_outputs
from worker.eval.evaluate import EvalSpec
from worker.pipeline_io import Cancelled

pytestmark = pytest.mark.slow


class CancelAt:
    """A reporter that raises Cancelled at the `n`-th report of `stage`, as the sink does on a cancel."""

    def __init__(self, stage: str, n: int):
        self.stage, self.n, self.seen = stage, n, []

    def __call__(self, stage: str, fraction: float, message: str) -> None:
        if stage == self.stage:
            self.seen.append(fraction)
            if len(self.seen) == self.n:
                raise Cancelled("cancelled by request")


def test_evaluation_reports_inside_a_window(smollm2_home):
    lm = load_smollm2(smollm2_home)
    evaluate = CancelAt("evaluate", 20)
    with pytest.raises(Cancelled):
        evaluate_outputs(
            lm,
            {},
            EvalSpec(perplexity=("wikitext2",), max_tokens=4096),
            use_cache=False,
            report=evaluate,
            data_dir=DATA_DIR,
        )
    # 20 reports before the first of two 2048-token windows is done: one before each of its 30 layers; since issue
    # 38 each also moves the stage's fraction (1/60: 2 windows x 30 layers), so it no longer sits at 0 % a window long
    assert len(evaluate.seen) == 20 and evaluate.seen == sorted(evaluate.seen)
    assert 0 < evaluate.seen[-1] < 0.5  # moved, and still inside the first window
