"""Next-token negative log-likelihood of token blocks: the one loss both the loss probe and
perplexity evaluation sum."""

from __future__ import annotations

import torch


@torch.no_grad()
def nll_sum(model, batch: torch.Tensor) -> tuple[float, int]:
    """(Σ -log p(t_i | t_<i), number of predicted tokens) over a (B, T) batch of equal-length rows."""
    logits = model(input_ids=batch, use_cache=False).logits[:, :-1].float()  # (B, T-1, V)
    target = batch[:, 1:]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum")
    return float(nll), target.numel()
