"""Measured selection in bounded host memory (issue 37, large vocabularies): the greedy's cached states keep no
autograd graph. Before: a Qwen2.5-0.5B-shaped greedy was killed at 22.3 GB (bench/results/memory_vocab.md).
"""

import torch
from testkit.models import tiny_model

from worker.engine.calibration.calibrate import calibrate
from worker.engine.scoring.stage import fit_maps
from worker.engine.selection.greedy import Greedy
from worker.engine.selection.set_loss import SetLoss

VOCAB = 1000


def setup(layers=4, family="llama", vocab=VOCAB):
    model = tiny_model(family, layers=layers, vocab=vocab)
    g = torch.Generator().manual_seed(3)
    blocks, sel = torch.randint(2, vocab, (12, 16), generator=g), torch.randint(2, vocab, (8, 16), generator=g)
    maps = fit_maps(calibrate(model, blocks, batch_size=4, progress=False).stats, "attn", range(layers))
    return model, sel, maps


def test_greedy_states_keep_no_autograd_graph():
    # Greedy calls warm() outside per_block's no_grad: its cached states kept every layer's saved activations
    # for a backward that never comes (~100 KB a token a layer on the Qwen2.5-0.5B shape)
    model, sel, maps = setup()
    loss = SetLoss(model, sel, "attn", "nbl", maps, batch_size=4)
    Greedy(range(4), loss, width=1, z=None).layers(3)  # one candidate a step: 0, then 1 and 2 on it
    assert loss.cache.prefixed  # warm ran
    cached = [t for entry in (*loss.cache.prefixed.values(), *loss.cache.base.values()) for t in entry]
    assert cached and not any(t.requires_grad or t.grad_fn is not None for t in cached)
