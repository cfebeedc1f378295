"""Cheaper measured selection: a greedy step's candidate sets run from their own layer on the chosen set's cached
states, and racing drops candidates that cannot win before every block is scored. Neither changes a loss that is
reported as measured on every block, and on a tiny model neither changes the layers chosen."""

import math

import pytest
import torch
from testkit.models import tiny_model

from worker.engine.calibration.calibrate import calibrate
from worker.engine.scoring.stage import fit_maps
from worker.engine.selection.greedy import Greedy
from worker.engine.selection.prefix_cache import PrefixCache
from worker.engine.selection.race import race, schedule
from worker.engine.selection.set_loss import SetLoss


def setup(layers=6, n_sel=8, family="llama"):
    model = tiny_model(family, layers=layers)
    g = torch.Generator().manual_seed(3)
    blocks, sel = torch.randint(2, 120, (12, 16), generator=g), torch.randint(2, 120, (n_sel, 16), generator=g)
    maps = fit_maps(calibrate(model, blocks, batch_size=4, progress=False).stats, "attn", range(layers))
    return model, sel, maps


@pytest.mark.slow  # 16 s per family under load; make test runs it
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_warm_prefixes_give_the_same_losses_for_fewer_layer_passes(family):
    model, sel, maps = setup(family=family)
    plain = SetLoss(model, sel, "attn", "nbl", maps, batch_size=2)
    cheap = SetLoss(model, sel, "attn", "nbl", maps, batch_size=2)
    slow = Greedy(range(6), lambda s: plain(s), width=6, z=None)  # a plain function: no warm, no race
    fast = Greedy(range(6), cheap, width=6, z=None)  # warm only
    assert fast.layers(4) == slow.layers(4)
    for a, b in zip(fast.steps, slow.steps):
        assert a["tried"] == pytest.approx(b["tried"], rel=1e-6)
    assert cheap.cache.prefixed  # the chosen sets' states at the candidates' layers were kept
    assert cheap.layer_passes < plain.layer_passes
    for key, value in plain.memo.items():  # every set, scored either way, has the same loss
        assert cheap(key) == pytest.approx(value, rel=1e-6)


@pytest.mark.slow  # 40 s under load; make test runs it
def test_racing_keeps_the_choice_and_scores_the_winners_on_every_block():
    model, sel, maps = setup(n_sel=16)
    plain = SetLoss(model, sel, "attn", "nbl", maps, batch_size=1)
    raced = SetLoss(model, sel, "attn", "nbl", maps, batch_size=1)
    slow = Greedy(range(6), lambda s: plain(s), width=6, z=None)
    fast = Greedy(range(6), raced, width=6)  # the engine's default: warm and race
    assert fast.layers(3) == slow.layers(3)
    for step in fast.steps:
        chosen = tuple(sorted(s["added"] for s in fast.steps[: fast.steps.index(step) + 1]))
        assert step["loss"] == pytest.approx(plain(chosen), rel=1e-6)  # the winner: its full mean
    assert raced.layer_passes <= plain.layer_passes


def test_race_drops_a_clearly_worse_candidate_after_the_first_round():
    g = torch.Generator().manual_seed(0)
    noise = torch.randn(32, generator=g, dtype=torch.float64) * 0.01
    losses = {"good": 2.0 + noise, "close": 2.001 + noise.flip(0), "bad": 3.0 + noise}
    calls = []

    def per_block(c, n):  # one block per batch
        calls.append((c, n))
        return losses[c][:n]

    out = race(["good", "close", "bad"], per_block, 32)
    assert schedule(32) == [8, 16, 32]
    assert out["bad"] == {"loss": pytest.approx(float(losses["bad"][:8].mean())), "blocks": 8, "full": False}
    assert out["good"]["full"] and out["good"]["blocks"] == 32
    assert ("bad", 16) not in calls
    # a difference within the noise is never dropped on few blocks
    assert race(["good", "close"], per_block, 3) == {
        c: {"loss": pytest.approx(float(losses[c][:3].mean())), "blocks": 3, "full": True} for c in ("good", "close")
    }


def test_race_keeps_nan_last_and_never_wins_it():
    out = race(["nan", "ok"], lambda c, n: torch.full((n,), math.nan if c == "nan" else 1.0, dtype=torch.float64), 8)
    assert out["ok"]["full"] and not out["nan"]["full"]


def test_prefix_cache_is_bounded_and_finds_the_deepest_valid_entry():
    cache = PrefixCache(max_bytes=3 * 4 * 10)
    cache.put(((), 0), [torch.zeros(10)])
    cache.put(((), 2), [torch.zeros(10)])
    for j in (3, 4, 5):
        cache.put(((1,), j), [torch.zeros(10)])
    assert cache.best_start((1, 4)) == ((1,), 4)  # (1,) applied below 4, then 4 itself is replaced
    assert cache.best_start((1, 3)) == ((1,), 3)
    assert cache.best_start((0, 4)) == ((), 0)  # layer 0 differs from every prefix
    assert cache.best_start((2, 5)) == ((), 2)
    assert cache.best_start((1, 4), limit=3) == ((1,), 3)
    cache.put(((0,), 5), [torch.zeros(10)])  # over the bound: the oldest goes
    assert ((1,), 3) not in cache and ((0,), 5) in cache and cache.bytes <= cache.max_bytes
