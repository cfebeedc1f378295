"""How many positions go through the LM head at once when a loss is taken (engine/scoring/likelihood.token_nll).

A loss needs every vocabulary entry of a position's logits, but not every position's at once: the head runs on
`head_chunk(vocab)` positions at a time, so a loss holds at most HEAD_CHUNK_BYTES of logits whatever the batch.
A whole batch's would be tokens x vocab x 12 bytes: 3.7 GB for 2,048 tokens on Qwen's 151,936 entries. Pure: no
torch (the engine imports it, the estimate prices it).
"""

from __future__ import annotations

HEAD_CHUNK_BYTES = 128 << 20
# Bytes per position and vocabulary entry while a chunk's loss is taken: the logits (at most float32), their
# float32 copy and the log-softmax cross_entropy takes the target's entry from.
LOGIT_ENTRY_BYTES = 12


def head_chunk(vocab: int, budget: int = HEAD_CHUNK_BYTES) -> int:
    """Positions per LM-head pass: as many as fit `budget`, at least one."""
    if vocab < 1:
        raise ValueError(f"vocabulary size must be positive, got {vocab}")
    return max(1, budget // (vocab * LOGIT_ENTRY_BYTES))


def head_chunk_bytes(vocab: int, dtype_bytes: int) -> int:
    """Host (or device) bytes of one chunk's logits and loss: its positions x vocab x (the logits in the model's
    dtype, the float32 copy, the log-softmax)."""
    return head_chunk(vocab) * vocab * (dtype_bytes + 4 + 4)
