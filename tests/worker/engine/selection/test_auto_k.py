"""criterion auto and k auto over a synthetic set loss: the lowest loss wins at each k, and bisection finds the
largest k within the budget, recording every k it tried."""

import math

import pytest

from worker.engine.selection.auto_k import Chooser


def scores(cca, cosine, nmse):
    return [
        {"layer": i, "attn": {"cca_bound": a, "cosine": c, "nmse": n}}
        for i, (a, c, n) in enumerate(zip(cca, cosine, nmse))
    ]


# 6 layers: cca ranks 0, 1, 2, ...; cosine (highest first) 4, 5, 3, ...; nmse 2, 3, 4, ...; the loss adds COST.
SCORES = scores(cca=[0, 1, 2, 3, 4, 5], cosine=[0, 1, 2, 3, 5, 4], nmse=[3, 4, 0, 1, 2, 5])
COST = {0: 0.5, 1: 0.4, 2: 0.05, 3: 0.3, 4: 0.01, 5: 0.2}


def loss(s):
    return 2.0 + sum(COST[i] for i in s)


def test_auto_keeps_the_lowest_loss_of_the_four_criteria_at_each_k():
    ch = Chooser(SCORES, "attn", "auto", loss, base_loss=2.0, width=6)
    assert ch.layers(2) == ([2, 4], "greedy")
    at2 = {t["criterion"]: t for t in ch.tried if t["k"] == 2}
    assert at2["cca"]["layers"] == [0, 1] and at2["cosine"]["layers"] == [4, 5] and at2["nmse"]["layers"] == [2, 3]
    assert at2["greedy"]["heldout_ppl"] == pytest.approx(math.exp(2.06))
    assert ch.layers(1) == ([4], "cosine")  # cosine and greedy both pick layer 4: the first of equals wins
    assert len(ch.tried) == 8 and ch.layers(2) == ([2, 4], "greedy") and len(ch.tried) == 8  # once per k


def test_a_fixed_criterion_is_measured_but_not_replaced():
    ch = Chooser(SCORES, "attn", "cca", loss, base_loss=2.0)
    assert ch.layers(2) == ([0, 1], "cca")
    assert [t["criterion"] for t in ch.tried] == ["cca"] and ch.tried[0]["heldout_ppl"] == pytest.approx(math.exp(2.9))


def test_k_auto_is_the_largest_k_within_the_budget_by_doubling_then_bisection():
    ch = Chooser(SCORES, "attn", "auto", loss, base_loss=2.0, width=6)
    # best set per k: 0.01, 0.06, 0.26 (greedy 2, 4, 5), 0.56, 0.96; a budget of e^0.3 - 1 allows k = 3
    k = ch.auto_k(math.expm1(0.3))
    assert k == 3
    assert sorted({t["k"] for t in ch.tried}) == [1, 2, 3, 4]  # doubled 1, 2 (fit), 4 (does not), then 3 fits
    rec = ch.record({"source": "x"}, 100, {k: ch.layers(k)})
    assert (
        rec["k"] == 3
        and rec["criterion"] == "greedy"
        and rec["tokens"] == 100
        and rec["base_ppl"] == pytest.approx(math.e**2)
    )
    assert {(t["k"], t["criterion"]) for t in rec["tried"]} == {
        (k, c) for k in (1, 2, 3, 4) for c in ("cca", "cosine", "nmse", "greedy")
    }
    assert rec["chosen"] == [{"k": 3, "criterion": "greedy", "layers": [2, 4, 5]}]


def test_k_auto_with_no_k_within_the_budget_says_so():
    ch = Chooser(SCORES, "attn", "greedy", loss, base_loss=2.0)
    with pytest.raises(ValueError, match="no k is within the budget"):
        ch.auto_k(0.001)  # even layer 4 alone costs 0.01 in loss, a 1% rise
    with pytest.raises(ValueError, match="positive"):
        ch.auto_k(0)


def test_the_expected_sets_price_the_selection_and_a_measured_job_plans_a_select_stage():
    from nbl.recipe import Calibration, Compression, Recipe, Selection
    from worker.engine.selection.auto_k import expected_sets
    from worker.progress import plan

    assert expected_sets("cca", [4], 30) == 2  # the base and one set
    assert expected_sets("greedy", [2], 4, width=8) == 1 + 4 + 3  # every layer, then the three left
    assert expected_sets("auto", [2, 4], 30, width=8) == 1 + 4 * 8 + 2 * 3
    ch = Chooser(SCORES, "attn", "auto", loss, base_loss=2.0, width=6)
    ch.layers(2)  # measured: 6 + 5 greedy sets and 3 fixed ones, some the same set
    assert len({tuple(t["layers"]) for t in ch.tried} | {(i,) for i in range(6)}) <= expected_sets("auto", [2], 6, 6)

    def job(criterion, selection=None, ks=(4,), **kw):
        return Recipe(
            model="local:m",
            compression=Compression(ks=ks, criterion=criterion, **kw),
            calibration=Calibration(num_samples=40, seq_len=256),
            selection=selection,
        )

    assert plan(job("cca"), 30)["select"].weight == 0  # a per-layer criterion measures no sets
    held, sel = (
        plan(job("greedy"), 30)["select"],
        plan(job("greedy", selection=Selection("wikitext2", num_samples=8)), 30)["select"],
    )
    assert held.units == sel.units == expected_sets("greedy", (4,), 30) and sel.weight == pytest.approx(2 * held.weight)
    auto_k = plan(job("cosine", ks=(), max_ppl_increase=0.1), 30)
    assert auto_k["select"].units == expected_sets("cosine", (), 30, k_auto=True) and auto_k["compress"].units == 1


@pytest.mark.parametrize("n_layers", [2, 3, 7, 30, 33])
def test_k_auto_finds_the_largest_fitting_k_for_every_threshold_and_measures_the_k_above_it(n_layers):
    """Any monotone loss curve and any budget: the k found is the last that fits, k + 1 was measured and failed
    (unless k is L - 1), and the greedy is never grown past twice the k found."""
    scores = [
        {"layer": i, "attn": {"cca_bound": float(i), "cosine": 1.0 - i / 100, "nmse": float(i)}}
        for i in range(n_layers)
    ]
    for answer in range(1, n_layers):
        ch = Chooser(scores, "attn", "greedy", lambda layers: 2.0 + 0.1 * len(layers), base_loss=2.0, width=2)
        k = ch.auto_k(math.expm1(0.1 * answer + 0.05))
        tried = {t["k"] for t in ch.tried}
        assert k == answer and (k + 1 in tried or k == n_layers - 1), (n_layers, answer, sorted(tried))
        assert len(ch.greedy.chosen) <= 2 * k
