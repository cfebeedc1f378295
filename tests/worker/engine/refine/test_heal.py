"""Healing (worker/engine/refine/heal.py) on a tiny random Llama: the top-K KL is the KL when K covers the vocabulary;
training lowers it, changes only the maps, stops at its bounds, leaves the base model as it was, and a healed
output saves and reloads to the logits of the compressed model in memory."""

import copy

import pytest
import torch
from testkit.models import save_tiny_checkpoint, tiny_model, tiny_tokenizer

from worker.engine.calibration.calibrate import calibrate
from worker.engine.forms.saving import write_compressed
from worker.engine.forms.surgery import Plan, replaced
from worker.engine.refine.heal import heal, kl_top_k, teacher_targets
from worker.engine.scoring.stage import fit_maps


def _blocks(n, seed):
    return torch.randint(2, 128, (n, 24), generator=torch.Generator().manual_seed(seed))


def _sampled(model, n, seed):
    """Text the teacher writes (random ids carry nothing a student could learn to predict)."""
    torch.manual_seed(seed)
    return model.generate(
        torch.zeros(n, 1, dtype=torch.long), do_sample=True, max_new_tokens=23, min_new_tokens=23, pad_token_id=1
    )


def _setup(mode="attn", layers=(1, 2)):
    model = tiny_model(layers=4)
    cal = calibrate(model, _blocks(8, 0), batch_size=4, progress=False, modes=(mode,))
    return model, Plan(mode, "nbl", layers), fit_maps(cal.stats, mode, layers)


def test_top_k_kl_is_the_kl_when_k_is_the_vocabulary():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(2, 5, 11, generator=g), torch.randn(2, 5, 11, generator=g)
    top = torch.topk(t, 11, dim=-1)
    want = (
        torch.nn.functional.kl_div(
            torch.log_softmax(s, -1), torch.log_softmax(t, -1), log_target=True, reduction="none"
        )
        .sum(-1)
        .mean()
    )
    assert torch.allclose(kl_top_k(s, top.values, top.indices), want, atol=1e-6)
    assert float(kl_top_k(t, top.values, top.indices)) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("mode", ["attn", "block"])
def test_healing_lowers_the_loss_and_changes_only_the_maps(mode):
    model, plan, maps = _setup(mode)
    before = copy.deepcopy(model.state_dict())
    train, held = _sampled(model, 6, 1), _sampled(model, 2, 2)
    targets = teacher_targets(model, train)
    assert targets.values.shape == (6, 23, 64) and targets.indices.shape == (6, 23, 64)
    seen = []
    out = heal(
        model,
        plan,
        maps,
        train,
        held,
        targets,
        steps=30,
        lr=3e-3,
        on_step=lambda done, total, loss: seen.append((done, total)),
    )
    assert out.steps == 30 and out.tokens == 30 * 24 and seen[-1] == (30, 30)
    assert sum(out.losses[-6:]) < sum(out.losses[:6])  # the same six blocks, at the start and at the end
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the base, untouched
    assert all(p.requires_grad for p in model.parameters())  # as it was handed in
    assert out.kept and out.ppl_after < out.ppl_before  # on text of the teacher's, held out
    assert all(not torch.equal(out.maps[i].weight, maps[i].weight) for i in plan.layers)


def test_each_step_averages_enough_blocks_to_cover_the_training_text_once():
    model, plan, maps = _setup()
    train, held = _sampled(model, 6, 1), _sampled(model, 2, 2)
    targets = teacher_targets(model, train)
    out = heal(model, plan, maps, train, held, targets, steps=2, lr=3e-3)
    assert out.steps == 2 and out.tokens == 2 * 3 * 24
    # The first step's loss is the mean KL of the first three blocks under the maps as fitted.
    with replaced(model, plan, maps), torch.no_grad():
        want = (
            sum(
                float(
                    kl_top_k(
                        model(train[b : b + 1]).logits[:, :-1], targets.values[b : b + 1], targets.indices[b : b + 1]
                    )
                )
                for b in range(3)
            )
            / 3
        )
    assert out.losses[0] == pytest.approx(want, rel=1e-4)


def test_healing_stops_at_its_time_bound_and_keeps_maps_that_do_not_help():
    model, plan, maps = _setup()
    train, held = _blocks(4, 1), _blocks(1, 2)
    out = heal(model, plan, maps, train, held, teacher_targets(model, train), steps=1000, max_seconds=1e-9)
    assert out.steps == 1
    # One step over every block (steps=1): the bound and a cancel act after the block that crosses it, not the step.
    long = heal(model, plan, maps, train, held, teacher_targets(model, train), steps=1, max_seconds=1e-9)
    assert long.steps == 1 and long.tokens == 24
    seen = []
    heal(
        model,
        plan,
        maps,
        train,
        held,
        teacher_targets(model, train),
        steps=1,
        on_step=lambda done, total, loss: seen.append((done, total)),
    )
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    worse = heal(model, plan, maps, train, held, teacher_targets(model, train), steps=5, lr=10.0)  # diverges
    assert not worse.kept and worse.ppl_after > worse.ppl_before and worse.maps == maps


@pytest.mark.parametrize("mode", ["attn", "block"])
def test_a_heal_that_helps_its_own_text_but_raises_the_guards_is_not_kept(mode):
    """The guard (the job's selection data) sees what the held-out healing text cannot: here the compressed model's
    own greedy text, which healing toward the teacher makes less likely while the held-out text gains."""
    model, plan, maps = _setup(mode)
    train, held = _sampled(model, 6, 1), _sampled(model, 2, 2)
    with replaced(model, plan, maps):
        guard = model.generate(
            torch.full((2, 1), 5),
            attention_mask=torch.ones(2, 1, dtype=torch.long),
            do_sample=False,
            max_new_tokens=23,
            min_new_tokens=23,
            pad_token_id=1,
        )
    targets = teacher_targets(model, train)
    alone = heal(model, plan, maps, train, held, targets, steps=30, lr=3e-3)
    guarded = heal(model, plan, maps, train, held, targets, steps=30, lr=3e-3, guard=guard)
    assert alone.kept and "guard_perplexity_before" not in alone.record()
    assert guarded.ppl_after < guarded.ppl_before  # the held-out text alone would keep it, as above
    assert guarded.guard_after > guarded.guard_before and not guarded.kept and guarded.maps == maps
    rec = guarded.record()
    assert (rec["guard_perplexity_before"], rec["guard_perplexity_after"], rec["kept"]) == (
        round(guarded.guard_before, 4),
        round(guarded.guard_after, 4),
        False,
    )


def test_a_healed_output_saves_and_reloads_to_the_logits_in_memory(tmp_path):
    path = save_tiny_checkpoint(tmp_path / "base", layers=4)
    model, plan, maps = _setup()
    model.load_state_dict(tiny_model(layers=4).state_dict())
    train, held = _blocks(4, 1), _blocks(1, 2)
    out = heal(model, plan, maps, train, held, teacher_targets(model, train), steps=8, lr=3e-3)
    healed = out.maps if out.kept else {i: type(m)(m.weight + 0.01, m.bias, m.ridge) for i, m in out.maps.items()}
    write_compressed(
        path, plan.as_config(), healed, torch.float32, tiny_tokenizer(), tmp_path / "out", "llama", {"layers": []}
    )
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "out", trust_remote_code=True, dtype=torch.float32)
    ids = _blocks(2, 3)
    with torch.no_grad(), replaced(model, plan, healed):
        want = model(ids).logits
    with torch.no_grad():
        assert torch.allclose(reloaded(ids).logits, want, atol=1e-5)
