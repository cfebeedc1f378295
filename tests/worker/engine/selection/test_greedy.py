"""The greedy criterion: a set's loss from its first replaced layer on equals the whole model's with that set
replaced, and the greedy choice equals a brute-force greedy over every single layer and every pair, measured
on the whole model, for every family."""

import itertools

import pytest
import torch
from testkit.models import FAMILY_CONFIGS, family_param, save_tiny_checkpoint, tiny_model

from worker.engine.calibration.calibrate import calibrate
from worker.engine.calibration.layer_source import CheckpointLayers
from worker.engine.forms import surgery
from worker.engine.scoring.likelihood import nll_sum
from worker.engine.scoring.stage import fit_maps, score_stage
from worker.engine.selection.greedy import Greedy, candidate_order
from worker.engine.selection.set_loss import SetLoss


def whole_model_loss(model, blocks, plan, maps):
    with surgery.replaced(model, plan, maps):
        total, count = nll_sum(model, blocks)
    return total / count


@pytest.mark.parametrize("family", [family_param(f) for f in sorted(FAMILY_CONFIGS)])
@pytest.mark.parametrize("mode,method", [("attn", "nbl"), ("block", "drop")])
def test_greedy_equals_brute_force_on_the_whole_model(family, mode, method):
    model = tiny_model(family, layers=4)
    g = torch.Generator().manual_seed(1)
    blocks, sel = torch.randint(2, 120, (8, 16), generator=g), torch.randint(2, 120, (4, 16), generator=g)
    maps = (
        fit_maps(calibrate(model, blocks, batch_size=4, progress=False).stats, mode, range(4))
        if method == "nbl"
        else {}
    )
    brute = {
        s: whole_model_loss(model, sel, surgery.Plan(mode, method, s), maps)
        for r in (1, 2)
        for s in itertools.combinations(range(4), r)
    }
    set_loss = SetLoss(model, sel, mode, method, maps, batch_size=3)
    for s, want in brute.items():
        assert set_loss(s) == pytest.approx(want, rel=1e-6), s
    first = min(range(4), key=lambda i: (brute[(i,)], i))
    pairs = [tuple(sorted((first, j))) for j in range(4) if j != first]
    best_pair = min(pairs, key=lambda p: (brute[p], p))
    greedy = Greedy(range(4), set_loss, width=4)
    assert greedy.layers(1) == [first]
    assert greedy.layers(2) == list(best_pair)
    assert greedy.steps[1]["tried"] == pytest.approx(
        {j: brute[tuple(sorted((first, j)))] for j in range(4) if j != first}
    )


def test_set_loss_from_a_checkpoint_read_layer_by_layer_equals_the_model_in_memory(tmp_path):
    model = tiny_model("qwen3", layers=4)
    path = save_tiny_checkpoint(tmp_path / "m", "qwen3", layers=4)
    sel = torch.randint(2, 120, (3, 16), generator=torch.Generator().manual_seed(2))
    in_memory = SetLoss(model, sel, "block", "drop", None)
    from_disk = SetLoss(CheckpointLayers(path, torch.float32), sel, "block", "drop", None)
    assert from_disk.base == pytest.approx(in_memory.base, rel=1e-6)
    assert from_disk((1, 3)) == pytest.approx(in_memory((1, 3)), rel=1e-6)
    assert sorted(from_disk.inputs) == [0, 1]  # only the layers a set started at


def test_greedy_sees_interactions_that_a_per_layer_ranking_misses():
    # Layers 0 and 1 are each harmless alone but ruinous together; 2 and 3 cost a little each.
    cost = {0: 0.1, 1: 0.1, 2: 0.3, 3: 0.3}
    loss = lambda s: sum(cost[i] for i in s) + (5.0 if {0, 1} <= set(s) else 0.0)  # noqa: E731
    greedy = Greedy([0, 1, 2, 3], loss, width=4)
    assert greedy.layers(2) == [0, 2]
    assert greedy.layers(3) == [0, 2, 3]
    assert [s["added"] for s in greedy.steps] == [0, 2, 3]


def test_the_width_bounds_the_candidates_tried_per_step():
    calls = []
    greedy = Greedy([3, 1, 0, 2], lambda s: calls.append(s) or -len(s) + 0.01 * sum(s), width=2)
    assert greedy.layers(2) == [0, 1]  # step 1 tries 3 and 1 only, keeps 1; step 2 tries 3 and 0, keeps 0
    assert calls == [(3,), (1,), (1, 3), (0, 1)]  # layer 2, last in the order, is never tried
    with pytest.raises(ValueError, match="width"):
        Greedy([0], len, width=0)


def test_candidate_order_interleaves_the_cheap_criteria():
    model = tiny_model("llama", layers=4)
    blocks = torch.randint(2, 120, (8, 16), generator=torch.Generator().manual_seed(0))
    scores = score_stage(calibrate(model, blocks, batch_size=4, progress=False).stats)
    order = candidate_order(scores, "attn")
    assert sorted(order) == [0, 1, 2, 3]
    from worker.engine.selection.criteria import ranking

    assert set(order[:1]) <= {ranking(scores, "attn", c)[0] for c in ("cca", "cosine", "nmse")}
    assert set(ranking(scores, "attn", c)[0] for c in ("cca", "cosine", "nmse")) <= set(order[:3])
