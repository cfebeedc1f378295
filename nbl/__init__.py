"""The words every part shares: the recipe of a job, score fields, selection sets, dataset names, task
records, the typed result, gates, sizing, name grammars, the webhook URL rules and those of a local output
folder (its disk quota and file manifest).

The bottom layer: service/, worker/ and cli/ stand on it, and it imports none of them, nor torch or a
database (tests/test_layers.py), so the API, the engine and `nbl compress` read the same definitions.
"""
