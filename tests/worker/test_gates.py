"""The quality gates' arithmetic (worker/gates.py), pure: relative perplexity rise, absolute accuracy drop,
missing or non-finite numbers failing, and which outputs may be published."""

from __future__ import annotations

import math

import pytest

from nbl.recipe import Gates
from worker import gates as G
from worker.errors import classify

PPL, ACC = "perplexity/wikitext2/ppl", "tasks/arc_easy/acc"
METRICS = {
    "base": {PPL: 20.0, ACC: 0.60},
    "k4": {PPL: 21.9, ACC: 0.59},  # +9.5 %, -0.01: passes both
    "k8": {PPL: 22.2, ACC: 0.59},  # +11 %: fails the perplexity gate
    "k12": {PPL: 21.0, ACC: 0.57},  # -0.03: fails the accuracy gate
}
GATES = Gates(max_ppl_increase={"wikitext2": 0.10}, max_acc_drop={"arc_easy": 0.02})


def test_checks_compare_each_output_with_the_base():
    found = G.checks(GATES, METRICS, ["k4", "k8", "k12"])
    assert [(c["output"], c["metric"], c["passed"]) for c in found] == [
        ("k4", PPL, True),
        ("k4", ACC, True),
        ("k8", PPL, False),
        ("k8", ACC, True),
        ("k12", PPL, True),
        ("k12", ACC, False),
    ]
    ppl = found[2]
    assert ppl["base"] == 20.0 and ppl["value"] == 22.2 and ppl["limit"] == pytest.approx(22.0)
    assert ppl["gate"] == "max_ppl_increase" and ppl["allowed"] == 0.10
    assert found[5]["limit"] == pytest.approx(0.58)
    assert G.passing(found, ["k4", "k8", "k12"]) == ["k4"]
    assert G.summary(found) == {"passed": True, "checks": found}


def test_a_bound_reached_exactly_passes():
    exact = {"base": {PPL: 10.0, ACC: 0.5}, "k1": {PPL: 10.0 * 1.25, ACC: 0.5 - 0.25}}
    found = G.checks(Gates({"wikitext2": 0.25}, {"arc_easy": 0.25}), exact, ["k1"])
    assert all(c["passed"] for c in found)


@pytest.mark.parametrize(
    "base,value", [(20.0, None), (20.0, math.nan), (20.0, math.inf), (None, 20.0), (math.nan, 20.0)]
)
def test_a_number_that_is_missing_or_not_finite_passes_nothing(base, value):
    (check,) = G.checks(Gates({"wikitext2": 0.5}), {"base": {PPL: base}, "k1": {PPL: value}}, ["k1"])
    assert check["passed"] is False
    assert all(x is None or math.isfinite(x) for x in (check["base"], check["value"], check["limit"]))  # JSON-safe


def test_an_improvement_passes_and_no_output_passing_is_a_quality_failure():
    better = {"base": {PPL: 20.0}, "k1": {PPL: 19.0}, "k2": {PPL: 30.0}}
    found = G.checks(Gates({"wikitext2": 0.0}), better, ["k1", "k2"])
    assert [c["passed"] for c in found] == [True, False]
    failed = G.checks(Gates({"wikitext2": 0.0}), better, ["k2"])
    assert G.summary(failed)["passed"] is False
    err = G.QualityFailure(failed)
    assert "k2 perplexity/wikitext2/ppl 30 > 20 (base 20, at most +0%)" in str(err)
    failure = classify(err)
    assert failure.type == "quality" and "k2 perplexity/wikitext2/ppl" in failure.message and not failure.retry


class Sink:
    def __init__(self):
        self.warnings, self.stored = [], []

    def warning(self, message):
        self.warnings.append(message)

    def gates(self, result):
        self.stored.append(result)


def test_apply_keeps_the_passing_outputs_and_warns_of_the_others(tmp_path):
    outputs = {4: tmp_path / "k4", 8: tmp_path / "k8", 12: tmp_path / "k12"}
    sink = Sink()
    assert G.apply(GATES, outputs, METRICS, sink) == {4: tmp_path / "k4"}
    assert len(sink.stored) == 1 and sink.stored[0]["passed"] is True and len(sink.stored[0]["checks"]) == 6
    assert [w.split(":")[0] for w in sink.warnings] == ["k=8 is not published", "k=12 is not published"]
    assert "tasks/arc_easy/acc 0.57 < 0.58" in sink.warnings[1]

    sink = Sink()
    with pytest.raises(G.QualityFailure) as e:
        G.apply(GATES, {8: outputs[8], 12: outputs[12]}, METRICS, sink)
    assert sink.stored[0]["passed"] is False and e.value.checks == sink.stored[0]["checks"]
    assert G.apply(None, outputs, METRICS, sink) == outputs and G.apply(Gates(), outputs, {}, sink) == outputs


def test_a_quantized_copy_is_held_to_its_own_bounds_and_holds_its_output_back(tmp_path):
    """gates.quantized (publish.quantize): each copy "k4+w4a16" against the unquantized base, with bounds of its own;
    a copy that fails holds its output back, and when every output is held back the job fails as quality."""
    gates = Gates(max_ppl_increase={"wikitext2": 0.20}, quantized=Gates(max_ppl_increase={"wikitext2": 0.30}))
    metrics = {
        **METRICS,
        "k4+w4a16": {PPL: 25.9},  # +29.5 % against the base's 20: passes 0.30
        "k8+w4a16": {PPL: 26.2},  # +31 %: fails, though k8 itself (+11 %) passes 0.20
    }
    outputs = {4: tmp_path / "k4", 8: tmp_path / "k8"}
    sink = Sink()
    assert G.apply(gates, outputs, metrics, sink, schemes=("w4a16",)) == {4: tmp_path / "k4"}
    checks = sink.stored[0]["checks"]
    assert [(c["output"], c["passed"]) for c in checks] == [
        ("k4", True),
        ("k8", True),
        ("k4+w4a16", True),
        ("k8+w4a16", False),
    ]
    assert checks[3]["limit"] == pytest.approx(26.0) and sink.warnings[0].startswith("k=8 is not published")
    assert "k8+w4a16 perplexity/wikitext2/ppl 26.2 > 26" in sink.warnings[0]
    # without the quantized bounds, or with no copies made, only the outputs' own gates count
    assert G.apply(Gates(max_ppl_increase={"wikitext2": 0.20}), outputs, metrics, Sink(), schemes=("w4a16",)) == outputs
    sink = Sink()
    with pytest.raises(G.QualityFailure):
        G.apply(gates, {8: outputs[8]}, metrics, sink, schemes=("w4a16",))
    assert sink.stored[0]["passed"] is False
