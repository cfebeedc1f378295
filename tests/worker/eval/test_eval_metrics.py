"""lm-eval's acc / acc_norm and their aggregation, on hand-made numbers."""

import math

import pytest

from worker.eval.metrics import aggregate, choice_metrics, mean_stderr, perplexity_of


def test_acc_and_acc_norm_can_disagree():
    # raw: choice 0 wins (-4 > -6); per character: choice 1 wins (-6/12 = -0.5 > -4/2 = -2)
    assert choice_metrics([-4.0, -6.0], [2, 12], label=1) == {"acc": 0.0, "acc_norm": 1.0}
    assert choice_metrics([-4.0, -6.0], [2, 12], label=0) == {"acc": 1.0, "acc_norm": 0.0}


def test_ties_go_to_the_first_choice():
    assert choice_metrics([-1.0, -1.0], [1, 1], label=0)["acc"] == 1.0
    assert choice_metrics([-1.0, -1.0], [1, 1], label=1)["acc"] == 0.0


def test_mean_and_sample_stderr():
    mean, se = mean_stderr([1.0, 0.0, 1.0, 1.0])
    assert mean == 0.75
    assert se == pytest.approx(math.sqrt((3 * 0.25**2 + 0.75**2) / 3 / 4))


def test_aggregate_reports_only_lm_evals_metrics():
    per_doc = [{"acc": 1.0, "acc_norm": 0.0}, {"acc": 0.0, "acc_norm": 0.0}]
    out = aggregate(per_doc, ("acc",))
    assert out["acc"] == 0.5 and out["acc_norm"] is None and out["n"] == 2
    assert aggregate(per_doc, ("acc", "acc_norm"))["acc_norm"] == 0.0
    with pytest.raises(ValueError):
        aggregate([], ("acc",))


def test_perplexity_of_loglikelihoods():
    assert perplexity_of([math.log(0.5), math.log(0.125)]) == pytest.approx(4.0)
