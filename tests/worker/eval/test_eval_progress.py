"""The evaluation stage reports its own progress (issue 38 item 1): inside a batch of windows, from the decoder
layers its forward has passed, so one model's evaluation of a single window (a small job's whole evaluation)
moves from 0 to 1 instead of staying at "stage 0 %" until it ends (worker/eval/steps.py)."""

import pytest
from testkit.models import tiny_model, tiny_tokenizer

from worker.eval.perplexity import perplexity
from worker.eval.steps import Steps, beating, decoder_layers

pytestmark = pytest.mark.usefixtures("one_thread")
TEXT = "The quick brown fox jumps over the lazy dog. " * 3


def test_one_window_reports_each_layer_it_passes():
    model, tok = tiny_model(vocab=128), tiny_tokenizer(bos=True)
    seen: list[float] = []
    steps = Steps([1.0], seen.append)
    with beating(model, steps.beat):
        perplexity(model, tok, TEXT, window=256, progress=False, on_window=steps.part(0))  # one window
    steps.finish()
    inside = sorted({round(f, 4) for f in seen if 0 < f < 1})
    assert len(inside) >= len(decoder_layers(model)) - 1  # a step per layer of the one forward
    assert seen == sorted(seen) and seen[-1] == 1.0  # never back


def test_parts_before_their_count_stay_where_they_are():
    """A beat before a part said its batches (a task still loading) re-reports the fraction, no guess."""
    seen: list[float] = []
    steps = Steps([1.0, 3.0], seen.append)
    steps.part(0)(1, 1)  # the first part, done: a quarter
    steps.part(1)
    steps.beat(0.5)
    assert seen[-1] == 0.25
    tick = steps.part(1)
    tick(0, 2)  # two batches
    steps.beat(0.5)  # half of the first batch: a quarter of the part
    assert seen[-1] == pytest.approx(0.25 + 0.75 * 0.25)
