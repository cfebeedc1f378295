"""The card's figure marks the cut: for a ranked criterion a threshold between the k-th and (k+1)-th ranked
values, for the greedy a second panel of the selection perplexity after each step, cut at k."""

from __future__ import annotations

import json
import math
import struct

import pytest

from worker.engine.selection.auto_k import Chooser
from worker.engine.selection.criteria import choose
from worker.publish.plot import chosen_by, cut_value, plot_series, score_plot
from worker.publish.plot_selection import greedy_panel

# 6 layers: cca ranks 0, 1, 2, ...; cosine (highest first) 4, 5, 3, ...; nmse 2, 3, 4, ...
SCORES = [
    {"layer": i, "attn": {"cca_bound": a, "cosine": c, "nmse": n}}
    for i, (a, c, n) in enumerate(
        zip([0.1, 0.2, 0.4, 0.8, 1.6, 3.2], [0.0, 0.1, 0.2, 0.3, 0.9, 0.7], [3, 4, 0, 1, 2, 5])
    )
]
COST = {0: 0.5, 1: 0.4, 2: 0.05, 3: 0.3, 4: 0.01, 5: 0.2}  # the synthetic set loss adds these


def loss(layers):
    return 2.0 + sum(COST[i] for i in layers)


def ranked(criterion: str, k: int, **recipe) -> dict:
    layers = choose(SCORES, "attn", criterion, k) if 0 < k < len(SCORES) else list(range(k))
    return {"recipe": {"mode": "attn", "criterion": criterion, **recipe}, "replaced_layers": layers, "layers": SCORES}


def measured(criterion: str, budget: float | None = None, k: int = 2) -> dict:
    """A report as the engine writes it after a measured selection (auto_k.Chooser.record)."""
    ch = Chooser(SCORES, "attn", criterion, loss, base_loss=2.0, width=6)
    k = ch.auto_k(budget) if budget is not None else k
    chosen = {k: ch.layers(k)}
    recipe = {"mode": "attn", "criterion": criterion, **({"max_ppl_increase": budget} if budget is not None else {})}
    return {
        "recipe": recipe,
        "replaced_layers": chosen[k][0],
        "layers": SCORES,
        "selection": ch.record({"source": "calibration held-out"}, 31, chosen),
    }


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


@pytest.mark.parametrize(
    "criterion, k, cut",
    [
        ("cca", 2, (0.2 + 0.4) / 2),
        ("cca", 5, (1.6 + 3.2) / 2),
        ("cosine", 1, (0.9 + 0.7) / 2),
        ("cosine", 3, (0.3 + 0.2) / 2),
        ("nmse", 2, (1 + 2) / 2),
    ],
)
def test_the_cut_lies_between_the_kth_and_next_ranked_values(criterion, k, cut):
    report = ranked(criterion, k)
    field, layers, values, chosen = plot_series(report)
    assert cut_value(report) == pytest.approx(cut)
    inside = [v for i, v in zip(layers, values) if i in chosen]
    outside = [v for i, v in zip(layers, values) if i not in chosen]
    if criterion == "cosine":  # higher first: the replaced lie above the line
        assert min(inside) > cut_value(report) > max(outside)
    else:
        assert max(inside) < cut_value(report) < min(outside)


@pytest.mark.parametrize("k", [0, 6])
def test_no_cut_when_nothing_or_everything_is_replaced(tmp_path, k):
    report = ranked("cca", k)
    assert cut_value(report) is None
    assert score_plot(report, tmp_path / "p.png") == tmp_path / "p.png" and png_size(tmp_path / "p.png")[1] < 500


def test_no_cut_when_the_replaced_layers_are_not_the_rankings_first():
    report = {**ranked("cca", 2), "replaced_layers": [0, 3]}  # not what cca ranks first: no line would separate them
    assert cut_value(report) is None


def test_a_nan_score_ranks_last_and_at_the_cut_draws_nothing():
    scores = [{"layer": i, "attn": {"cca_bound": v}} for i, v in enumerate([0.3, math.nan, 0.1])]
    report = {"recipe": {"mode": "attn", "criterion": "cca"}, "replaced_layers": [0, 2], "layers": scores}
    assert cut_value(report) is None
    assert cut_value({**report, "replaced_layers": [2]}) == pytest.approx(0.2)


def test_auto_won_by_a_ranked_criterion_plots_the_winners_field_and_cut(tmp_path):
    report = measured("auto", k=1)  # cosine and greedy both pick layer 4 at k=1: cosine, the first of equals, wins
    assert chosen_by(report) == "cosine" and plot_series(report)[0] == "cosine"
    assert cut_value(report) == pytest.approx((0.9 + 0.7) / 2)
    assert greedy_panel(report) is not None  # the steps are recorded, but the greedy did not choose: one panel
    assert png_size(score_plot(report, tmp_path / "p.png"))[1] < 500


