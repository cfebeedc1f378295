"""Calibration: the data, the layer-by-layer pass over the model and its float64 sums, their cache."""
