"""Scores and LMMSE maps from each layer's sums (pure functions), and the scoring stage."""
