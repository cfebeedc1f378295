"""Measured selection and the per-layer scores: request parts, set counts, the rise's error, the shown result."""
