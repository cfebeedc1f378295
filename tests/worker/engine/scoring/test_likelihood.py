"""The next-token loss a chunk of positions at a time (issue 37, large vocabularies): the same losses as the whole
batch's logits, to float rounding, with the head never given more than head_chunk(vocab) positions."""

import pytest
import torch
from testkit.models import tiny_model

from nbl.sizing.head import HEAD_CHUNK_BYTES, head_chunk
from worker.engine.scoring.likelihood import nll_sum, token_nll

VOCAB = 50_000  # 223 positions a chunk: a batch of 4 x 64 tokens takes two


@torch.no_grad()
def full_logits_nll(model, batch):
    """The unchunked loss: the causal LM's own logits for every position at once."""
    logits = model(input_ids=batch, use_cache=False).logits[:, :-1].float()
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch[:, 1:], reduction="none")  # (B, T-1)


def head_rows(model):
    """The positions each call of the LM head received."""
    rows = []
    model.get_output_embeddings().register_forward_hook(lambda m, args, out: rows.append(args[0].shape[:-1].numel()))
    return rows


def test_chunks_fit_the_budget():
    assert head_chunk(151_936) == HEAD_CHUNK_BYTES // (151_936 * 12) == 73
    assert head_chunk(10**9) == 1  # one position even when its logits exceed the budget
    with pytest.raises(ValueError, match="vocabulary"):
        head_chunk(0)


@pytest.mark.parametrize("chunk", [1, 7, 64, 10_000])
def test_token_nll_equals_the_whole_batch_loss(chunk):
    g = torch.Generator().manual_seed(0)
    hidden, head = torch.randn(3, 20, 16, generator=g), torch.randn(300, 16, generator=g)
    targets = torch.randint(0, 300, (3, 20), generator=g)
    want = torch.nn.functional.cross_entropy((hidden @ head.T).transpose(1, 2), targets, reduction="none")
    got = token_nll(hidden, lambda h: h @ head.T, targets, chunk)
    assert got.shape == (3, 20)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gemma2"])  # gemma2: the soft cap is applied per chunk
def test_nll_sum_chunks_the_head_and_keeps_the_loss(family):
    model = tiny_model(family, layers=2, vocab=VOCAB)
    batch = torch.randint(2, VOCAB, (4, 64), generator=torch.Generator().manual_seed(1))
    want = full_logits_nll(model, batch)
    rows = head_rows(model)
    total, count = nll_sum(model, batch)
    assert count == 4 * 63
    assert len(rows) > 1 and max(rows) <= head_chunk(VOCAB)  # before: one call on all 252 positions
    assert total == pytest.approx(float(want.double().sum()), rel=1e-5)
