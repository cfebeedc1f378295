"""Which layers to replace: one-shot criteria, measured selection (greedy, auto, k auto), the loss probe."""
