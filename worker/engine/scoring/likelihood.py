"""Next-token negative log-likelihood of token blocks: the one loss both the loss probe and
perplexity evaluation sum."""

from __future__ import annotations

import torch


@torch.no_grad()
def nll_sum(model, batch: torch.Tensor, start: int = 1) -> tuple[float, int]:
    """(Σ -log p(t_i | t_<i), number of predicted tokens) over a (B, T) batch of equal-length rows, for the
    positions i >= `start` (a prefix the tokenizer put there is not predicted)."""
    logits = model(input_ids=batch, use_cache=False).logits[:, start - 1 : -1].float()  # (B, T-start, V)
    target = batch[:, start:]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum")
    return float(nll), target.numel()
