"""Evaluation of base and compressed models: perplexity, tasks (benchmarks/), speed."""
