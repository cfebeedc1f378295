"""The refine stage in the estimates (nbl/sizing/refine.py): its token-layers in the job's stage plan (progress and
ETA), its time in the estimate's range, and healing's whole model in the memory of its phase."""

from __future__ import annotations

from testkit.model_configs import LLAMA_8B

from nbl.recipe import Calibration, Compression, Heal, Recipe, Selection
from nbl.refine_schema import heal_split
from nbl.sizing.model import estimate
from nbl.sizing.options import Options
from nbl.sizing.refine import guard_blocks, heal_bytes, refine_token_layers
from nbl.sizing.shapes import shape_of
from nbl.sizing.stage_plan import STAGES, plan


def test_the_stage_plan_prices_refine_between_select_and_compress():
    assert STAGES.index("select") < STAGES.index("refine") < STAGES.index("compress")
    plain = plan(Recipe("m", Compression(ks=(4, 8))), 30)
    assert plain["refine"].weight == 0
    refit = plan(Recipe("m", Compression(ks=(4, 8), refit="sequential")), 30)
    tokens = 256 * 2048
    assert refit["refine"].weight == tokens * (30 + 4) + tokens * (30 + 8)  # a pass to the end, plus the k sweeps
    healed = plan(Recipe("m", Compression(ks=(4,), heal=Heal(tokens=65536, steps=10))), 30)["refine"].weight
    longer = plan(Recipe("m", Compression(ks=(4,), heal=Heal(tokens=65536, steps=40))), 30)["refine"].weight
    assert 0 < healed < longer


def test_heal_costs_three_forwards_a_step_and_a_teacher_pass():
    n_train, n_held = heal_split(10_000, 1000)
    assert (n_train, n_held) == (9, 1)
    heal = Heal(tokens=10_000, steps=5)
    got = refine_token_layers(8, 1000, 10, (2, 3), "none", heal, head_layers=1)
    assert got == 9 * 1000 * 11 + 2 * (3 * 5 * 2 + 2 * 1) * 1000 * 11  # 5 steps of 2 of the 9 blocks each
    more = refine_token_layers(8, 1000, 10, (2, 3), "none", Heal(tokens=10_000, steps=20), head_layers=1)
    assert more == 9 * 1000 * 11 + 2 * (3 * 20 + 2 * 1) * 1000 * 11  # more steps than blocks: one a step


def test_the_heals_guard_costs_two_forwards_of_the_selection_blocks_per_output():
    heal = Heal(tokens=10_000, steps=5)
    plain = refine_token_layers(8, 1000, 10, (2, 3), "none", heal, head_layers=1)
    assert refine_token_layers(8, 1000, 10, (2, 3), "none", heal, head_layers=1, guard_blocks=4) == (
        plain + 2 * 2 * 4 * 1000 * 11
    )
    cal = Calibration(dataset="c4")
    assert guard_blocks(cal, None) == 0
    assert guard_blocks(cal, Selection(dataset="wikitext2", num_samples=16)) == 16
    assert guard_blocks(cal, Selection(dataset="c4", split=cal.split, num_samples=16)) == 0  # the healing text itself
    recipe = Recipe("m", Compression(ks=(4,), heal=heal), selection=Selection(dataset="wikitext2", num_samples=16))
    assert plan(recipe, 30)["refine"].weight > plan(Recipe("m", Compression(ks=(4,), heal=heal)), 30)["refine"].weight


def test_healing_holds_the_whole_model_and_takes_longer():
    shape = shape_of(LLAMA_8B)
    base = Options(num_samples=128, seq_len=2048, ks=(8,), perplexity=("wikitext2",))
    healed = Options(
        num_samples=128, seq_len=2048, ks=(8,), perplexity=("wikitext2",), heal=Heal(tokens=1 << 20, steps=200)
    )
    cpu, cpu_healed = estimate(shape, base, ["cpu"]), estimate(shape, healed, ["cpu"])
    assert "refine" not in cpu.phases and "refine" in cpu_healed.phases
    extra = heal_bytes(shape.hidden, shape.intermediate, shape.layers, shape.vocab, 2048, healed.heal, (8,), 4)
    assert cpu_healed.phases["refine"]["host"] >= shape.params * 4 + extra
    assert cpu_healed.host_bytes >= cpu.host_bytes and cpu_healed.seconds[0] > cpu.seconds[0]
    refit = estimate(shape, Options(num_samples=128, seq_len=2048, ks=(8,), refit="sequential"), ["cpu"])
    assert refit.seconds[0] > estimate(shape, Options(num_samples=128, seq_len=2048, ks=(8,)), ["cpu"]).seconds[0]