def test_greedy_plots_cca_with_its_layers_and_a_panel_of_steps_cut_at_k(tmp_path):
    report = measured("greedy", k=2)
    field, layers, values, chosen = plot_series(report)
    assert chosen_by(report) == "greedy" and field == "cca_bound" and chosen == {2, 4}
    assert cut_value(report) is None  # no ranking cut these layers
    panel = greedy_panel(report)
    assert panel.steps == [1, 2] and panel.added == [4, 2] and set(panel.added[: panel.k]) == chosen
    assert panel.ppl == pytest.approx([math.exp(2.01), math.exp(2.06)])
    assert panel.base_ppl == pytest.approx(math.exp(2.0)) and panel.budget_ppl is None and panel.cut == 2.5
    assert png_size(score_plot(report, tmp_path / "p.png"))[1] > 600  # two panels


def test_k_auto_draws_the_budget_and_the_cut_where_the_perplexity_leaves_it():
    budget = math.expm1(0.3)  # within exp(2.3): layers 4, 2, 5 (+0.26); adding 3 (+0.56) is over
    report = measured("auto", budget=budget)
    assert chosen_by(report) == "greedy" and report["replaced_layers"] == [2, 4, 5]
    panel = greedy_panel(report)
    assert panel.k == 3 and panel.cut == 3.5 and panel.added[:3] == [4, 2, 5]
    assert len(panel.steps) > 3  # bisection grew the greedy past the k it kept
    assert panel.budget_ppl == pytest.approx(panel.base_ppl * (1 + budget))
    assert max(panel.ppl[:3]) <= panel.budget_ppl < panel.ppl[3]


def test_a_step_without_a_finite_perplexity_is_a_gap(tmp_path):
    report = measured("greedy", k=2)
    report["selection"]["greedy_steps"][1]["heldout_ppl"] = None  # what the record holds for an infinite loss
    assert math.isnan(greedy_panel(report).ppl[1])
    assert score_plot(report, tmp_path / "p.png")


def test_the_same_report_draws_the_same_bytes(tmp_path):
    report = json.loads(json.dumps(measured("auto", budget=math.expm1(0.3))))  # as read back from nbl_scores.json
    a, b = score_plot(report, tmp_path / "a.png"), score_plot(report, tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()


def test_nbl_compress_greedy_with_k_auto_records_the_budget_and_draws_two_panels(tmp_path, text_file, tiny_dir):
    from cli.main import main

    out = tmp_path / "out"
    assert (
        main(
            [
                "compress",
                "--model",
                str(tiny_dir),
                "--dataset",
                str(text_file),
                "--num-samples",
                "12",
                "--seq-len",
                "32",
                "--criterion",
                "greedy",
                "--k",
                "auto",
                "--max-ppl-increase",
                "1e9",
                "--out",
                str(out),
                "--json",
                "--no-load-check",
            ]
        )
        == 0
    )
    report = json.loads((out / "nbl_scores.json").read_text())
    assert report["recipe"]["max_ppl_increase"] == 1e9
    panel = greedy_panel(report)
    assert panel.k == len(report["replaced_layers"]) and panel.budget_ppl == pytest.approx(panel.base_ppl * (1 + 1e9))
    assert png_size(out / "nbl_scores.png")[1] > 600


def test_the_card_draws_scores_as_the_dashboard_does():
    """Cosine as 1 − cosine on a log axis, lower = more skippable (issue 38: the card read "higher = more
    skippable" on a linear 0–1 axis beside the dashboard's 1 − cosine); the cut follows."""
    from worker.publish.plot import drawing

    report = ranked("cosine", 1)
    d = drawing(report, plot_series(report))
    assert d["log"] and "1 − cosine" in d["label"] and "lower = more skippable" in d["label"]
    assert min(d["heights"]) > d["floor"]  # the most skippable layer is a bar, not the axis
    assert d["heights"][4] == pytest.approx(0.1) and d["cut"] == pytest.approx(1 - (0.9 + 0.7) / 2)
    assert d["heights"][4] < d["cut"] < min(h for i, h in enumerate(d["heights"]) if i != 4)  # replaced: below
    flat = {"recipe": {"mode": "block", "criterion": "cca"}, "replaced_layers": [0],
            "layers": [{"layer": i, "block": {"cca_bound": v}} for i, v in enumerate((380.0, 395.0, 408.0))]}  # fmt: skip
    d = drawing(flat, plot_series(flat))
    assert 370 < d["ylim"][0] < 380 and d["floor"] == d["ylim"][0]  # zoomed: the bars' differences show
