"""Next-token negative log-likelihood of token blocks: the one loss measured selection, the loss probe and
perplexity evaluation take.

The logits of a batch are never held whole: token_nll runs the head on head_chunk(vocab) positions at a time
(nbl/sizing/head.py), so a batch of 2,048 tokens on a 151,936-entry vocabulary holds ~128 MiB of logits, not
3.7 GB. Each position's loss depends on its own logits alone, so the chunks give the whole batch's losses.
"""

from __future__ import annotations

from typing import Callable

import torch

from nbl.sizing.head import head_chunk


@torch.no_grad()
def token_nll(
    hidden: torch.Tensor, logits_of: Callable[[torch.Tensor], torch.Tensor], targets: torch.Tensor, chunk: int
) -> torch.Tensor:
    """(B, T) float32 -log p(targets) of hidden states (B, T, d): `logits_of` maps (n, d) states to (n, V) logits
    (the final norm, the head, any soft cap), called on at most `chunk` positions at a time."""
    if chunk < 1:
        raise ValueError(f"chunk must be at least one position, got {chunk}")
    flat, want = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    parts = []
    for s in range(0, flat.shape[0], chunk):
        logits = logits_of(flat[s : s + chunk]).float()  # (n, V)
        parts.append(torch.nn.functional.cross_entropy(logits, want[s : s + chunk].to(logits.device), reduction="none"))
        del logits
    if not parts:
        return torch.zeros(targets.shape, dtype=torch.float32, device=hidden.device)
    return torch.cat([p.to(parts[0].device) for p in parts]).reshape(targets.shape)


@torch.no_grad()
def nll_sum(model, batch: torch.Tensor, start: int = 1) -> tuple[float, int]:
    """(Σ -log p(t_i | t_<i), number of predicted tokens) over a (B, T) batch of equal-length rows, for the
    positions i >= `start` (a prefix the tokenizer put there is not predicted): the decoder's last hidden states,
    then the head a chunk of positions at a time (as the causal LM's forward, soft cap included)."""
    hidden = model.get_decoder()(input_ids=batch, use_cache=False)[0][:, start - 1 : -1]  # (B, T-start, d)
    head, cap = model.get_output_embeddings(), getattr(model.config.get_text_config(), "final_logit_softcapping", None)

    def logits_of(h: torch.Tensor) -> torch.Tensor:
        logits = head(h)
        return torch.tanh(logits / cap) * cap if cap else logits

    target = batch[:, start:]
    nll = token_nll(hidden, logits_of, target, head_chunk(head.weight.shape[0]))
    return float(nll.double().sum()), target.numel()
