"""Estimates: memory, disk and time of a compression from its config.json alone (no torch), and the worker class it needs."""
