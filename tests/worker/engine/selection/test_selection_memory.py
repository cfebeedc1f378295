"""Measured selection in bounded host memory (issue 37, large vocabularies): the greedy's cached states keep no
autograd graph, and the set losses and the loss probe take the head's logits a chunk of positions at a time.
Before: a Qwen2.5-0.5B-shaped greedy was killed at 22.3 GB (bench/results/memory_vocab.md).
"""

import pytest
import torch
from testkit.models import tiny_model

from nbl.sizing.head import head_chunk
from worker.engine.calibration.calibrate import calibrate
from worker.engine.forms import surgery
from worker.engine.scoring.stage import fit_maps
from worker.engine.selection.greedy import Greedy
from worker.engine.selection.loss_probe import loss_rise
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


BIG_VOCAB = 50_000  # 223 positions a chunk; a batch of 4 selection blocks has 60


@torch.no_grad()
def full_logits_losses(model, blocks):
    """(blocks,) mean next-token loss from the causal LM's logits of every position at once."""
    logits = model(input_ids=blocks, use_cache=False).logits[:, :-1].float()
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), blocks[:, 1:], reduction="none").mean(dim=1)


def head_rows(model):
    rows = []
    model.lm_head.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[:-1].numel()))
    return rows


@pytest.mark.parametrize("family", ["qwen2", "gemma2"])
def test_set_losses_take_the_head_a_chunk_at_a_time(family):
    model = tiny_model(family, layers=2, vocab=BIG_VOCAB)
    sel = torch.randint(2, BIG_VOCAB, (8, 128), generator=torch.Generator().manual_seed(4))  # 2 batches of 508
    rows = head_rows(model)
    loss = SetLoss(model, sel, "attn", "drop", None, batch_size=4)
    assert rows and max(rows) <= head_chunk(BIG_VOCAB) < 4 * 127  # before: one call per batch of 508 positions
    torch.testing.assert_close(loss.per_block(()), full_logits_losses(model, sel).double(), rtol=1e-5, atol=1e-5)


def test_loss_probe_takes_the_head_a_chunk_at_a_time():
    model = tiny_model("llama", layers=2, vocab=BIG_VOCAB)
    held = torch.randint(2, BIG_VOCAB, (4, 128), generator=torch.Generator().manual_seed(5))
    rows = head_rows(model)
    rises = loss_rise(model, held, "attn", "drop", batch_size=4, progress=False)
    assert rows and max(rows) <= head_chunk(BIG_VOCAB)
    base = float(full_logits_losses(model, held).double().mean())
    for i in range(2):
        with surgery.replaced(model, surgery.Plan("attn", "drop", (i,)), {}):
            want = float(full_logits_losses(model, held).double().mean()) - base
        assert rises[i] == pytest.approx(want, rel=1e-4, abs=1e-5)
